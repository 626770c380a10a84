//! What a running job reports about itself, and how it ended.

use std::time::Duration;
use weir_checkpoint::CheckpointStats;
use weir_core::CheckpointId;

/// The last completed checkpoint, as progress shows it.
#[derive(Clone, Copy, Debug)]
pub struct LastCheckpoint {
    pub id: CheckpointId,
    pub duration_ms: u64,
    pub size_bytes: u64,
}

/// A running job's progress, reported about twice a second.
#[derive(Clone, Debug)]
pub struct JobProgress {
    pub elapsed: Duration,
    /// Records emitted by all sources.
    pub records: u64,
    /// Source records per second over the last report interval.
    pub records_per_second: f64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub last_checkpoint: Option<LastCheckpoint>,
}

/// How a job ended.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub job_name: String,
    pub elapsed: Duration,
    pub records: u64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub last_checkpoint: Option<LastCheckpoint>,
    pub restored_from: Option<CheckpointId>,
    /// Restarts after failures.
    pub restarts: u32,
    /// Per restart: milliseconds from the failure to the first record processed after it.
    pub recovery_ms: Vec<u64>,
    /// The job was cancelled (no final checkpoint).
    pub cancelled: bool,
    /// Completed checkpoints left in storage, oldest first.
    pub retained: Vec<CheckpointId>,
    pub stats: CheckpointStats,
}
