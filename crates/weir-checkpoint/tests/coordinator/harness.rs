//! A driver stand-in for tests: a coordinator, a manual time value, an id counter that answers
//! `AllocateId` like the real driver, and helpers to pick actions apart.

use std::time::Duration;
use weir_checkpoint::*;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, JobId, OperatorId, StateHandle, SubtaskId,
    SubtaskState,
};

pub const JOB: JobId = JobId(0x5e1f);

/// A config with periodic checkpoints off, a 100 ms timeout and everything else default.
pub fn config() -> CheckpointConfig {
    CheckpointConfig {
        interval: None,
        timeout: Duration::from_millis(100),
        ..CheckpointConfig::default()
    }
}

pub struct Harness {
    pub coordinator: CheckpointCoordinator,
    pub counter: StandaloneCheckpointIdCounter,
    pub now: u64,
    pub sources: Vec<SubtaskId>,
    pub all: Vec<SubtaskId>,
    next_request: RequestId,
}

impl Harness {
    /// `sources` source subtasks and `others` downstream subtasks, none running yet.
    pub fn new(config: CheckpointConfig, sources: u32, others: u32) -> Harness {
        let source_op = OperatorId::from_uid("source");
        let map_op = OperatorId::from_uid("map");
        let sources: Vec<SubtaskId> = (0..sources).map(|i| SubtaskId::new(source_op, i)).collect();
        let mut all = sources.clone();
        all.extend((0..others).map(|i| SubtaskId::new(map_op, i)));
        let vertices = JobVertices {
            sources: sources.clone(),
            all: all.clone(),
        };
        Harness {
            coordinator: CheckpointCoordinator::new(JOB, config, vertices),
            counter: StandaloneCheckpointIdCounter::new(),
            now: 1_000,
            sources,
            all,
            next_request: 1,
        }
    }

    /// Like [`Harness::new`], with the coordinator keeping completed checkpoints in `store`.
    pub fn with_store(
        config: CheckpointConfig,
        sources: u32,
        others: u32,
        store: Box<dyn CompletedCheckpointStore>,
    ) -> Harness {
        let mut h = Harness::new(config.clone(), sources, others);
        let vertices = JobVertices {
            sources: h.sources.clone(),
            all: h.all.clone(),
        };
        h.coordinator = CheckpointCoordinator::with_store(JOB, config, vertices, store);
        h
    }

    /// Every subtask reports RUNNING, then the job does (the order the driver uses).
    pub fn running(config: CheckpointConfig, sources: u32, others: u32) -> Harness {
        let mut h = Harness::new(config, sources, others);
        h.start();
        h
    }

    pub fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        for s in self.all.clone() {
            out.extend(self.send(Event::SubtaskStatus {
                subtask: s,
                status: TaskStatus::Running,
            }));
        }
        out.extend(self.send(Event::JobStatusChanged(JobStatus::Running)));
        out
    }

    /// Handles one event now, without answering id allocations.
    pub fn send_raw(&mut self, event: Event) -> Vec<Action> {
        self.coordinator.handle(event, self.now)
    }

    /// Handles one event now and answers every `AllocateId` from the counter, as the driver
    /// does; the returned actions include the answers' actions (and the `AllocateId`s).
    pub fn send(&mut self, event: Event) -> Vec<Action> {
        let actions = self.send_raw(event);
        self.answer_allocations(actions)
    }

    pub fn answer_allocations(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut out = Vec::new();
        for action in actions {
            let allocate = match action {
                Action::AllocateId { request } => Some(request),
                _ => None,
            };
            out.push(action);
            if let Some(request) = allocate {
                let id = self.counter.get_and_increment().expect("counter");
                let more = self.send_raw(Event::IdAllocated { request, id });
                out.extend(self.answer_allocations(more));
            }
        }
        out
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    pub fn tick(&mut self) -> Vec<Action> {
        self.send(Event::Tick)
    }

    /// Advances to the coordinator's next deadline and ticks.
    pub fn tick_at_deadline(&mut self) -> Vec<Action> {
        let deadline = self.coordinator.next_deadline().expect("a deadline");
        self.now = self.now.max(deadline);
        self.tick()
    }

    pub fn fresh_request(&mut self) -> RequestId {
        self.next_request += 1;
        self.next_request
    }

    pub fn request(&mut self, kind: CheckpointKind) -> (RequestId, Vec<Action>) {
        let request = self.fresh_request();
        let actions = self.send(Event::TriggerRequest { request, kind });
        (request, actions)
    }

    /// Requests a checkpoint (or savepoint) and expects it to start now; returns its id.
    pub fn trigger(&mut self, kind: CheckpointKind) -> CheckpointId {
        let (_, actions) = self.request(kind);
        let ids = triggered(&actions);
        assert_eq!(ids.len(), 1, "expected one trigger, got {actions:?}");
        ids[0]
    }

    pub fn ack_with(
        &mut self,
        id: CheckpointId,
        subtask: SubtaskId,
        state: SubtaskState,
    ) -> Vec<Action> {
        self.send(Event::Ack {
            job: JOB,
            subtask,
            checkpoint: id,
            state,
            metrics: AckMetrics::default(),
        })
    }

    pub fn ack(&mut self, id: CheckpointId, subtask: SubtaskId) -> Vec<Action> {
        self.ack_with(id, subtask, private_state(id, subtask))
    }

    pub fn ack_all(&mut self, id: CheckpointId) -> Vec<Action> {
        let mut out = Vec::new();
        for s in self.all.clone() {
            out.extend(self.ack(id, s));
        }
        out
    }

    pub fn metadata_written(&mut self, id: CheckpointId) -> Vec<Action> {
        self.send(Event::MetadataWritten {
            checkpoint: id,
            metadata_bytes: 64,
        })
    }

    /// Every subtask acknowledges, then the metadata lands.
    pub fn complete(&mut self, id: CheckpointId) -> Vec<Action> {
        let mut out = self.ack_all(id);
        assert!(out
            .iter()
            .any(|a| matches!(a, Action::WriteMetadata { checkpoint } if checkpoint.id == id)));
        out.extend(self.metadata_written(id));
        out
    }

    pub fn decline(&mut self, id: CheckpointId, subtask: SubtaskId, reason: &str) -> Vec<Action> {
        self.send(Event::Decline {
            job: JOB,
            subtask,
            checkpoint: id,
            reason: reason.into(),
        })
    }

    pub fn pending_ids(&self) -> Vec<CheckpointId> {
        self.coordinator.pending().map(|p| p.id()).collect()
    }

    pub fn retained_ids(&self) -> Vec<u64> {
        self.coordinator.retained().map(|c| c.id.0).collect()
    }
}

pub fn handle(path: &str, shared: bool) -> StateHandle {
    StateHandle {
        path: path.into(),
        size: 10,
        checksum: 0,
        kind: HandleKind::Operator,
        shared,
        inline: None,
    }
}

/// One private file in the checkpoint's own directory.
pub fn private_state(id: CheckpointId, subtask: SubtaskId) -> SubtaskState {
    SubtaskState::from_handles(vec![handle(&format!("chk-{id}/{subtask}"), false)])
}

/// A private file plus the given shared files.
pub fn shared_state(id: CheckpointId, subtask: SubtaskId, shared: &[&str]) -> SubtaskState {
    let mut handles = vec![handle(&format!("chk-{id}/{subtask}"), false)];
    handles.extend(shared.iter().map(|p| handle(p, true)));
    SubtaskState::from_handles(handles)
}

pub fn triggered(actions: &[Action]) -> Vec<CheckpointId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::TriggerSources { checkpoint, .. } => Some(*checkpoint),
            _ => None,
        })
        .collect()
}

pub fn allocations(actions: &[Action]) -> Vec<RequestId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::AllocateId { request } => Some(*request),
            _ => None,
        })
        .collect()
}

pub fn completed(actions: &[Action]) -> Vec<CheckpointId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::NotifyComplete { checkpoint, .. } => Some(*checkpoint),
            _ => None,
        })
        .collect()
}

pub fn aborted(actions: &[Action]) -> Vec<(CheckpointId, AbortReason)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::NotifyAborted {
                checkpoint, reason, ..
            } => Some((*checkpoint, reason.clone())),
            _ => None,
        })
        .collect()
}

pub fn discarded(actions: &[Action]) -> Vec<(CheckpointId, Vec<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DiscardCheckpoint {
                checkpoint,
                shared_paths,
            } => Some((*checkpoint, shared_paths.clone())),
            _ => None,
        })
        .collect()
}

pub fn discarded_state(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DiscardState { handles } => Some(handles.iter().map(|h| h.path.clone())),
            _ => None,
        })
        .flatten()
        .collect()
}

pub fn job_failures(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::FailJob { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

pub fn request_failures(actions: &[Action]) -> Vec<(RequestId, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestFailed { request, reason } => Some((*request, reason.clone())),
            _ => None,
        })
        .collect()
}

pub fn id(n: u64) -> CheckpointId {
    CheckpointId(n)
}
