//! The coordinator's driver: a thread around the pure [`CheckpointCoordinator`] that feeds it
//! messages and time, and carries out its actions — allocating ids, sending triggers and
//! notifications to subtasks, writing metadata, deleting discarded files.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_checkpoint::{
    Action, CheckpointCoordinator, CheckpointIdCounter, CheckpointStats, Event, RequestId,
};
use weir_core::{Barrier, CheckpointId, CheckpointKind, Clock, JobId, SubtaskId};
use weir_storage::{CheckpointMetadata, CheckpointStorage, OperatorMetadata};

use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::handle::{Drain, JobHandle, RequestStatus};

/// The request id of the final checkpoint taken when a job stops (manual request ids count up
/// from 1; the coordinator reserves the upper half for its periodic triggers).
const STOP_REQUEST: RequestId = weir_checkpoint::PERIODIC_REQUEST_BASE - 1;

/// What the driver needs to know about the job.
pub struct DriverSetup {
    pub job: JobId,
    pub job_name: String,
    pub max_parallelism: u32,
    pub operators: Vec<OperatorMetadata>,
    pub sources: Vec<SubtaskId>,
    pub checkpoint_timeout: Duration,
    /// Where savepoints go when a request names no directory.
    pub savepoint_dir: Option<PathBuf>,
}

struct Driver {
    setup: DriverSetup,
    coordinator: CheckpointCoordinator,
    counter: Box<dyn CheckpointIdCounter>,
    storage: CheckpointStorage,
    clock: Arc<dyn Clock>,
    controls: HashMap<SubtaskId, crate::control::ControlSender>,
    events: Sender<JobEvent>,
    /// The request of the stop in progress (final checkpoint or savepoint), if any: only its
    /// own checkpoint ends the sources.
    stopping: Option<RequestId>,
    /// What the stop in progress does with event time before its checkpoint.
    stop_drain: Drain,
    /// The current attempt; messages of earlier attempts are ignored.
    attempt: u32,
    handle: JobHandle,
    // Invariant: between events, `requests`, `savepoints` and `written` hold only checkpoints
    // the coordinator still has pending, and `targets` only requests not answered yet, so
    // none of them grows with the number of checkpoints taken.
    /// Savepoint directories asked for, by request.
    targets: HashMap<RequestId, Option<PathBuf>>,
    /// The request each checkpoint serves (a periodic trigger's token for periodic ones).
    requests: HashMap<CheckpointId, RequestId>,
    /// Where completed savepoints were written.
    savepoints: HashMap<CheckpointId, PathBuf>,
    /// Duration and size of checkpoints whose metadata was written, for the completion event.
    written: HashMap<CheckpointId, (u64, u64)>,
}

/// Starts the driver thread. It returns the final checkpoint statistics when it stops.
#[allow(clippy::too_many_arguments)]
pub fn spawn_driver(
    setup: DriverSetup,
    coordinator: CheckpointCoordinator,
    counter: Box<dyn CheckpointIdCounter>,
    storage: CheckpointStorage,
    clock: Arc<dyn Clock>,
    messages: Receiver<CoordinatorMessage>,
    handle: JobHandle,
    events: Sender<JobEvent>,
) -> JoinHandle<CheckpointStats> {
    let driver = Driver {
        setup,
        coordinator,
        counter,
        storage,
        clock,
        controls: HashMap::new(),
        events,
        stopping: None,
        stop_drain: Drain::Keep,
        attempt: 0,
        handle,
        targets: HashMap::new(),
        requests: HashMap::new(),
        savepoints: HashMap::new(),
        written: HashMap::new(),
    };
    std::thread::Builder::new()
        .name("weir-checkpoint-coordinator".into())
        .spawn(move || driver.run(messages))
        .expect("spawn coordinator driver")
}

impl Driver {
    fn run(mut self, messages: Receiver<CoordinatorMessage>) -> CheckpointStats {
        let mut drain_until: Option<u64> = None;
        loop {
            if let Some(until) = drain_until {
                if self.coordinator.pending_count() == 0 || self.clock.now_ms() >= until {
                    break;
                }
            }
            let now = self.clock.now_ms();
            // Invariant: a deadline that is due is served before the next message. Waiting
            // for an empty channel instead would let a steady stream of acknowledgements hold
            // back expiries and periodic triggers indefinitely. One tick per message at most,
            // so a deadline that a tick cannot clear does not starve the messages either.
            if self.coordinator.next_deadline().is_some_and(|at| at <= now) {
                self.apply(Event::Tick);
            }
            let now = self.clock.now_ms();
            let mut wake = self.coordinator.next_deadline();
            if let Some(until) = drain_until {
                wake = Some(wake.map_or(until, |w| w.min(until)));
            }
            let received = match wake {
                Some(at) => messages.recv_timeout(Duration::from_millis(at.saturating_sub(now))),
                None => messages.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let event = match received {
                Ok(message) => match self.translate(message) {
                    Translated::Event(event) => event,
                    Translated::Nothing => continue,
                    Translated::Shutdown { drain: true } => {
                        drain_until = Some(
                            self.clock.now_ms() + self.setup.checkpoint_timeout.as_millis() as u64,
                        );
                        continue;
                    }
                    Translated::Shutdown { drain: false } => break,
                },
                Err(RecvTimeoutError::Timeout) => Event::Tick,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            self.apply(event);
        }
        self.apply(Event::Shutdown);
        self.coordinator.stats().clone()
    }

    fn translate(&mut self, message: CoordinatorMessage) -> Translated {
        let job = self.setup.job;
        let stale = match &message {
            CoordinatorMessage::Ack { attempt, .. }
            | CoordinatorMessage::Decline { attempt, .. }
            | CoordinatorMessage::TaskStatus { attempt, .. } => *attempt != self.attempt,
            _ => false,
        };
        if stale {
            if let CoordinatorMessage::Ack {
                subtask,
                checkpoint,
                state,
                ..
            } = message
            {
                // Its snapshot was written for nothing: the coordinator says which of its
                // files no checkpoint references, and those are deleted.
                tracing::debug!(%subtask, %checkpoint, "acknowledgement of an earlier attempt");
                return Translated::Event(Event::StaleAck {
                    job,
                    subtask,
                    checkpoint,
                    state,
                });
            }
            tracing::debug!(?message, "ignoring a message of an earlier attempt");
            return Translated::Nothing;
        }
        Translated::Event(match message {
            CoordinatorMessage::NewAttempt { attempt, controls } => {
                self.attempt = attempt;
                self.controls = controls;
                self.stopping = None;
                return Translated::Nothing;
            }
            CoordinatorMessage::Ack {
                attempt: _,
                subtask,
                checkpoint,
                state,
                metrics,
            } => Event::Ack {
                job,
                subtask,
                checkpoint,
                state,
                metrics,
            },
            CoordinatorMessage::Decline {
                attempt: _,
                subtask,
                checkpoint,
                reason,
            } => Event::Decline {
                job,
                subtask,
                checkpoint,
                reason,
            },
            CoordinatorMessage::TaskStatus {
                attempt: _,
                subtask,
                status,
            } => Event::SubtaskStatus { subtask, status },
            CoordinatorMessage::JobStatus(status) => Event::JobStatusChanged(status),
            CoordinatorMessage::Trigger {
                kind,
                request,
                target,
            } => {
                self.targets.insert(request, target);
                Event::TriggerRequest { request, kind }
            }
            CoordinatorMessage::StopWithSavepoint {
                request,
                target,
                drain,
            } => {
                if self.stopping.is_some() {
                    self.handle.set_request(
                        request,
                        RequestStatus::Failed("the job is already stopping".into()),
                    );
                    return Translated::Nothing;
                }
                self.stopping = Some(request);
                self.stop_drain = drain;
                self.targets.insert(request, target);
                Event::TriggerRequest {
                    request,
                    kind: CheckpointKind::Savepoint,
                }
            }
            CoordinatorMessage::Sync(reply) => {
                let _ = reply.send(self.coordinator.latest_completed().map(|c| c.id));
                return Translated::Nothing;
            }
            CoordinatorMessage::Stats(reply) => {
                let _ = reply.send(self.coordinator.stats().clone());
                return Translated::Nothing;
            }
            CoordinatorMessage::StopWithCheckpoint => {
                if self.stopping.is_some() {
                    return Translated::Nothing;
                }
                self.stopping = Some(STOP_REQUEST);
                self.stop_drain = Drain::Keep;
                Event::TriggerRequest {
                    request: STOP_REQUEST,
                    kind: CheckpointKind::Checkpoint,
                }
            }
            CoordinatorMessage::Shutdown { drain } => return Translated::Shutdown { drain },
        })
    }

    /// Feeds one event to the coordinator and carries out the actions, and the actions those
    /// lead to, in order.
    fn apply(&mut self, event: Event) {
        let now = self.clock.now_ms();
        let mut queue: VecDeque<Action> = self.coordinator.handle(event, now).into();
        while let Some(action) = queue.pop_front() {
            if let Some(event) = self.execute(action) {
                queue.extend(self.coordinator.handle(event, self.clock.now_ms()));
            }
        }
        self.forget_ended();
    }

    /// Drops what the driver kept for checkpoints that completed, were aborted or subsumed, or
    /// whose id was never used (a trigger queued again after its id arrived). Cheap when
    /// nothing ended: the maps are then no larger than the pending set.
    fn forget_ended(&mut self) {
        let pending = self.coordinator.pending_count();
        let coordinator = &self.coordinator;
        if self.requests.len() > pending {
            self.requests.retain(|id, _| coordinator.is_pending(*id));
        }
        if self.savepoints.len() > pending {
            self.savepoints.retain(|id, _| coordinator.is_pending(*id));
        }
        if self.written.len() > pending {
            self.written.retain(|id, _| coordinator.is_pending(*id));
        }
    }

    fn execute(&mut self, action: Action) -> Option<Event> {
        match action {
            Action::AllocateId { request } => Some(match self.counter.get_and_increment() {
                Ok(id) => {
                    self.requests.insert(id, request);
                    Event::IdAllocated { request, id }
                }
                Err(e) => Event::IdAllocationFailed {
                    request,
                    reason: e.to_string(),
                },
            }),
            Action::TriggerSources {
                checkpoint,
                timestamp_ms,
                kind,
                sources,
            } => {
                let barrier = Barrier {
                    id: checkpoint,
                    timestamp_ms,
                    kind,
                };
                // Invariant: only the stop's own checkpoint ends the sources; a periodic one
                // that starts meanwhile is an ordinary checkpoint.
                let finish = (self.stopping.is_some()
                    && self.requests.get(&checkpoint).copied() == self.stopping)
                    .then_some(self.stop_drain);
                tracing::debug!(%checkpoint, ?finish, "triggering checkpoint");
                for s in sources {
                    self.send(s, TaskControl::Trigger { barrier, finish });
                }
                if finish.is_some() {
                    let _ = self.events.send(JobEvent::FinalCheckpointTriggered {
                        id: checkpoint,
                        savepoint: kind == CheckpointKind::Savepoint,
                    });
                }
                None
            }
            Action::WriteMetadata { checkpoint } => {
                let id = checkpoint.id;
                let duration = checkpoint
                    .completion_timestamp_ms
                    .saturating_sub(checkpoint.trigger_timestamp_ms);
                let size = checkpoint.state_size();
                let savepoint = checkpoint.is_savepoint();
                let metadata = CheckpointMetadata {
                    job_name: self.setup.job_name.clone(),
                    max_parallelism: self.setup.max_parallelism,
                    operators: self.setup.operators.clone(),
                    checkpoint,
                };
                if savepoint {
                    return Some(self.write_savepoint(&metadata, duration, size));
                }
                Some(match self.storage.write_metadata(&metadata) {
                    Ok(bytes) => {
                        self.written.insert(id, (duration, size + bytes));
                        Event::MetadataWritten {
                            checkpoint: id,
                            metadata_bytes: bytes,
                        }
                    }
                    Err(e) => Event::MetadataWriteFailed {
                        checkpoint: id,
                        reason: e.to_string(),
                    },
                })
            }
            Action::NotifyComplete {
                checkpoint,
                subtasks,
            } => {
                for s in subtasks {
                    self.send(s, TaskControl::NotifyComplete(checkpoint));
                }
                let (duration_ms, size_bytes) = self.written.remove(&checkpoint).unwrap_or((0, 0));
                tracing::info!(%checkpoint, duration_ms, size_bytes, "checkpoint completed");
                let _ = self.events.send(JobEvent::CheckpointCompleted {
                    id: checkpoint,
                    duration_ms,
                    size_bytes,
                });
                None
            }
            Action::NotifyAborted {
                checkpoint,
                reason,
                subtasks,
            } => {
                for s in subtasks {
                    self.send(s, TaskControl::NotifyAborted(checkpoint));
                }
                self.written.remove(&checkpoint);
                tracing::warn!(%checkpoint, %reason, "checkpoint aborted");
                let _ = self.events.send(JobEvent::CheckpointAborted {
                    id: checkpoint,
                    reason: reason.to_string(),
                });
                None
            }
            Action::DiscardCheckpoint {
                checkpoint,
                shared_paths,
            } => {
                if let Err(e) = self.storage.discard_checkpoint(checkpoint) {
                    tracing::warn!(%checkpoint, error = %e, "could not delete discarded checkpoint");
                }
                for path in shared_paths {
                    if let Err(e) = self.storage.discard_file(&path) {
                        tracing::warn!(%path, error = %e, "could not delete shared state file");
                    }
                }
                None
            }
            Action::DiscardState { handles } => {
                for h in handles {
                    if let Err(e) = self.storage.discard_file(&h.path) {
                        tracing::warn!(path = %h.path, error = %e, "could not delete state file");
                    }
                }
                None
            }
            Action::RequestCompleted {
                request,
                checkpoint,
            } => {
                tracing::debug!(request, %checkpoint, "requested checkpoint completed");
                self.targets.remove(&request);
                let location = self.savepoints.remove(&checkpoint);
                self.handle.set_request(
                    request,
                    RequestStatus::Completed {
                        checkpoint,
                        location,
                    },
                );
                None
            }
            Action::RequestFailed { request, reason } => {
                self.targets.remove(&request);
                self.handle
                    .set_request(request, RequestStatus::Failed(reason.clone()));
                if request == STOP_REQUEST {
                    // No final checkpoint is possible (e.g. a source already finished): let the
                    // sources end without one; the job's last completed checkpoint stands.
                    tracing::warn!(%reason, "no final checkpoint on stop");
                    let _ = self.events.send(JobEvent::FinalCheckpointFailed(reason));
                    for s in self.setup.sources.clone() {
                        self.send(s, TaskControl::Finish);
                    }
                } else {
                    if self.stopping == Some(request) {
                        // A stop with savepoint that could not even start: the job goes on.
                        self.stopping = None;
                    }
                    tracing::warn!(request, %reason, "checkpoint request failed");
                }
                None
            }
            Action::FailJob { reason } => {
                let _ = self.events.send(JobEvent::JobFailed(reason));
                None
            }
        }
    }

    /// Writes a savepoint: a self-contained copy of the snapshot in its own directory. The
    /// files the subtasks wrote for it under the checkpoint root are deleted afterwards.
    fn write_savepoint(
        &mut self,
        metadata: &CheckpointMetadata,
        duration: u64,
        size: u64,
    ) -> Event {
        let id = metadata.checkpoint.id;
        let target = self
            .requests
            .get(&id)
            .and_then(|r| self.targets.get(r).cloned().flatten())
            .or_else(|| self.setup.savepoint_dir.clone());
        let Some(target) = target else {
            return Event::MetadataWriteFailed {
                checkpoint: id,
                reason: "no savepoint directory: name one in the request or set execution.checkpointing.savepoint-dir".into(),
            };
        };
        match weir_storage::savepoint::write_savepoint(&self.storage, metadata, &target) {
            Ok(written) => {
                if let Err(e) = self.storage.discard_checkpoint(id) {
                    tracing::warn!(checkpoint = %id, error = %e, "could not delete a savepoint's working files");
                }
                tracing::info!(checkpoint = %id, path = %written.path.display(), "savepoint written");
                self.savepoints.insert(id, written.path);
                self.written.insert(id, (duration, size));
                Event::MetadataWritten {
                    checkpoint: id,
                    metadata_bytes: written.metadata_bytes,
                }
            }
            Err(e) => Event::MetadataWriteFailed {
                checkpoint: id,
                reason: format!("writing the savepoint to {} failed: {e}", target.display()),
            },
        }
    }

    fn send(&self, subtask: SubtaskId, control: TaskControl) {
        if let Some(tx) = self.controls.get(&subtask) {
            tx.send(control);
        }
    }
}

enum Translated {
    Event(Event),
    Nothing,
    Shutdown { drain: bool },
}

#[cfg(test)]
mod tests;
