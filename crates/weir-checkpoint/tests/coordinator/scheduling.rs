//! Rules 1 and 2: when checkpoints start, the queue of triggers not allowed yet, and ids.

use crate::harness::*;
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::CheckpointKind::{Checkpoint, Savepoint};

fn periodic(interval_ms: u64) -> CheckpointConfig {
    CheckpointConfig {
        interval: Some(Duration::from_millis(interval_ms)),
        tolerable_failed: 10,
        ..config()
    }
}

#[test]
fn nothing_is_triggered_before_the_job_is_running() {
    let mut h = Harness::new(periodic(50), 2, 1);
    assert_eq!(h.coordinator.next_deadline(), None);
    h.advance(1_000);
    assert!(h.tick().is_empty());
    let (_, actions) = h.request(Checkpoint);
    assert_eq!(request_failures(&actions).len(), 1);
    assert!(
        request_failures(&actions)[0]
            .1
            .contains("the job is not running (CREATED)"),
        "{actions:?}"
    );

    // Subtasks running is not enough: the job must be RUNNING too.
    for s in h.all.clone() {
        h.send(Event::SubtaskStatus {
            subtask: s,
            status: TaskStatus::Running,
        });
    }
    h.advance(1_000);
    assert!(h.tick().is_empty());
    assert!(triggered(&h.request(Savepoint).1).is_empty());

    h.send(Event::JobStatusChanged(JobStatus::Running));
    assert_eq!(h.coordinator.next_deadline(), Some(h.now + 50));
    let actions = h.tick_at_deadline();
    assert_eq!(triggered(&actions), vec![id(1)]);
}

#[test]
fn periodic_checkpoints_start_on_running_and_stop_on_any_other_status() {
    let mut h = Harness::running(periodic(50), 1, 1);
    let first = h.tick_at_deadline();
    assert_eq!(triggered(&first), vec![id(1)]);
    h.complete(id(1));
    assert_eq!(triggered(&h.tick_at_deadline()), vec![id(2)]);

    let actions = h.send(Event::JobStatusChanged(JobStatus::Failing));
    assert_eq!(
        aborted(&actions),
        vec![(id(2), AbortReason::JobNotRunning(JobStatus::Failing))]
    );
    assert_eq!(h.coordinator.next_deadline(), None);
    h.advance(10_000);
    assert!(triggered(&h.tick()).is_empty());

    h.send(Event::JobStatusChanged(JobStatus::Restarting));
    h.send(Event::JobStatusChanged(JobStatus::Running));
    assert_eq!(triggered(&h.tick_at_deadline()), vec![id(3)]);
}

#[test]
fn min_pause_delays_the_next_trigger_after_a_completion() {
    let cfg = CheckpointConfig {
        min_pause: Duration::from_millis(50),
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let first = h.trigger(Checkpoint);
    h.advance(10);
    h.complete(first); // completes at 1010
    h.advance(10);
    let (_, actions) = h.request(Checkpoint);
    assert!(
        actions.is_empty(),
        "queued while the pause lasts: {actions:?}"
    );
    assert_eq!(h.coordinator.next_deadline(), Some(1_060));
    h.now = 1_059;
    assert!(h.tick().is_empty());
    h.now = 1_060;
    let actions = h.tick();
    assert_eq!(triggered(&actions), vec![id(2)]);
    assert!(actions.contains(&Action::TriggerSources {
        checkpoint: id(2),
        timestamp_ms: 1_060,
        kind: Checkpoint,
        sources: h.sources.clone(),
    }));
}

#[test]
fn a_checkpoint_ending_during_id_allocation_sends_the_trigger_back_to_wait_for_min_pause() {
    let cfg = CheckpointConfig {
        min_pause: Duration::from_millis(50),
        max_concurrent: 2,
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 0);
    let first = h.trigger(Checkpoint);
    let request = h.fresh_request();
    let actions = h.send_raw(Event::TriggerRequest {
        request,
        kind: Checkpoint,
    });
    assert_eq!(actions, vec![Action::AllocateId { request }]);
    h.advance(5);
    h.complete(first); // at 1005, while the id is being allocated
    h.advance(1);
    let dropped = h.counter.get_and_increment().expect("id");
    let actions = h.send_raw(Event::IdAllocated {
        request,
        id: dropped,
    });
    assert!(
        triggered(&actions).is_empty(),
        "min-pause is re-checked when the id arrives"
    );
    assert_eq!(h.coordinator.next_deadline(), Some(1_055));
    h.now = 1_055;
    let actions = h.tick();
    assert_eq!(allocations(&actions), vec![request]);
    assert_eq!(
        triggered(&actions),
        vec![id(3)],
        "the dropped id 2 leaves a gap, never a step back"
    );
}

/// With `max` checkpoints pending, the next trigger waits; it starts when one ends.
fn max_concurrent_queues_triggers_beyond_the_limit(max: u32) {
    let cfg = CheckpointConfig {
        max_concurrent: max,
        ..config()
    };
    let mut h = Harness::running(cfg, 2, 2);
    let ids: Vec<_> = (0..max).map(|_| h.trigger(Checkpoint)).collect();
    assert_eq!(h.coordinator.pending_count(), max as usize);
    let (_, actions) = h.request(Checkpoint);
    assert!(
        actions.is_empty(),
        "the {}th trigger must wait: {actions:?}",
        max + 1
    );
    assert_eq!(h.coordinator.pending_count(), max as usize);
    // A decline of the oldest frees one slot: the queued trigger starts at once.
    let actions = h.decline(ids[0], h.all[1], "no space");
    assert_eq!(triggered(&actions), vec![id(max as u64 + 1)]);
    assert_eq!(h.coordinator.pending_count(), max as usize);
}

#[test]
fn max_concurrent_1_queues_the_next_trigger_until_a_checkpoint_ends() {
    max_concurrent_queues_triggers_beyond_the_limit(1);
}

#[test]
fn max_concurrent_2_queues_the_next_trigger_until_a_checkpoint_ends() {
    max_concurrent_queues_triggers_beyond_the_limit(2);
}

#[test]
fn max_concurrent_5_queues_the_next_trigger_until_a_checkpoint_ends() {
    max_concurrent_queues_triggers_beyond_the_limit(5);
}

#[test]
fn max_concurrent_with_subsumption_frees_every_subsumed_slot() {
    let cfg = CheckpointConfig {
        max_concurrent: 3,
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let ids: Vec<_> = (0..3).map(|_| h.trigger(Checkpoint)).collect();
    let (_, waiting) = h.request(Checkpoint);
    assert!(waiting.is_empty());
    let actions = h.complete(ids[2]);
    assert_eq!(completed(&actions), vec![ids[2]]);
    let subsumed: Vec<_> = aborted(&actions).into_iter().map(|(id, _)| id).collect();
    assert_eq!(subsumed, vec![ids[0], ids[1]]);
    assert_eq!(triggered(&actions), vec![id(4)]);
    assert_eq!(h.pending_ids(), vec![id(4)]);
}

#[test]
fn a_queued_periodic_trigger_is_served_as_soon_as_a_checkpoint_aborts() {
    let mut h = Harness::running(periodic(30), 1, 1);
    assert_eq!(triggered(&h.tick_at_deadline()), vec![id(1)]);
    h.advance(30);
    assert!(
        triggered(&h.tick()).is_empty(),
        "max-concurrent 1: the periodic trigger waits"
    );
    h.advance(30);
    assert!(
        triggered(&h.tick()).is_empty(),
        "and a second periodic trigger joins it, not behind it"
    );
    let actions = h.decline(id(1), h.all[0], "busy");
    assert_eq!(triggered(&actions), vec![id(2)]);
    let actions = h.complete(id(2));
    assert!(
        triggered(&actions).is_empty(),
        "only one periodic trigger was queued"
    );
}

#[test]
fn a_trigger_fails_cleanly_when_a_source_is_not_running() {
    let mut h = Harness::new(periodic(50), 2, 1);
    // Source 1 never reports RUNNING.
    for s in [h.all[0], h.all[2]] {
        h.send(Event::SubtaskStatus {
            subtask: s,
            status: TaskStatus::Running,
        });
    }
    h.send(Event::JobStatusChanged(JobStatus::Running));
    let (request, actions) = h.request(Checkpoint);
    let failures = request_failures(&actions);
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0, request);
    assert!(
        failures[0]
            .1
            .contains(&format!("source subtask {} is not running", h.sources[1])),
        "{failures:?}"
    );
    assert!(triggered(&h.tick_at_deadline()).is_empty());
    let counts = h.coordinator.stats().counts;
    assert_eq!(
        (counts.failed_triggers, counts.failed, counts.total),
        (2, 0, 0)
    );
}

#[test]
fn ids_come_from_outside_and_the_job_status_is_rechecked_when_they_arrive() {
    let mut h = Harness::running(config(), 1, 1);
    let request = h.fresh_request();
    let actions = h.send_raw(Event::TriggerRequest {
        request,
        kind: Checkpoint,
    });
    assert_eq!(actions, vec![Action::AllocateId { request }]);
    let actions = h.send_raw(Event::JobStatusChanged(JobStatus::Failing));
    assert_eq!(request_failures(&actions).len(), 1);
    let actions = h.send_raw(Event::IdAllocated { request, id: id(1) });
    assert!(triggered(&actions).is_empty());
    assert_eq!(h.coordinator.pending_count(), 0);
}

#[test]
fn ids_come_from_outside_and_the_sources_are_rechecked_when_they_arrive() {
    let mut h = Harness::running(config(), 1, 1);
    let request = h.fresh_request();
    h.send_raw(Event::TriggerRequest {
        request,
        kind: Checkpoint,
    });
    let source = h.sources[0];
    h.send_raw(Event::SubtaskStatus {
        subtask: source,
        status: TaskStatus::Failed,
    });
    let actions = h.send_raw(Event::IdAllocated { request, id: id(1) });
    assert!(triggered(&actions).is_empty());
    assert!(
        request_failures(&actions)[0].1.contains("is not running"),
        "{actions:?}"
    );
}

#[test]
fn a_failed_id_allocation_fails_the_request_and_the_next_trigger_goes_ahead() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let first = h.fresh_request();
    let second = h.fresh_request();
    assert_eq!(
        allocations(&h.send_raw(Event::TriggerRequest {
            request: first,
            kind: Checkpoint
        })),
        vec![first]
    );
    assert!(
        h.send_raw(Event::TriggerRequest {
            request: second,
            kind: Checkpoint
        })
        .is_empty(),
        "one allocation at a time"
    );
    let actions = h.send_raw(Event::IdAllocationFailed {
        request: first,
        reason: "zookeeper unreachable".into(),
    });
    assert_eq!(
        request_failures(&actions)[0].1,
        "could not allocate a checkpoint id: zookeeper unreachable"
    );
    assert_eq!(allocations(&actions), vec![second]);
    assert!(job_failures(&actions).is_empty());
}

#[test]
fn an_id_not_above_the_last_used_one_fails_the_job() {
    let mut h = Harness::running(config(), 1, 1);
    let first = h.trigger(Checkpoint);
    h.complete(first);
    let request = h.fresh_request();
    h.send_raw(Event::TriggerRequest {
        request,
        kind: Checkpoint,
    });
    let actions = h.send_raw(Event::IdAllocated { request, id: first });
    assert!(triggered(&actions).is_empty());
    let failures = job_failures(&actions);
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0]
            .contains("checkpoint id counter went backwards: it returned 1 but 1 was already used"),
        "{failures:?}"
    );
    assert_eq!(request_failures(&actions)[0].0, request);
}

#[test]
fn ids_ascend_after_restore_when_the_counter_is_seeded_from_the_max_id() {
    let mut before = Harness::running(config(), 1, 1);
    for _ in 0..3 {
        let id = before.trigger(Checkpoint);
        before.complete(id);
    }
    let found: Vec<CompletedCheckpoint> = before.coordinator.retained().cloned().collect();
    let max_found = found
        .iter()
        .map(|c| c.id)
        .max()
        .expect("retained checkpoints");

    let mut after = Harness::new(config(), 1, 1);
    let discards = after.coordinator.restore(found, after.now);
    assert!(discards.is_empty());
    after.counter = StandaloneCheckpointIdCounter::starting_after(max_found);
    after.start();
    assert_eq!(after.trigger(Checkpoint), id(4));

    // A counter not seeded from storage would hand out 1 again: refused.
    let request = after.fresh_request();
    after.send_raw(Event::TriggerRequest {
        request,
        kind: Savepoint,
    });
    let actions = after.send_raw(Event::IdAllocated { request, id: id(2) });
    assert_eq!(job_failures(&actions).len(), 1);
}

#[test]
fn next_deadline_is_the_earliest_of_the_periodic_trigger_and_the_timeouts() {
    let mut h = Harness::running(periodic(500), 1, 1);
    assert_eq!(h.coordinator.next_deadline(), Some(1_500));
    assert_eq!(triggered(&h.tick_at_deadline()), vec![id(1)]);
    assert_eq!(
        h.coordinator.next_deadline(),
        Some(1_600),
        "checkpoint 1 expires at 1600"
    );
    let actions = h.tick_at_deadline();
    assert_eq!(aborted(&actions), vec![(id(1), AbortReason::Expired)]);
    assert_eq!(h.coordinator.next_deadline(), Some(2_000));
}
