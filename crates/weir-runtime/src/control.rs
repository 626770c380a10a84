//! Messages between subtasks, the coordinator's driver and the executor.

use weir_checkpoint::{AckMetrics, JobStatus, TaskStatus};
use weir_core::{Barrier, CheckpointId, CheckpointKind, SubtaskId, SubtaskState};

/// A message to one subtask's task loop. Handled between batches, never inside one.
#[derive(Debug, Clone)]
pub enum TaskControl {
    /// Sources only: start checkpoint `barrier`. With `finish`, the source emits nothing after
    /// the barrier and ends its input: the job stops with this as its final checkpoint.
    Trigger {
        barrier: Barrier,
        finish: bool,
    },
    /// Sources only: end input now, without a checkpoint.
    Finish,
    NotifyComplete(CheckpointId),
    NotifyAborted(CheckpointId),
    /// Stop at once (failure elsewhere, or job cancelled).
    Cancel,
    /// The job is done: leave the task loop.
    Shutdown,
}

/// A message to the checkpoint coordinator's driver.
#[derive(Debug)]
pub enum CoordinatorMessage {
    Ack {
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        metrics: AckMetrics,
    },
    Decline {
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        reason: String,
    },
    TaskStatus {
        subtask: SubtaskId,
        status: TaskStatus,
    },
    JobStatus(JobStatus),
    /// Take a checkpoint or savepoint now.
    Trigger {
        kind: CheckpointKind,
    },
    /// Take a final checkpoint, then let the sources finish.
    StopWithCheckpoint,
    /// Stop the driver. With `drain`, pending checkpoints may still complete (up to the
    /// checkpoint timeout) so that a final checkpoint's sinks commit; without, they are aborted.
    Shutdown {
        drain: bool,
    },
}

/// What the executor hears about the job.
#[derive(Debug)]
pub enum JobEvent {
    /// A bounded source has no more input and waits for the final checkpoint.
    SourceExhausted(SubtaskId),
    /// A subtask processed all its input and finished its operator.
    TaskFinished(SubtaskId),
    TaskFailed {
        subtask: SubtaskId,
        error: String,
    },
    CheckpointCompleted {
        id: CheckpointId,
        duration_ms: u64,
        size_bytes: u64,
    },
    CheckpointAborted {
        id: CheckpointId,
        reason: String,
    },
    /// The coordinator failed the job (for example: too many failed checkpoints).
    JobFailed(String),
}
