//! Messages between subtasks, the coordinator's driver and the executor.

use weir_checkpoint::{AckMetrics, JobStatus, TaskStatus};
use weir_core::{Barrier, CheckpointId, CheckpointKind, SubtaskId, SubtaskState};

/// What a stop with savepoint does with event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Drain {
    /// Windows and timers still pending stay in the savepoint, to fire after a restore.
    #[default]
    Keep,
    /// End event time before the savepoint (Flink's `--drain`): everything pending fires now.
    /// For a job that is not meant to resume.
    EndEventTime,
}

/// A message to one subtask's task loop. Handled between batches, never inside one.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum TaskControl {
    /// Sources only: start checkpoint `barrier`. With `finish`, the source emits nothing after
    /// the barrier and ends its input: the job stops with this as its final checkpoint; with
    /// [`Drain::EndEventTime`] the source first ends event time (a watermark at `i64::MAX`), so
    /// every window and event-time timer downstream fires before the barrier reaches it.
    Trigger {
        barrier: Barrier,
        finish: Option<Drain>,
    },
    /// Sources only: end input now, without a checkpoint.
    Finish,
    /// An unaligned checkpoint's barrier, sent by an upstream subtask ahead of the data it
    /// queued on its channels to this subtask; the same barrier follows that data in each
    /// channel, marking where the channel's part of the checkpoint ends.
    PriorityBarrier(Barrier),
    NotifyComplete(CheckpointId),
    NotifyAborted(CheckpointId),
    /// Stop at once (failure elsewhere, or job cancelled).
    Cancel,
    /// The job is done: leave the task loop.
    Shutdown,
    /// A control for `subtask`, an operator chained behind the subtask that receives it (see
    /// the runtime's `chain` module): only checkpoint notifications concern it.
    Chained {
        subtask: SubtaskId,
        control: Box<TaskControl>,
    },
}

/// A message to the checkpoint coordinator's driver.
#[derive(Debug)]
///
/// Messages from subtasks and snapshot workers carry the attempt of the job they belong to;
/// the driver ignores those of an earlier attempt.
pub enum CoordinatorMessage {
    Ack {
        attempt: u32,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        metrics: AckMetrics,
    },
    Decline {
        attempt: u32,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        reason: String,
    },
    TaskStatus {
        attempt: u32,
        subtask: SubtaskId,
        status: TaskStatus,
    },
    /// A new attempt of the job is deployed: its subtasks' control channels.
    NewAttempt {
        attempt: u32,
        controls: std::collections::HashMap<SubtaskId, ControlSender>,
    },
    JobStatus(JobStatus),
    /// Take a checkpoint or savepoint now (a savepoint into `target`, or the configured
    /// savepoint directory).
    Trigger {
        kind: CheckpointKind,
        request: weir_checkpoint::RequestId,
        target: Option<std::path::PathBuf>,
    },
    /// Take a final checkpoint, then let the sources finish.
    StopWithCheckpoint,
    /// Take a savepoint, then let the sources finish; with `drain`, end event time first.
    StopWithSavepoint {
        request: weir_checkpoint::RequestId,
        target: Option<std::path::PathBuf>,
        /// The savepoint's kind: canonical or native.
        kind: CheckpointKind,
        drain: Drain,
    },
    /// Answer with the latest completed checkpoint, once every message before this one was
    /// handled: a restart restores exactly what the coordinator considers completed, and every
    /// event of the failed attempt is out.
    Sync(crossbeam_channel::Sender<Option<CheckpointId>>),
    /// Answer with the coordinator's current statistics.
    Stats(crossbeam_channel::Sender<weir_checkpoint::CheckpointStats>),
    /// Stop the driver. With `drain`, pending checkpoints may still complete (up to the
    /// checkpoint timeout) so that a final checkpoint's sinks commit; without, they are aborted.
    Shutdown {
        drain: bool,
    },
}

/// How the coordinator's driver and the executor reach one subtask's task loop: directly in
/// this process, or through the connection to the task manager that runs it.
#[derive(Clone, Debug)]
pub enum ControlSender {
    Local(crossbeam_channel::Sender<TaskControl>),
    Remote {
        subtask: SubtaskId,
        to: crossbeam_channel::Sender<(SubtaskId, TaskControl)>,
    },
    /// A subtask chained behind another in this process: through the control channel of the
    /// head of its chain.
    Chained {
        subtask: SubtaskId,
        head: crossbeam_channel::Sender<TaskControl>,
    },
}

impl ControlSender {
    /// Sends `control`; false if the subtask (or its task manager's connection) is gone.
    pub fn send(&self, control: TaskControl) -> bool {
        match self {
            ControlSender::Local(tx) => tx.send(control).is_ok(),
            ControlSender::Remote { subtask, to } => to.send((*subtask, control)).is_ok(),
            ControlSender::Chained { subtask, head } => head
                .send(TaskControl::Chained {
                    subtask: *subtask,
                    control: Box::new(control),
                })
                .is_ok(),
        }
    }
}

/// What the executor hears about the job.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum JobEvent {
    /// A bounded source has no more input and waits for the final checkpoint.
    SourceExhausted(SubtaskId),
    /// A subtask processed all its input and finished its operator.
    TaskFinished(SubtaskId),
    TaskFailed {
        subtask: SubtaskId,
        error: String,
        /// False for errors a restart cannot fix (bad input): the job fails at once.
        recoverable: bool,
    },
    /// After a restart: the first record of the new attempt was processed.
    FirstRecordProcessed {
        attempt: u32,
    },
    /// The final checkpoint (or savepoint) of a stopping job was triggered.
    FinalCheckpointTriggered {
        id: CheckpointId,
        savepoint: bool,
    },
    /// No final checkpoint could be triggered for a stopping job.
    FinalCheckpointFailed(String),
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
