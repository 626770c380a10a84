//! The coordinator's driver: a thread around the pure [`CheckpointCoordinator`] that feeds it
//! messages and time, and carries out its actions — sending triggers and notifications to
//! subtasks itself, and handing id allocation, metadata writes and deletions to its I/O worker
//! ([`io`]), whose answers come back as events.

mod io;

use crossbeam_channel::{Receiver, Select, Sender};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_checkpoint::{
    Action, CheckpointCoordinator, CheckpointIdCounter, CheckpointStats, Event, RequestId,
};
use weir_core::{Barrier, BarrierAlignment, CheckpointId, CheckpointKind, Clock, JobId, SubtaskId};
use weir_storage::{CheckpointMetadata, CheckpointStorage, OperatorMetadata};

use crate::control::Drain;
use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::handle::{JobHandle, RequestStatus};
use io::{Io, IoDone, IoJob};

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
    io: Io,
    #[cfg(test)]
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
    /// Duration, size and persisted size of checkpoints whose metadata was written, for the
    /// completion event and log.
    written: HashMap<CheckpointId, (u64, u64, u64)>,
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
        #[cfg(test)]
        storage: storage.clone(),
        io: Io::start(counter, storage),
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
            let event = match self.wait(&messages, wake, now) {
                Input::Io(done) => {
                    self.on_io_done(done);
                    continue;
                }
                Input::Message(message) => match self.translate(message) {
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
                Input::Timeout => Event::Tick,
                Input::Closed => break,
            };
            self.apply(event);
        }
        self.apply(Event::Shutdown);
        // Invariant: the driver returns only once every write and deletion it started is done,
        // so whoever reads checkpoint storage next sees its final state.
        self.settle();
        self.io.close();
        self.coordinator.stats().clone()
    }

    /// Waits for the next I/O answer or message, until `wake` if given. Answers go first: they
    /// finish work already under way.
    fn wait(
        &mut self,
        messages: &Receiver<CoordinatorMessage>,
        wake: Option<u64>,
        now: u64,
    ) -> Input {
        if let Ok(done) = self.io.done.try_recv() {
            self.io.in_flight -= 1;
            return Input::Io(done);
        }
        let mut select = Select::new();
        let message_index = select.recv(messages);
        let io_index = (self.io.in_flight > 0).then(|| select.recv(&self.io.done));
        let op = match wake {
            Some(at) => {
                match select.select_timeout(Duration::from_millis(at.saturating_sub(now))) {
                    Ok(op) => op,
                    Err(_) => return Input::Timeout,
                }
            }
            None => select.select(),
        };
        if Some(op.index()) == io_index {
            return match op.recv(&self.io.done) {
                Ok(done) => {
                    self.io.in_flight -= 1;
                    Input::Io(done)
                }
                Err(_) => {
                    tracing::error!("the checkpoint I/O worker stopped; the driver stops too");
                    Input::Closed
                }
            };
        }
        debug_assert_eq!(op.index(), message_index);
        match op.recv(messages) {
            Ok(message) => Input::Message(message),
            Err(_) => Input::Closed,
        }
    }

    /// Feeds an I/O answer to the coordinator, keeping what the driver needs of it.
    fn on_io_done(&mut self, done: IoDone) {
        let event = match done {
            IoDone::Deleted => return,
            IoDone::Allocated(event) => {
                if let Event::IdAllocated { request, id } = event {
                    self.requests.insert(id, request);
                }
                event
            }
            IoDone::Written {
                event,
                duration_ms,
                size_bytes,
                persisted_bytes,
                savepoint,
            } => {
                if let Event::MetadataWritten { checkpoint, .. } = event {
                    self.written
                        .insert(checkpoint, (duration_ms, size_bytes, persisted_bytes));
                    if let Some(path) = savepoint {
                        self.savepoints.insert(checkpoint, path);
                    }
                }
                event
            }
        };
        self.apply(event);
    }

    /// Waits for every I/O job under way and feeds its answer on (which may start more).
    fn settle(&mut self) {
        while self.io.in_flight > 0 {
            match self.io.done.recv() {
                Ok(done) => {
                    self.io.in_flight -= 1;
                    self.on_io_done(done);
                }
                Err(_) => break,
            }
        }
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
                kind,
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
                Event::TriggerRequest { request, kind }
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
            Action::AllocateId { request } => {
                self.io.submit(IoJob::AllocateId { request });
                None
            }
            Action::TriggerSources {
                checkpoint,
                timestamp_ms,
                kind,
                sources,
            } => {
                // Invariant: only the stop's own checkpoint ends the sources; a periodic one
                // that starts meanwhile is an ordinary checkpoint.
                let finish = (self.stopping.is_some()
                    && self.requests.get(&checkpoint).copied() == self.stopping)
                    .then_some(self.stop_drain);
                // Invariant: savepoints and a job's final checkpoint are aligned. Nothing
                // follows a final checkpoint to commit the records an unaligned barrier would
                // overtake.
                let barrier = Barrier {
                    id: checkpoint,
                    timestamp_ms,
                    kind,
                    alignment: if kind == CheckpointKind::Checkpoint && finish.is_none() {
                        self.coordinator.config().barrier_alignment()
                    } else {
                        BarrierAlignment::Aligned
                    },
                };
                tracing::debug!(%checkpoint, ?finish, "triggering checkpoint");
                for s in sources {
                    self.send(s, TaskControl::Trigger { barrier, finish });
                }
                if finish.is_some() {
                    let _ = self.events.send(JobEvent::FinalCheckpointTriggered {
                        id: checkpoint,
                        savepoint: kind.is_savepoint(),
                    });
                }
                None
            }
            Action::WriteMetadata { checkpoint } => {
                let duration_ms = checkpoint
                    .completion_timestamp_ms
                    .saturating_sub(checkpoint.trigger_timestamp_ms);
                let size_bytes = checkpoint.state_size();
                let savepoint = checkpoint.is_savepoint();
                let metadata = Box::new(CheckpointMetadata {
                    job_name: self.setup.job_name.clone(),
                    max_parallelism: self.setup.max_parallelism,
                    operators: self.setup.operators.clone(),
                    checkpoint,
                });
                // Invariant: the checkpoint stays pending until the worker's answer says the
                // metadata is durable; only then does it complete and are subtasks notified.
                if savepoint {
                    let id = metadata.checkpoint.id;
                    let Some(target) = self.savepoint_target(id) else {
                        return Some(Event::MetadataWriteFailed {
                            checkpoint: id,
                            reason: "no savepoint directory: name one in the request or set execution.checkpointing.savepoint-dir".into(),
                        });
                    };
                    self.io.submit(IoJob::WriteSavepoint {
                        metadata,
                        target,
                        duration_ms,
                        size_bytes,
                    });
                } else {
                    self.io.submit(IoJob::WriteMetadata {
                        metadata,
                        duration_ms,
                        size_bytes,
                    });
                }
                None
            }
            Action::NotifyComplete {
                checkpoint,
                subtasks,
            } => {
                for s in subtasks {
                    self.send(s, TaskControl::NotifyComplete(checkpoint));
                }
                let (duration_ms, size_bytes, persisted_bytes) =
                    self.written.remove(&checkpoint).unwrap_or_default();
                tracing::info!(
                    %checkpoint,
                    duration_ms,
                    size_bytes,
                    persisted_bytes,
                    "checkpoint completed"
                );
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
                self.io.submit(IoJob::DiscardCheckpoint {
                    checkpoint,
                    shared_paths,
                });
                None
            }
            Action::DiscardState { handles } => {
                self.io.submit(IoJob::DiscardState { handles });
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

    /// Where savepoint `id` goes: the directory its request named, or the configured one.
    fn savepoint_target(&self, id: CheckpointId) -> Option<PathBuf> {
        self.requests
            .get(&id)
            .and_then(|r| self.targets.get(r).cloned().flatten())
            .or_else(|| self.setup.savepoint_dir.clone())
    }

    fn send(&self, subtask: SubtaskId, control: TaskControl) {
        if let Some(tx) = self.controls.get(&subtask) {
            tx.send(control);
        }
    }
}

enum Input {
    Message(CoordinatorMessage),
    Io(IoDone),
    Timeout,
    Closed,
}

enum Translated {
    Event(Event),
    Nothing,
    Shutdown { drain: bool },
}

#[cfg(test)]
mod tests;
