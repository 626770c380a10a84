//! The engine's structures inside the control plane's messages (postcard bytes).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use weir_checkpoint::{AckMetrics, TaskStatus};
use weir_core::{CheckpointId, SubtaskId, SubtaskState};
use weir_runtime::control::{CoordinatorMessage, JobEvent, TaskControl};
use weir_storage::CheckpointMetadata;

use crate::error::ClusterError;

/// What a task manager reports for one of its subtasks (or their snapshot workers).
#[derive(Debug, Serialize, Deserialize)]
pub enum Report {
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
    Event(JobEvent),
}

/// Where a report goes on the job manager.
pub enum Delivery {
    Coordinator(CoordinatorMessage),
    Executor(JobEvent),
}

impl DeploymentPlan {
    /// The attempt's number across leadership terms, ascending.
    pub fn generation(&self) -> u64 {
        (self.term << 32) | self.attempt as u64
    }
}

impl Report {
    /// The report of a message a subtask or snapshot worker sent to its coordinator, with the
    /// attempt it belongs to; `None` for messages that stay in the process.
    pub fn from_coordinator_message(message: CoordinatorMessage) -> Option<(u32, Report)> {
        match message {
            CoordinatorMessage::Ack {
                attempt,
                subtask,
                checkpoint,
                state,
                metrics,
            } => Some((
                attempt,
                Report::Ack {
                    subtask,
                    checkpoint,
                    state,
                    metrics,
                },
            )),
            CoordinatorMessage::Decline {
                attempt,
                subtask,
                checkpoint,
                reason,
            } => Some((
                attempt,
                Report::Decline {
                    subtask,
                    checkpoint,
                    reason,
                },
            )),
            CoordinatorMessage::TaskStatus {
                attempt,
                subtask,
                status,
            } => Some((attempt, Report::TaskStatus { subtask, status })),
            _ => None,
        }
    }

    /// Where the report of attempt `attempt` goes on the job manager.
    pub fn deliver(self, attempt: u32) -> Delivery {
        match self {
            Report::Ack {
                subtask,
                checkpoint,
                state,
                metrics,
            } => Delivery::Coordinator(CoordinatorMessage::Ack {
                attempt,
                subtask,
                checkpoint,
                state,
                metrics,
            }),
            Report::Decline {
                subtask,
                checkpoint,
                reason,
            } => Delivery::Coordinator(CoordinatorMessage::Decline {
                attempt,
                subtask,
                checkpoint,
                reason,
            }),
            Report::TaskStatus { subtask, status } => {
                Delivery::Coordinator(CoordinatorMessage::TaskStatus {
                    attempt,
                    subtask,
                    status,
                })
            }
            Report::Event(event) => Delivery::Executor(event),
        }
    }
}

/// One attempt's deployment, as every task manager gets it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeploymentPlan {
    /// The job manager's leadership term: attempts of a later term are newer.
    pub term: u64,
    pub attempt: u32,
    /// The task manager of every subtask of the job.
    pub placement: Vec<(SubtaskId, String)>,
    /// Every task manager of the attempt: id and data-plane address.
    pub peers: Vec<(String, String)>,
    pub restore: Option<RestorePlan>,
}

/// The state an attempt starts from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestorePlan {
    pub metadata: CheckpointMetadata,
    /// Set when the state is a savepoint's (in that directory); otherwise it is in the job's
    /// checkpoint storage.
    pub savepoint: Option<PathBuf>,
}

pub fn encode<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>, ClusterError> {
    postcard::to_allocvec(value)
        .map_err(|e| ClusterError::Protocol(format!("cannot encode {what}: {e}")))
}

pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ClusterError> {
    postcard::from_bytes(bytes).map_err(|e| {
        ClusterError::Protocol(format!(
            "{what} of {} bytes does not decode (are both processes the same build of the same binary?): {e}",
            bytes.len()
        ))
    })
}

/// A control for a subtask, as the job manager sends it.
pub fn encode_control(control: &TaskControl) -> Result<Vec<u8>, ClusterError> {
    encode(control, "a task control")
}
