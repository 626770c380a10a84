//! Property test: random interleavings of triggers, acknowledgements, declines, ticks with
//! time advancing, job and subtask status changes, id and metadata answers, and shutdown never
//! break the coordinator's invariants.

use crate::harness::*;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::{CheckpointId, CheckpointKind, SubtaskId};

/// Acknowledgements reference shared files from this many names, so files are reused.
const SHARED_POOL: usize = 6;

#[derive(Clone, Debug)]
enum Op {
    Request {
        savepoint: bool,
    },
    Tick {
        advance_ms: u64,
    },
    AnswerAllocation {
        ok: bool,
    },
    /// Mostly an acknowledgement the coordinator waits for; with `late`, any checkpoint and
    /// subtask (duplicates, late and aborted ones).
    Ack {
        late: bool,
        pair: Index,
        shared: Vec<Index>,
    },
    Decline {
        checkpoint: Index,
        subtask: Index,
    },
    AnswerMetadata {
        checkpoint: Index,
        ok: bool,
    },
    /// An acknowledgement for a checkpoint that never existed.
    StaleAck {
        subtask: Index,
    },
    JobStatus(JobStatus),
    SubtaskStatus {
        subtask: Index,
        status: TaskStatus,
    },
    /// What the driver does after a failover: every subtask RUNNING, then the job.
    Restart,
    Shutdown,
}

fn job_status() -> impl Strategy<Value = JobStatus> {
    prop_oneof![
        12 => Just(JobStatus::Running),
        1 => Just(JobStatus::Failing),
        1 => Just(JobStatus::Restarting),
        1 => Just(JobStatus::Cancelling),
        1 => Just(JobStatus::Finished),
    ]
}

fn task_status() -> impl Strategy<Value = TaskStatus> {
    prop_oneof![
        12 => Just(TaskStatus::Running),
        1 => Just(TaskStatus::Failed),
        1 => Just(TaskStatus::Finished),
        1 => Just(TaskStatus::Cancelled),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::bool::weighted(0.25).prop_map(|savepoint| Op::Request { savepoint }),
        10 => (0u64..40).prop_map(|advance_ms| Op::Tick { advance_ms }),
        8 => prop::bool::weighted(0.9).prop_map(|ok| Op::AnswerAllocation { ok }),
        20 => (prop::bool::weighted(0.1), any::<Index>(), prop::collection::vec(any::<Index>(), 0..3))
            .prop_map(|(late, pair, shared)| Op::Ack { late, pair, shared }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(checkpoint, subtask)| Op::Decline { checkpoint, subtask }),
        6 => (any::<Index>(), prop::bool::weighted(0.9)).prop_map(|(checkpoint, ok)| Op::AnswerMetadata { checkpoint, ok }),
        1 => any::<Index>().prop_map(|subtask| Op::StaleAck { subtask }),
        1 => job_status().prop_map(Op::JobStatus),
        1 => (any::<Index>(), task_status()).prop_map(|(subtask, status)| Op::SubtaskStatus { subtask, status }),
        1 => Just(Op::Restart),
    ]
}

/// A run of operations, with a shutdown somewhere in a fifth of them.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    (
        prop::collection::vec(op(), 1..300),
        prop::option::weighted(0.2, any::<Index>()),
    )
        .prop_map(|(mut ops, shutdown)| {
            if let Some(at) = shutdown {
                let at = at.index(ops.len() + 1);
                ops.insert(at, Op::Shutdown);
            }
            ops
        })
}

fn checkpoint_config() -> impl Strategy<Value = CheckpointConfig> {
    (
        1u32..5,
        0u64..100,
        0u32..3,
        1u32..4,
        prop::option::of(20u64..120),
        100u64..1000,
    )
        .prop_map(
            |(max_concurrent, min_pause, tolerable_failed, num_retained, interval, timeout)| {
                CheckpointConfig {
                    interval: interval.map(Duration::from_millis),
                    timeout: Duration::from_millis(timeout),
                    min_pause: Duration::from_millis(min_pause),
                    max_concurrent,
                    tolerable_failed,
                    num_retained,
                    history_size: 5,
                    ..CheckpointConfig::default()
                }
            },
        )
}

/// What the test has seen, to check each new batch of actions against.
#[derive(Default)]
struct Observed {
    last_triggered: Option<CheckpointId>,
    kinds: BTreeMap<CheckpointId, CheckpointKind>,
    /// Subtasks whose acknowledgement the coordinator accepted, per checkpoint.
    acked: BTreeMap<CheckpointId, BTreeSet<SubtaskId>>,
    /// Shared files named by accepted acknowledgements, per checkpoint.
    shared: BTreeMap<CheckpointId, BTreeSet<String>>,
    allocations: Vec<RequestId>,
    awaiting_metadata: Vec<CheckpointId>,
    confirmed: BTreeSet<CheckpointId>,
    completed: BTreeSet<CheckpointId>,
    aborted: BTreeSet<CheckpointId>,
    resolved_requests: HashSet<RequestId>,
    last_completion_ms: Option<u64>,
}

fn check(
    h: &Harness,
    config: &CheckpointConfig,
    seen: &mut Observed,
    actions: &[Action],
) -> Result<(), TestCaseError> {
    let all: BTreeSet<SubtaskId> = h.all.iter().copied().collect();
    let retained: BTreeSet<CheckpointId> = h.coordinator.retained().map(|c| c.id).collect();
    let referenced_by_retained: HashSet<String> = h
        .coordinator
        .retained()
        .flat_map(|c| c.shared_paths().map(str::to_string).collect::<Vec<_>>())
        .collect();
    let referenced_by_pending = |except: CheckpointId, path: &str| {
        h.coordinator
            .pending()
            .filter(|p| p.id() != except)
            .any(|p| {
                seen.shared
                    .get(&p.id())
                    .is_some_and(|paths| paths.contains(path))
            })
    };
    let mut newly_awaiting = Vec::new();
    for action in actions {
        match action {
            Action::AllocateId { request } => seen.allocations.push(*request),
            Action::TriggerSources {
                checkpoint,
                timestamp_ms,
                kind,
                ..
            } => {
                prop_assert!(
                    seen.last_triggered < Some(*checkpoint),
                    "ids must strictly ascend: {} after {:?}",
                    checkpoint,
                    seen.last_triggered
                );
                seen.last_triggered = Some(*checkpoint);
                seen.kinds.insert(*checkpoint, *kind);
                if let (CheckpointKind::Checkpoint, Some(done)) = (kind, seen.last_completion_ms) {
                    prop_assert!(
                        *timestamp_ms >= done + config.min_pause.as_millis() as u64,
                        "min-pause broken by {}",
                        checkpoint
                    );
                }
            }
            Action::WriteMetadata { checkpoint } => {
                let keys: BTreeSet<SubtaskId> = checkpoint.subtask_states.keys().copied().collect();
                prop_assert_eq!(&keys, &all, "metadata must hold every subtask's state");
                prop_assert_eq!(
                    seen.acked.get(&checkpoint.id),
                    Some(&all),
                    "every subtask must have acknowledged"
                );
                newly_awaiting.push(checkpoint.id);
            }
            Action::NotifyComplete {
                checkpoint,
                subtasks,
            } => {
                prop_assert!(
                    seen.confirmed.contains(checkpoint),
                    "{} completed before its metadata was durable",
                    checkpoint
                );
                prop_assert!(
                    seen.completed.insert(*checkpoint),
                    "second completion notice for {}",
                    checkpoint
                );
                prop_assert!(
                    !seen.aborted.contains(checkpoint),
                    "completion notice for aborted {}",
                    checkpoint
                );
                let distinct: BTreeSet<SubtaskId> = subtasks.iter().copied().collect();
                prop_assert_eq!(&distinct, &all, "one notice for every subtask");
                prop_assert_eq!(subtasks.len(), all.len());
                seen.last_completion_ms = Some(h.now);
            }
            Action::NotifyAborted { checkpoint, .. } => {
                prop_assert!(
                    !seen.completed.contains(checkpoint),
                    "abort notice for completed {}",
                    checkpoint
                );
                prop_assert!(
                    seen.aborted.insert(*checkpoint),
                    "second abort notice for {}",
                    checkpoint
                );
            }
            Action::DiscardCheckpoint {
                checkpoint,
                shared_paths,
            } => {
                prop_assert!(
                    !retained.contains(checkpoint),
                    "retained checkpoint {} discarded",
                    checkpoint
                );
                for path in shared_paths {
                    prop_assert!(
                        !referenced_by_retained.contains(path),
                        "{} is referenced by a retained checkpoint",
                        path
                    );
                    prop_assert!(
                        !referenced_by_pending(*checkpoint, path),
                        "{} is referenced by a pending checkpoint",
                        path
                    );
                }
            }
            Action::DiscardState { handles } => {
                for handle in handles.iter().filter(|h| h.shared) {
                    prop_assert!(
                        !referenced_by_retained.contains(&handle.path),
                        "{} discarded while retained",
                        handle.path
                    );
                }
            }
            Action::RequestCompleted { request, .. } | Action::RequestFailed { request, .. } => {
                prop_assert!(
                    seen.resolved_requests.insert(*request),
                    "request {} resolved twice",
                    request
                );
            }
            Action::FailJob { .. } => {}
        }
    }
    seen.awaiting_metadata.extend(newly_awaiting);
    let checkpoints_pending = h
        .coordinator
        .pending()
        .filter(|p| !p.is_savepoint())
        .count();
    prop_assert!(
        checkpoints_pending <= config.max_concurrent as usize,
        "{} checkpoints pending",
        checkpoints_pending
    );
    if h.coordinator.is_shut_down() {
        prop_assert_eq!(h.coordinator.next_deadline(), None);
        prop_assert_eq!(h.coordinator.pending_count(), 0);
    }
    Ok(())
}

/// Turns one operation into an event, as a driver and its subtasks would send it.
fn event_for(
    op: Op,
    h: &mut Harness,
    seen: &mut Observed,
    next_request: &mut RequestId,
) -> Option<Event> {
    match op {
        Op::Request { savepoint } => {
            *next_request += 1;
            let kind = if savepoint {
                CheckpointKind::Savepoint
            } else {
                CheckpointKind::Checkpoint
            };
            Some(Event::TriggerRequest {
                request: *next_request,
                kind,
            })
        }
        Op::Tick { advance_ms } => {
            h.advance(advance_ms);
            Some(Event::Tick)
        }
        Op::AnswerAllocation { ok } => (!seen.allocations.is_empty()).then(|| {
            let request = seen.allocations.remove(0);
            match (ok, h.counter.get_and_increment()) {
                (true, Ok(id)) => Event::IdAllocated { request, id },
                _ => Event::IdAllocationFailed {
                    request,
                    reason: "injected".into(),
                },
            }
        }),
        Op::Ack { late, pair, shared } => {
            let waiting = |id: CheckpointId| {
                h.coordinator
                    .pending()
                    .any(|p| p.id() == id && !p.is_awaiting_metadata())
            };
            let pairs: Vec<(CheckpointId, SubtaskId)> = seen
                .kinds
                .keys()
                .filter(|id| late || waiting(**id))
                .flat_map(|id| h.all.iter().map(move |s| (*id, *s)))
                .filter(|(id, s)| late || !seen.acked.get(id).is_some_and(|a| a.contains(s)))
                .collect();
            let (id, s) = *pair.get(pairs.as_slice().get(..).filter(|p| !p.is_empty())?);
            let paths: Vec<String> = shared
                .iter()
                .map(|i| format!("shared/{}", i.index(SHARED_POOL)))
                .collect();
            if waiting(id) && !seen.acked.get(&id).is_some_and(|a| a.contains(&s)) {
                seen.acked.entry(id).or_default().insert(s);
                seen.shared
                    .entry(id)
                    .or_default()
                    .extend(paths.iter().cloned());
            }
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let state = shared_state(id, s, &refs);
            Some(Event::Ack {
                job: JOB,
                subtask: s,
                checkpoint: id,
                state,
                metrics: AckMetrics::default(),
            })
        }
        Op::Decline {
            checkpoint,
            subtask,
        } => {
            let triggered: Vec<CheckpointId> = seen.kinds.keys().copied().collect();
            (!triggered.is_empty()).then(|| Event::Decline {
                job: JOB,
                subtask: *subtask.get(&h.all),
                checkpoint: *checkpoint.get(&triggered),
                reason: "injected".into(),
            })
        }
        Op::AnswerMetadata { checkpoint, ok } => (!seen.awaiting_metadata.is_empty()).then(|| {
            let id = seen
                .awaiting_metadata
                .remove(checkpoint.index(seen.awaiting_metadata.len()));
            if ok {
                seen.confirmed.insert(id);
                Event::MetadataWritten {
                    checkpoint: id,
                    metadata_bytes: 10,
                }
            } else {
                Event::MetadataWriteFailed {
                    checkpoint: id,
                    reason: "injected".into(),
                }
            }
        }),
        Op::StaleAck { subtask } => {
            let s = *subtask.get(&h.all);
            let stale = CheckpointId(seen.last_triggered.map_or(0, |c| c.0) + 1_000);
            let state = shared_state(stale, s, &["shared/0"]);
            Some(Event::Ack {
                job: JOB,
                subtask: s,
                checkpoint: stale,
                state,
                metrics: AckMetrics::default(),
            })
        }
        Op::JobStatus(status) => Some(Event::JobStatusChanged(status)),
        Op::SubtaskStatus { subtask, status } => Some(Event::SubtaskStatus {
            subtask: *subtask.get(&h.all),
            status,
        }),
        Op::Restart | Op::Shutdown => None, // handled by the caller
    }
}

fn run(config: CheckpointConfig, ops: Vec<Op>) -> Result<usize, TestCaseError> {
    let mut h = Harness::new(config.clone(), 2, 2);
    let mut seen = Observed::default();
    let mut next_request: RequestId = 1;
    let mut events = vec![Event::JobStatusChanged(JobStatus::Created)];
    for op in std::iter::once(Op::Restart).chain(ops) {
        match op {
            Op::Restart => {
                events.extend(h.all.iter().map(|&subtask| Event::SubtaskStatus {
                    subtask,
                    status: TaskStatus::Running,
                }));
                events.push(Event::JobStatusChanged(JobStatus::Running));
            }
            Op::Shutdown => events.push(Event::Shutdown),
            op => events.extend(event_for(op, &mut h, &mut seen, &mut next_request)),
        }
        for event in events.drain(..) {
            let actions = h.send_raw(event);
            check(&h, &config, &mut seen, &actions)?;
        }
    }
    Ok(seen.completed.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_never_break_an_invariant(config in checkpoint_config(), ops in ops()) {
        run(config, ops)?;
    }
}

/// Guards the property test against passing vacuously: its interleavings must complete
/// checkpoints often.
#[test]
fn random_interleavings_complete_checkpoints() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (checkpoint_config(), ops());
    let mut with_completions = 0;
    for _ in 0..100 {
        let (config, ops) = strategy.new_tree(&mut runner).expect("a case").current();
        if run(config, ops).expect("invariants hold") > 0 {
            with_completions += 1;
        }
    }
    assert!(
        with_completions >= 50,
        "only {with_completions} of 100 runs completed a checkpoint"
    );
}
