//! Where a job's checkpoint ids and completed checkpoints live when they must outlive the
//! process that runs the job (high availability: ZooKeeper, in a cluster).

use weir_checkpoint::{CheckpointIdCounter, CompletedCheckpointStore, Discard};
use weir_core::CheckpointId;
use weir_storage::CheckpointStorage;

use crate::error::JobError;

/// Where a job's checkpoint ids and completed checkpoints are kept when they must outlive the
/// job manager (high availability: ZooKeeper). Without, ids are seeded from checkpoint storage
/// and completed checkpoints found there.
pub trait HighAvailabilityServices {
    /// The id counter, which must hand out ids above `max_id` (the highest in storage).
    fn checkpoint_id_counter(
        &mut self,
        max_id: CheckpointId,
    ) -> Result<Box<dyn CheckpointIdCounter>, JobError>;
    /// The completed checkpoint store as recorded, and what to delete for checkpoints beyond
    /// `num_retained`. The job restores from its latest checkpoint.
    fn completed_checkpoint_store(
        &mut self,
        storage: &CheckpointStorage,
        num_retained: u32,
    ) -> Result<(Box<dyn CompletedCheckpointStore>, Vec<Discard>), JobError>;
}
