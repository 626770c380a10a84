//! Rules 7 and 8: savepoints go through the same coordinator with their own rules; shutdown.

use crate::harness::*;
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::CheckpointKind::{Checkpoint, Savepoint};

#[test]
fn savepoints_are_not_subsumed() {
    let mut h = Harness::running(config(), 1, 1);
    let sp = h.trigger(Savepoint);
    let cp = h.trigger(Checkpoint);
    let actions = h.complete(cp);
    assert!(aborted(&actions).is_empty(), "{actions:?}");
    assert_eq!(h.pending_ids(), vec![sp]);
    assert_eq!(completed(&h.complete(sp)), vec![sp]);
}

#[test]
fn savepoints_are_not_limited_by_max_concurrent_or_min_pause() {
    let cfg = CheckpointConfig {
        max_concurrent: 1,
        min_pause: Duration::from_secs(60),
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let first = h.trigger(Checkpoint);
    let sp1 = h.trigger(Savepoint); // beyond max-concurrent
    h.complete(first);
    let sp2 = h.trigger(Savepoint); // inside the min-pause
    let (_, waiting) = h.request(Checkpoint);
    assert!(waiting.is_empty(), "a checkpoint still waits for the pause");
    assert_eq!(h.pending_ids(), vec![sp1, sp2]);
}

#[test]
fn savepoints_are_served_ahead_of_queued_periodic_checkpoints() {
    let cfg = CheckpointConfig {
        interval: Some(Duration::from_millis(30)),
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let first = h.fresh_request();
    assert_eq!(
        allocations(&h.send_raw(Event::TriggerRequest {
            request: first,
            kind: Savepoint
        })),
        vec![first]
    );
    h.advance(30);
    assert!(
        h.send_raw(Event::Tick).is_empty(),
        "the periodic trigger queues behind the allocation"
    );
    let second = h.fresh_request();
    assert!(h
        .send_raw(Event::TriggerRequest {
            request: second,
            kind: Savepoint
        })
        .is_empty());
    let actions = h.send_raw(Event::IdAllocated {
        request: first,
        id: id(1),
    });
    assert_eq!(triggered(&actions), vec![id(1)]);
    assert_eq!(
        allocations(&actions),
        vec![second],
        "the later savepoint goes before the earlier periodic checkpoint"
    );
}

#[test]
fn a_completed_savepoint_is_not_retained_but_completes_its_request_and_notifies_subtasks() {
    let mut h = Harness::running(config(), 1, 2);
    let (request, actions) = h.request(Savepoint);
    let sp = triggered(&actions)[0];
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::TriggerSources {
            kind: Savepoint,
            ..
        }
    )));
    let actions = h.complete(sp);
    assert!(actions.contains(&Action::NotifyComplete {
        checkpoint: sp,
        subtasks: h.all.clone()
    }));
    assert!(actions.contains(&Action::RequestCompleted {
        request,
        checkpoint: sp
    }));
    assert!(h.coordinator.latest_completed().is_none());
    let stats = h.coordinator.stats();
    assert_eq!(stats.latest.savepoint.as_ref().map(|e| e.id), Some(sp));
    assert!(stats.latest.completed.is_none());
}

#[test]
fn shutdown_aborts_pending_checkpoints_and_cancels_timers() {
    let cfg = CheckpointConfig {
        interval: Some(Duration::from_millis(30)),
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let cp = triggered(&h.tick_at_deadline())[0];
    let (queued, waiting) = h.request(Checkpoint);
    assert!(waiting.is_empty());
    let actions = h.send(Event::Shutdown);
    assert_eq!(aborted(&actions), vec![(cp, AbortReason::Shutdown)]);
    assert_eq!(discarded(&actions), vec![(cp, vec![])]);
    assert_eq!(
        request_failures(&actions),
        vec![(queued, "coordinator is shut down".to_string())]
    );
    assert!(job_failures(&actions).is_empty());
    assert_eq!(h.coordinator.next_deadline(), None);
    h.advance(10_000);
    assert!(h.tick().is_empty());
    assert!(h
        .send(Event::JobStatusChanged(JobStatus::Running))
        .is_empty());
    assert_eq!(h.coordinator.next_deadline(), None);
}

#[test]
fn a_trigger_after_shutdown_is_rejected() {
    let mut h = Harness::running(config(), 1, 1);
    h.send(Event::Shutdown);
    let (request, actions) = h.request(Savepoint);
    assert_eq!(
        actions,
        vec![Action::RequestFailed {
            request,
            reason: "coordinator is shut down".into()
        }]
    );
}
