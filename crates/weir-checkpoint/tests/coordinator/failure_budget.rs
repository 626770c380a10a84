//! Rule 6: the failure budget (tolerable-failed-checkpoints) and which failures count.

use crate::harness::*;
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::CheckpointKind::{Checkpoint, Savepoint};

fn tolerating(n: u32) -> CheckpointConfig {
    CheckpointConfig {
        tolerable_failed: n,
        ..config()
    }
}

#[test]
fn failures_beyond_the_tolerable_number_fail_the_job_naming_the_reason() {
    let mut h = Harness::running(tolerating(0), 1, 1);
    h.trigger(Checkpoint);
    h.advance(100);
    let actions = h.tick();
    assert_eq!(
        job_failures(&actions),
        vec!["exceeded checkpoint tolerable failure threshold (0): checkpoint 1 expired after 100 ms".to_string()]
    );
}

#[test]
fn declined_checkpoints_count_toward_the_budget() {
    let mut h = Harness::running(tolerating(2), 1, 1);
    let decliner = h.all[1];
    for n in 1..=2 {
        let cp = h.trigger(Checkpoint);
        assert!(
            job_failures(&h.decline(cp, decliner, "no")).is_empty(),
            "failure {n} is tolerated"
        );
    }
    let cp = h.trigger(Checkpoint);
    let verdict = job_failures(&h.decline(cp, decliner, "disk full"));
    assert_eq!(
        verdict,
        vec![format!("exceeded checkpoint tolerable failure threshold (2): checkpoint 3 was declined by subtask {decliner}: disk full")]
    );
}

#[test]
fn expired_checkpoints_count_toward_the_budget() {
    let mut h = Harness::running(tolerating(1), 1, 1);
    h.trigger(Checkpoint);
    h.advance(100);
    assert!(job_failures(&h.tick()).is_empty());
    h.trigger(Checkpoint);
    h.advance(100);
    assert_eq!(job_failures(&h.tick()).len(), 1);
}

#[test]
fn metadata_write_failures_count_toward_the_budget() {
    let mut h = Harness::running(tolerating(0), 1, 1);
    let cp = h.trigger(Checkpoint);
    h.ack_all(cp);
    let actions = h.send(Event::MetadataWriteFailed {
        checkpoint: cp,
        reason: "EIO".into(),
    });
    let verdict = job_failures(&actions);
    assert_eq!(verdict.len(), 1);
    assert!(
        verdict[0].ends_with("checkpoint 1 failed: its metadata could not be written: EIO"),
        "{verdict:?}"
    );
}

#[test]
fn a_success_resets_the_failure_count() {
    let mut h = Harness::running(tolerating(1), 1, 1);
    let decliner = h.all[0];
    let cp = h.trigger(Checkpoint);
    assert!(job_failures(&h.decline(cp, decliner, "a")).is_empty());
    let cp = h.trigger(Checkpoint);
    h.complete(cp);
    let cp = h.trigger(Checkpoint);
    assert!(
        job_failures(&h.decline(cp, decliner, "b")).is_empty(),
        "count restarted after the success"
    );
    let cp = h.trigger(Checkpoint);
    assert_eq!(job_failures(&h.decline(cp, decliner, "c")).len(), 1);
}

#[test]
fn repeated_reports_for_one_checkpoint_count_once() {
    let mut h = Harness::running(tolerating(1), 1, 2);
    let cp = h.trigger(Checkpoint);
    let mut actions = h.decline(cp, h.all[1], "first");
    actions.extend(h.decline(cp, h.all[2], "second"));
    actions.extend(h.send(Event::MetadataWriteFailed {
        checkpoint: cp,
        reason: "late".into(),
    }));
    h.advance(500);
    actions.extend(h.tick());
    assert_eq!(aborted(&actions).len(), 1);
    assert!(
        job_failures(&actions).is_empty(),
        "one checkpoint, one failure: {actions:?}"
    );
    let cp = h.trigger(Checkpoint);
    assert_eq!(job_failures(&h.decline(cp, h.all[1], "again")).len(), 1);
}

#[test]
fn failures_of_checkpoints_older_than_the_last_success_are_ignored() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..tolerating(0)
    };
    let mut h = Harness::running(cfg, 1, 1);
    let older = h.trigger(Checkpoint);
    let newer = h.trigger(Checkpoint);
    h.ack_all(older); // its metadata is being written...
    h.complete(newer); // ...when the newer one completes first
    let actions = h.send(Event::MetadataWriteFailed {
        checkpoint: older,
        reason: "EIO".into(),
    });
    assert!(job_failures(&actions).is_empty(), "{actions:?}");
}

#[test]
fn subsumed_checkpoints_do_not_count() {
    let cfg = CheckpointConfig {
        max_concurrent: 3,
        ..tolerating(0)
    };
    let mut h = Harness::running(cfg, 1, 1);
    h.trigger(Checkpoint);
    h.trigger(Checkpoint);
    let newest = h.trigger(Checkpoint);
    let actions = h.complete(newest);
    assert_eq!(aborted(&actions).len(), 2);
    assert!(job_failures(&actions).is_empty());
}

#[test]
fn trigger_failures_because_a_source_is_not_running_do_not_count() {
    let cfg = CheckpointConfig {
        interval: Some(Duration::from_millis(20)),
        ..tolerating(0)
    };
    let mut h = Harness::running(cfg, 1, 1);
    h.send(Event::SubtaskStatus {
        subtask: h.sources[0],
        status: TaskStatus::Finished,
    });
    let mut actions = Vec::new();
    for _ in 0..5 {
        actions.extend(h.tick_at_deadline());
        actions.extend(h.request(Checkpoint).1);
    }
    assert_eq!(request_failures(&actions).len(), 5);
    assert!(job_failures(&actions).is_empty());
    assert_eq!(h.coordinator.stats().counts.failed_triggers, 10);
}

#[test]
fn shutdown_task_failure_and_job_status_aborts_do_not_count() {
    let cfg = CheckpointConfig {
        max_concurrent: 5,
        ..tolerating(0)
    };
    let mut h = Harness::running(cfg, 1, 1);
    h.trigger(Checkpoint);
    let mut actions = h.send(Event::SubtaskStatus {
        subtask: h.all[1],
        status: TaskStatus::Failed,
    });
    h.send(Event::SubtaskStatus {
        subtask: h.all[1],
        status: TaskStatus::Running,
    });
    h.trigger(Checkpoint);
    actions.extend(h.send(Event::JobStatusChanged(JobStatus::Cancelling)));
    h.send(Event::JobStatusChanged(JobStatus::Running));
    h.trigger(Checkpoint);
    actions.extend(h.send(Event::Shutdown));
    assert_eq!(aborted(&actions).len(), 3);
    assert!(job_failures(&actions).is_empty());
}

#[test]
fn savepoint_failures_do_not_count() {
    let mut h = Harness::running(tolerating(0), 1, 1);
    let sp = h.trigger(Savepoint);
    let actions = h.decline(sp, h.all[0], "cannot");
    assert_eq!(request_failures(&actions).len(), 1);
    assert!(job_failures(&actions).is_empty());
}
