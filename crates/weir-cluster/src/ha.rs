//! High availability for the job manager: the checkpoint id counter and the completed
//! checkpoint store in ZooKeeper, written with the leader's fencing token.

use weir_checkpoint::{CheckpointIdCounter, CompletedCheckpointStore, Discard};
use weir_core::CheckpointId;
use weir_ha::{FencingToken, ZooKeeperHaServices};
use weir_runtime::error::JobError;
use weir_runtime::HighAvailabilityServices;
use weir_storage::CheckpointStorage;

/// One leadership term's services: what the executor's coordinator uses in place of its
/// standalone counter and store.
pub struct LeaderServices {
    pub services: ZooKeeperHaServices,
    pub token: FencingToken,
}

fn ha_error(e: weir_ha::HaError) -> JobError {
    JobError::Failed(format!("high availability: {e}"))
}

impl HighAvailabilityServices for LeaderServices {
    fn checkpoint_id_counter(
        &mut self,
        max_id: CheckpointId,
    ) -> Result<Box<dyn CheckpointIdCounter>, JobError> {
        let counter = self
            .services
            .checkpoint_id_counter_after(&self.token, max_id)
            .map_err(ha_error)?;
        Ok(Box::new(counter))
    }

    fn completed_checkpoint_store(
        &mut self,
        storage: &CheckpointStorage,
        num_retained: u32,
    ) -> Result<(Box<dyn CompletedCheckpointStore>, Vec<Discard>), JobError> {
        let (store, evicted) = self
            .services
            .recover_completed_checkpoint_store(&self.token, storage.clone(), num_retained)
            .map_err(ha_error)?;
        if let Some(latest) = store.latest() {
            tracing::info!(checkpoint = %latest.id, retained = store.all().len(), "recovered the completed checkpoints ZooKeeper records");
        }
        Ok((Box::new(store), evicted))
    }
}
