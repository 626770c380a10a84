//! How to run a job: checkpointing, batching, restarts, and where the job starts from.

use std::time::Duration;
use weir_core::config::{CheckpointConfig, StateBackendConfig};

use crate::injection::FailureInjection;
use crate::restart::RestartStrategy;

/// What to do with checkpoints already in the job's checkpoint directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// Start new; refuse if checkpoints exist (nobody loses state by accident).
    New,
    /// Delete existing checkpoints, then start new.
    Fresh,
    /// Continue from the latest intact checkpoint.
    Resume,
}

/// How to run a job.
#[derive(Clone, Debug)]
pub struct ExecutionConfig {
    pub checkpoint: CheckpointConfig,
    /// Where keyed operators keep their state (`state.backend.*`). The default comes from the
    /// `WEIR_STATE_BACKEND_*` environment variables, else the heap.
    pub state_backend: StateBackendConfig,
    pub start: StartMode,
    /// Records per batch.
    pub batch_size: usize,
    /// Batches a channel holds before its producer blocks.
    pub channel_capacity: usize,
    /// The longest a record waits in a partly filled batch.
    pub buffer_timeout: Duration,
    /// Workers for the asynchronous part of snapshots (see [`crate::snapshot`]). A worker spends
    /// much of a snapshot waiting on `fsync`; while every worker waits, the next subtask's
    /// frozen key groups wait with them, and the task's writes to those take the slower
    /// copy-on-write path. Four workers keep one free for encoding in practice.
    pub snapshot_threads: usize,
    pub restart: RestartStrategy,
    pub failure_injection: Option<FailureInjection>,
    /// Where savepoints go when a request names no directory.
    pub savepoint_dir: Option<std::path::PathBuf>,
    /// Start from this savepoint (or retained checkpoint directory).
    pub from_savepoint: Option<std::path::PathBuf>,
    /// Skip state whose operator uid is no longer in the job, instead of refusing to start.
    pub allow_non_restored_state: bool,
    pub claim_mode: ClaimMode,
}

/// Who owns the snapshot a job was started from (Flink's restore modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClaimMode {
    /// The snapshot stays the user's: never deleted, never referenced after the first
    /// checkpoint (which is a full one).
    #[default]
    NoClaim,
    /// Weir takes the snapshot over and deletes it once a newer checkpoint completed.
    Claim,
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        ExecutionConfig {
            checkpoint: CheckpointConfig::default(),
            state_backend: StateBackendConfig::from_env().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "ignoring the state backend set in the environment");
                StateBackendConfig::default()
            }),
            start: StartMode::New,
            batch_size: 1024,
            channel_capacity: 8,
            buffer_timeout: Duration::from_millis(100),
            snapshot_threads: 4,
            restart: RestartStrategy::None,
            failure_injection: None,
            savepoint_dir: None,
            from_savepoint: None,
            allow_non_restored_state: false,
            claim_mode: ClaimMode::NoClaim,
        }
    }
}
