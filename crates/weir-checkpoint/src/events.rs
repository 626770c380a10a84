//! The coordinator's vocabulary with its driver: the events it is fed and the actions it asks
//! for, plus the small types they carry (job and subtask status, the job's vertices, ack
//! metrics, abort reasons).

use crate::completed::CompletedCheckpoint;
use serde::{Deserialize, Serialize};
use std::fmt;
use weir_core::{CheckpointId, CheckpointKind, JobId, StateHandle, SubtaskId, SubtaskState};

/// Identifies one trigger request (a manual checkpoint or a savepoint) so that a REST layer
/// can poll for its outcome. The driver chooses these ids; values at or above
/// [`PERIODIC_REQUEST_BASE`] are reserved for the coordinator's own periodic triggers.
pub type RequestId = u64;

/// Request ids from here up name periodic triggers in [`Action::AllocateId`]. A
/// [`Event::TriggerRequest`] using one is refused, so the driver's ids and the coordinator's
/// never collide.
pub const PERIODIC_REQUEST_BASE: RequestId = 1 << 63;

/// The job's status as the scheduler sees it (Flink's `JobStatus`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum JobStatus {
    Created,
    Running,
    Failing,
    Restarting,
    Cancelling,
    Cancelled,
    Finished,
    Failed,
    Suspended,
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Flink prints statuses in capitals; users grep logs for RUNNING and FAILING.
        let name = match self {
            JobStatus::Created => "CREATED",
            JobStatus::Running => "RUNNING",
            JobStatus::Failing => "FAILING",
            JobStatus::Restarting => "RESTARTING",
            JobStatus::Cancelling => "CANCELLING",
            JobStatus::Cancelled => "CANCELLED",
            JobStatus::Finished => "FINISHED",
            JobStatus::Failed => "FAILED",
            JobStatus::Suspended => "SUSPENDED",
        };
        f.write_str(name)
    }
}

/// One subtask's execution status. A subtask the coordinator has heard nothing about yet is
/// treated as not running.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum TaskStatus {
    Running,
    Finished,
    Failed,
    Cancelled,
}

/// The subtasks a checkpoint involves: `sources` are told to start it, `all` must acknowledge
/// it (sources are part of `all`).
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct JobVertices {
    pub sources: Vec<SubtaskId>,
    pub all: Vec<SubtaskId>,
}

/// What a subtask reports with its acknowledgement besides its state: timings in
/// milliseconds, and how its input gate passed the checkpoint's barrier (Flink's
/// `CheckpointMetrics`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct AckMetrics {
    /// Synchronous part of the snapshot (the task loop was busy with it).
    pub sync_duration_ms: u64,
    /// Asynchronous materialisation, off the task loop.
    pub async_duration_ms: u64,
    /// Time from the first to the last barrier on the subtask's inputs.
    pub alignment_duration_ms: u64,
    /// Time from the trigger until the first barrier reached the subtask.
    pub start_delay_ms: u64,
    /// The subtask took the checkpoint unaligned: the barrier overtook the data queued in its
    /// input channels, and that data went with the snapshot as channel state.
    pub unaligned: bool,
    /// Bytes of channel state (in-flight data) the snapshot wrote, as encoded: Flink's
    /// persisted data. 0 when the subtask took the checkpoint aligned. Part of the
    /// acknowledged state's `persisted_size` too.
    pub persisted_data: u64,
    /// Records handed to the operator while the subtask aligned the barrier (from the channels
    /// it had not reached yet): Flink's processed data, counted in records, because records
    /// in a Weir process are never serialised to be counted in bytes.
    pub processed_records: u64,
}

/// What the driver tells the coordinator. Each is handled with the current time by
/// [`crate::CheckpointCoordinator::handle`].
#[derive(Clone, PartialEq, Debug)]
pub enum Event {
    JobStatusChanged(JobStatus),
    SubtaskStatus {
        subtask: SubtaskId,
        status: TaskStatus,
    },
    /// Time has passed: fire a due periodic trigger, expire old checkpoints, serve a queued
    /// trigger whose minimum pause is over.
    Tick,
    /// A manual checkpoint or a savepoint.
    TriggerRequest {
        request: RequestId,
        kind: CheckpointKind,
    },
    /// The answer to [`Action::AllocateId`].
    IdAllocated {
        request: RequestId,
        id: CheckpointId,
    },
    IdAllocationFailed {
        request: RequestId,
        reason: String,
    },
    Ack {
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        metrics: AckMetrics,
    },
    /// An acknowledgement sent by a subtask of an earlier attempt of the job (the job restarted
    /// since): it counts for nothing, and its files are deleted unless a retained or pending
    /// checkpoint references them.
    StaleAck {
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
    },
    Decline {
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        reason: String,
    },
    /// The answer to [`Action::WriteMetadata`]: the metadata is durable.
    MetadataWritten {
        checkpoint: CheckpointId,
        metadata_bytes: u64,
    },
    MetadataWriteFailed {
        checkpoint: CheckpointId,
        reason: String,
    },
    Shutdown,
}

/// What the coordinator asks its driver to do, in the order given.
#[derive(Clone, PartialEq, Debug)]
pub enum Action {
    /// Get the next id from the [`crate::CheckpointIdCounter`] (possibly a remote call, which is
    /// why it happens outside the coordinator) and answer with [`Event::IdAllocated`] or
    /// [`Event::IdAllocationFailed`] carrying the same `request`.
    AllocateId {
        request: RequestId,
    },
    /// Tell these source subtasks to start the checkpoint.
    TriggerSources {
        checkpoint: CheckpointId,
        timestamp_ms: u64,
        kind: CheckpointKind,
        sources: Vec<SubtaskId>,
    },
    /// Write the checkpoint's metadata durably, then answer with [`Event::MetadataWritten`] or
    /// [`Event::MetadataWriteFailed`].
    WriteMetadata {
        checkpoint: CompletedCheckpoint,
    },
    NotifyComplete {
        checkpoint: CheckpointId,
        subtasks: Vec<SubtaskId>,
    },
    NotifyAborted {
        checkpoint: CheckpointId,
        reason: AbortReason,
        subtasks: Vec<SubtaskId>,
    },
    /// Delete `chk-<id>`'s own directory (private files, metadata) and these shared files,
    /// which no retained or pending checkpoint references any more.
    DiscardCheckpoint {
        checkpoint: CheckpointId,
        shared_paths: Vec<String>,
    },
    /// Delete the files of state nobody will use (late or unexpected acknowledgements). Shared
    /// files still referenced elsewhere are left out.
    DiscardState {
        handles: Vec<StateHandle>,
    },
    RequestCompleted {
        request: RequestId,
        checkpoint: CheckpointId,
    },
    RequestFailed {
        request: RequestId,
        reason: String,
    },
    /// The failure budget is exhausted (or ids went backwards): fail the job so the restart
    /// strategy takes over.
    FailJob {
        reason: String,
    },
}

/// Why a checkpoint was aborted. [`AbortReason::counts_toward_failure_budget`] says which
/// reasons consume `tolerable-failed-checkpoints`, as Flink's `CheckpointFailureManager` does.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum AbortReason {
    /// A subtask declined; the text names the subtask and its reason.
    Declined(String),
    /// Not every subtask acknowledged within the checkpoint timeout.
    Expired,
    /// A newer checkpoint completed first.
    Subsumed,
    /// A subtask failed or was cancelled; the job is restarting anyway.
    TaskFailure,
    /// A subtask finished before acknowledging; it never will.
    SubtaskFinished(SubtaskId),
    /// The job left RUNNING.
    JobNotRunning(JobStatus),
    /// The coordinator was shut down.
    Shutdown,
    /// The metadata could not be written durably.
    MetadataWriteFailed(String),
    /// The completed checkpoint store refused to record it (in HA mode: ZooKeeper
    /// unreachable, or this job manager no longer leads). If it was fenced, its own directory
    /// (metadata, private files) goes; otherwise its files stay: a pointer may have been
    /// written, and a new leader may restore from it.
    NotRecorded(String),
}

impl AbortReason {
    /// Whether this failure consumes the failure budget. Only failures that say checkpointing
    /// itself is unhealthy count (declined, expired, metadata I/O); failures that are a
    /// consequence of something else (subsumed, task failure, job status, shutdown) do not.
    pub fn counts_toward_failure_budget(&self) -> bool {
        matches!(
            self,
            AbortReason::Declined(_)
                | AbortReason::Expired
                | AbortReason::MetadataWriteFailed(_)
                | AbortReason::NotRecorded(_)
        )
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Declined(why) => write!(f, "declined by subtask {why}"),
            AbortReason::Expired => f.write_str("expired before every subtask acknowledged"),
            AbortReason::Subsumed => f.write_str("subsumed by a newer completed checkpoint"),
            AbortReason::TaskFailure => f.write_str("a subtask failed"),
            AbortReason::SubtaskFinished(s) => {
                write!(f, "subtask {s} finished before acknowledging")
            }
            AbortReason::JobNotRunning(status) => {
                write!(f, "the job is no longer running ({status})")
            }
            AbortReason::Shutdown => f.write_str("the checkpoint coordinator is shut down"),
            AbortReason::MetadataWriteFailed(why) => {
                write!(f, "its metadata could not be written: {why}")
            }
            AbortReason::NotRecorded(why) => {
                write!(f, "the completed checkpoint store did not record it: {why}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_declines_expiries_and_metadata_failures_consume_the_budget() {
        let counted = [
            AbortReason::Declined("x".into()),
            AbortReason::Expired,
            AbortReason::MetadataWriteFailed("disk full".into()),
        ];
        let ignored = [
            AbortReason::Subsumed,
            AbortReason::TaskFailure,
            AbortReason::SubtaskFinished(SubtaskId::new(weir_core::OperatorId(1), 0)),
            AbortReason::JobNotRunning(JobStatus::Failing),
            AbortReason::Shutdown,
        ];
        assert!(counted
            .iter()
            .all(AbortReason::counts_toward_failure_budget));
        assert!(!ignored
            .iter()
            .any(AbortReason::counts_toward_failure_budget));
    }

    #[test]
    fn abort_reasons_read_as_sentences() {
        assert_eq!(
            AbortReason::MetadataWriteFailed("disk full".into()).to_string(),
            "its metadata could not be written: disk full"
        );
        assert_eq!(
            AbortReason::JobNotRunning(JobStatus::Failing).to_string(),
            "the job is no longer running (FAILING)"
        );
    }
}
