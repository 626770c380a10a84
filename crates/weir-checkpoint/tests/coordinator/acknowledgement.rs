//! Rules 3 to 5: acknowledgements, declines, expiry, completion and what is discarded.

use crate::harness::*;
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::CheckpointKind::Checkpoint;
use weir_core::{JobId, OperatorId, SubtaskId, SubtaskState};

/// Failures do not fail the job here; the failure budget has its own tests.
fn lenient() -> CheckpointConfig {
    CheckpointConfig {
        tolerable_failed: 100,
        ..config()
    }
}

#[test]
fn trigger_and_confirm() {
    let mut h = Harness::running(lenient(), 2, 2);
    let (_, actions) = h.request(Checkpoint);
    let cp = triggered(&actions)[0];
    assert!(actions.contains(&Action::TriggerSources {
        checkpoint: cp,
        timestamp_ms: h.now,
        kind: Checkpoint,
        sources: h.sources.clone(),
    }));
    for s in &h.all.clone()[..3] {
        assert!(h.ack(cp, *s).is_empty());
    }
    h.advance(7);
    let actions = h.ack(cp, h.all[3]);
    let [Action::WriteMetadata { checkpoint }] = actions.as_slice() else {
        panic!("expected only a metadata write, got {actions:?}");
    };
    assert_eq!(checkpoint.subtask_states.len(), 4);
    assert_eq!(
        (
            checkpoint.trigger_timestamp_ms,
            checkpoint.completion_timestamp_ms
        ),
        (1_000, 1_007)
    );
    // Not complete before the metadata is durable.
    assert!(h.coordinator.latest_completed().is_none());
    assert_eq!(h.coordinator.pending_count(), 1);

    h.advance(3);
    let actions = h.metadata_written(cp);
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(
        actions[0],
        Action::NotifyComplete {
            checkpoint: cp,
            subtasks: h.all.clone()
        }
    );
    assert!(matches!(actions[1], Action::RequestCompleted { checkpoint, .. } if checkpoint == cp));
    assert_eq!(h.coordinator.latest_completed().map(|c| c.id), Some(cp));
    assert_eq!(h.coordinator.pending_count(), 0);
    let entry = h
        .coordinator
        .stats()
        .entry(cp)
        .expect("in the history")
        .clone();
    assert_eq!(entry.status, CheckpointStatus::Completed);
    assert_eq!(entry.completion_timestamp_ms, Some(1_010));
    assert_eq!(entry.end_to_end_duration_ms, 10);
    assert_eq!(entry.metadata_size, Some(64));
    assert!(
        h.metadata_written(cp).is_empty(),
        "a repeated confirmation does nothing"
    );
}

#[test]
fn an_acknowledgement_records_state_and_metrics() {
    let mut h = Harness::running(lenient(), 1, 1);
    let cp = h.trigger(Checkpoint);
    h.advance(12);
    let subtask = h.all[1];
    let state = SubtaskState {
        handles: vec![handle("chk-1/x", false)],
        state_size: 300,
        persisted_size: 120,
    };
    let metrics = AckMetrics {
        sync_duration_ms: 2,
        async_duration_ms: 9,
        alignment_duration_ms: 4,
        start_delay_ms: 3,
        unaligned: true,
        persisted_data: 80,
        processed_records: 0,
    };
    h.send(Event::Ack {
        job: JOB,
        subtask,
        checkpoint: cp,
        state,
        metrics,
    });
    let entry = h.coordinator.stats().entry(cp).expect("entry");
    assert_eq!(
        (entry.num_acknowledged_subtasks, entry.num_subtasks),
        (1, 2)
    );
    assert_eq!((entry.state_size, entry.persisted_size), (300, 120));
    assert_eq!(entry.latest_ack_timestamp_ms, Some(1_012));
    let line = entry
        .subtasks
        .iter()
        .find(|l| l.subtask == subtask)
        .expect("line");
    let ack = line.ack.expect("acked");
    assert_eq!(ack.ack_timestamp_ms, 1_012);
    assert_eq!(
        (
            ack.sync_duration_ms,
            ack.async_duration_ms,
            ack.alignment_duration_ms,
            ack.start_delay_ms
        ),
        (2, 9, 4, 3)
    );
    assert_eq!(
        (
            ack.state_size,
            ack.persisted_size,
            ack.end_to_end_duration_ms
        ),
        (300, 120, 12)
    );
    assert_eq!((ack.unaligned, ack.persisted_data), (true, 80));
    assert!(
        entry.unaligned,
        "one unaligned subtask makes the checkpoint unaligned"
    );
    let actions = h.ack(cp, h.all[0]);
    let [Action::WriteMetadata { checkpoint }] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(checkpoint.subtask_states[&subtask].state_size, 300);
}

#[test]
fn a_duplicate_acknowledgement_is_ignored() {
    let mut h = Harness::running(lenient(), 1, 1);
    let cp = h.trigger(Checkpoint);
    assert!(h.ack(cp, h.all[0]).is_empty());
    let repeat = h.ack_with(cp, h.all[0], shared_state(cp, h.all[0], &["shared/x"]));
    assert!(
        repeat.is_empty(),
        "neither recorded nor discarded: {repeat:?}"
    );
    assert_eq!(
        h.coordinator
            .stats()
            .entry(cp)
            .map(|e| e.num_acknowledged_subtasks),
        Some(1)
    );
    let actions = h.ack(cp, h.all[1]);
    let [Action::WriteMetadata { checkpoint }] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert!(
        checkpoint.shared_paths().next().is_none(),
        "the first report is the one kept"
    );
    h.metadata_written(cp);
    assert!(
        h.ack(cp, h.all[0]).is_empty(),
        "a repeat for a completed checkpoint is ignored too"
    );
}

#[test]
fn messages_for_unknown_checkpoints_subtasks_and_jobs_are_harmless() {
    let mut h = Harness::running(lenient(), 1, 1);
    let done = h.trigger(Checkpoint);
    h.ack_with(
        done,
        h.all[0],
        shared_state(done, h.all[0], &["shared/kept"]),
    );
    h.complete(done);
    let cp = h.trigger(Checkpoint);
    let (s0, s1) = (h.all[0], h.all[1]);

    // Unknown checkpoint: its state is discarded, except shared files a retained one uses.
    let actions = h.ack_with(
        id(99),
        s0,
        shared_state(id(99), s0, &["shared/kept", "shared/orphan"]),
    );
    assert_eq!(
        discarded_state(&actions),
        vec![
            "chk-99/".to_string() + &s0.to_string(),
            "shared/orphan".into()
        ]
    );

    // Unknown subtask of this job: discarded. Another job: not ours to touch.
    let stranger = SubtaskId::new(OperatorId::from_uid("stranger"), 0);
    let actions = h.ack_with(cp, stranger, private_state(cp, stranger));
    assert_eq!(discarded_state(&actions).len(), 1);
    let other_job = h.send(Event::Ack {
        job: JobId(42),
        subtask: s0,
        checkpoint: cp,
        state: private_state(cp, s0),
        metrics: AckMetrics::default(),
    });
    assert!(other_job.is_empty());
    for decline in [
        Event::Decline {
            job: JobId(42),
            subtask: s0,
            checkpoint: cp,
            reason: "x".into(),
        },
        Event::Decline {
            job: JOB,
            subtask: stranger,
            checkpoint: cp,
            reason: "x".into(),
        },
        Event::Decline {
            job: JOB,
            subtask: s0,
            checkpoint: id(77),
            reason: "x".into(),
        },
        Event::MetadataWritten {
            checkpoint: id(77),
            metadata_bytes: 1,
        },
        Event::MetadataWriteFailed {
            checkpoint: id(77),
            reason: "x".into(),
        },
        Event::IdAllocated {
            request: 12345,
            id: id(500),
        },
    ] {
        assert!(h.send(decline.clone()).is_empty(), "{decline:?}");
    }
    assert_eq!(h.pending_ids(), vec![cp]);
    assert_eq!(
        h.coordinator
            .stats()
            .entry(cp)
            .map(|e| e.num_acknowledged_subtasks),
        Some(0)
    );

    // A late ack for an aborted checkpoint: discarded.
    h.decline(cp, s1, "disk full");
    let late = h.ack(cp, s0);
    assert_eq!(discarded_state(&late), vec![format!("chk-{cp}/{s0}")]);
}

#[test]
fn trigger_and_decline() {
    let mut h = Harness::running(lenient(), 2, 1);
    let cp = h.trigger(Checkpoint);
    h.ack(cp, h.all[0]);
    h.advance(5);
    let decliner = h.all[2];
    let actions = h.decline(cp, decliner, "async snapshot failed: disk full");
    let reason = AbortReason::Declined(format!("{decliner}: async snapshot failed: disk full"));
    assert_eq!(
        actions[0],
        Action::DiscardCheckpoint {
            checkpoint: cp,
            shared_paths: vec![]
        }
    );
    assert_eq!(
        actions[1],
        Action::NotifyAborted {
            checkpoint: cp,
            reason: reason.clone(),
            subtasks: h.all.clone()
        }
    );
    assert!(
        actions[2..]
            .iter()
            .all(|a| matches!(a, Action::RequestFailed { .. })),
        "{actions:?}"
    );
    assert_eq!(h.coordinator.pending_count(), 0);
    let entry = h.coordinator.stats().entry(cp).expect("entry");
    assert_eq!(entry.status, CheckpointStatus::Failed);
    assert_eq!(
        entry.failure_reason.as_deref(),
        Some(reason.to_string().as_str())
    );
    assert_eq!(entry.failure_timestamp_ms, Some(1_005));
    // The remaining acks arrive late: discarded, never a completion.
    let late = h.ack(cp, h.all[1]);
    assert!(completed(&late).is_empty());
    assert_eq!(discarded_state(&late).len(), 1);
    // A late ack whose state is inline (no file of its own): nothing to delete.
    let mut inline = handle(&format!("chk-{cp}/{}", h.all[2]), false);
    inline.inline = Some(vec![1, 2, 3]);
    let late = h.ack_with(cp, h.all[2], SubtaskState::from_handles(vec![inline]));
    assert!(completed(&late).is_empty());
    assert!(discarded_state(&late).is_empty(), "{late:?}");
}

#[test]
fn trigger_and_decline_with_a_second_checkpoint_pending() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..lenient()
    };
    let mut h = Harness::running(cfg, 1, 2);
    let first = h.trigger(Checkpoint);
    let second = h.trigger(Checkpoint);
    h.ack(first, h.all[0]);
    h.ack(second, h.all[0]);
    let actions = h.decline(first, h.all[1], "no");
    assert_eq!(aborted(&actions).len(), 1);
    assert_eq!(aborted(&actions)[0].0, first);
    assert_eq!(h.pending_ids(), vec![second]);
    let actions = h.complete(second);
    assert_eq!(completed(&actions), vec![second]);
    assert!(aborted(&actions).is_empty());
}

#[test]
fn concurrent_checkpoints_acked_interleaved_complete_independently() {
    let cfg = CheckpointConfig {
        max_concurrent: 3,
        ..lenient()
    };
    let mut h = Harness::running(cfg, 2, 3);
    let ids: Vec<_> = (0..3).map(|_| h.trigger(Checkpoint)).collect();
    let mut writes = Vec::new();
    for s in h.all.clone() {
        for cp in [ids[2], ids[0], ids[1]] {
            for a in h.ack(cp, s) {
                if let Action::WriteMetadata { checkpoint } = a {
                    writes.push(checkpoint.id);
                }
            }
        }
    }
    assert_eq!(
        writes,
        vec![ids[2], ids[0], ids[1]],
        "each is finalised when its own last ack lands"
    );
    let mut notices = Vec::new();
    for cp in &ids {
        let actions = h.metadata_written(*cp);
        assert!(aborted(&actions).is_empty());
        notices.extend(completed(&actions));
    }
    assert_eq!(notices, ids);
    assert_eq!(h.retained_ids(), vec![1, 2, 3]);
}

#[test]
fn success_subsumes_older_pending_and_discards_their_state() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..config()
    }; // tolerable 0: subsumption must not count
    let mut h = Harness::running(cfg, 1, 1);
    let older = h.trigger(Checkpoint);
    let newer = h.trigger(Checkpoint);
    let (s0, s1) = (h.all[0], h.all[1]);
    h.ack_with(
        older,
        s0,
        shared_state(older, s0, &["shared/a", "shared/only-older"]),
    );
    h.ack_with(newer, s0, shared_state(newer, s0, &["shared/a"]));
    h.ack(newer, s1);
    let actions = h.metadata_written(newer);
    assert_eq!(
        actions,
        vec![
            Action::DiscardCheckpoint {
                checkpoint: older,
                shared_paths: vec!["shared/only-older".into()]
            },
            Action::NotifyAborted {
                checkpoint: older,
                reason: AbortReason::Subsumed,
                subtasks: h.all.clone()
            },
            Action::RequestFailed {
                request: 2,
                reason: format!(
                    "checkpoint {older} aborted: subsumed by a newer completed checkpoint"
                )
            },
            Action::NotifyComplete {
                checkpoint: newer,
                subtasks: h.all.clone()
            },
            Action::RequestCompleted {
                request: 3,
                checkpoint: newer
            },
        ]
    );
    assert_eq!(
        discarded_state(&h.ack(older, s1)),
        vec![format!("chk-{older}/{s1}")]
    );
}

#[test]
fn timeout_expires_a_checkpoint_in_isolation() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..lenient()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let first = h.trigger(Checkpoint); // at 1000, expires at 1100
    h.ack(first, h.all[0]);
    h.advance(50);
    let second = h.trigger(Checkpoint); // at 1050
    h.now = 1_099;
    assert!(h.tick().is_empty());
    h.now = 1_100;
    let actions = h.tick();
    assert_eq!(aborted(&actions), vec![(first, AbortReason::Expired)]);
    assert_eq!(discarded(&actions), vec![(first, vec![])]);
    assert_eq!(h.pending_ids(), vec![second]);
    assert_eq!(
        h.coordinator
            .stats()
            .entry(first)
            .and_then(|e| e.failure_timestamp_ms),
        Some(1_100)
    );
    assert_eq!(completed(&h.complete(second)), vec![second]);
}

#[test]
fn a_failed_metadata_write_aborts_the_checkpoint() {
    let mut h = Harness::running(lenient(), 1, 1);
    let cp = h.trigger(Checkpoint);
    h.ack_all(cp);
    let actions = h.send(Event::MetadataWriteFailed {
        checkpoint: cp,
        reason: "No space left on device".into(),
    });
    assert_eq!(
        aborted(&actions),
        vec![(
            cp,
            AbortReason::MetadataWriteFailed("No space left on device".into())
        )]
    );
    assert_eq!(discarded(&actions), vec![(cp, vec![])]);
    assert!(h.coordinator.latest_completed().is_none());
    assert!(
        completed(&h.metadata_written(cp)).is_empty(),
        "a confirmation after the abort never completes it"
    );
}

#[test]
fn metadata_landing_after_an_abort_is_discarded_again() {
    let mut h = Harness::running(lenient(), 1, 1);
    let cp = h.trigger(Checkpoint);
    h.ack_all(cp);
    h.send(Event::Shutdown);
    let actions = h.metadata_written(cp);
    assert_eq!(
        actions,
        vec![Action::DiscardCheckpoint {
            checkpoint: cp,
            shared_paths: vec![]
        }]
    );
}

#[test]
fn a_subtask_failure_aborts_every_pending_checkpoint() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let a = h.trigger(Checkpoint);
    let b = h.trigger(Checkpoint);
    let actions = h.send(Event::SubtaskStatus {
        subtask: h.all[1],
        status: TaskStatus::Failed,
    });
    assert_eq!(
        aborted(&actions),
        vec![(a, AbortReason::TaskFailure), (b, AbortReason::TaskFailure)]
    );
    assert!(
        job_failures(&actions).is_empty(),
        "a task failure is not a checkpoint failure"
    );
}

#[test]
fn a_finished_subtask_aborts_the_checkpoints_it_has_not_acknowledged() {
    let cfg = CheckpointConfig {
        max_concurrent: 2,
        timeout: Duration::from_secs(60),
        ..lenient()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let a = h.trigger(Checkpoint);
    let b = h.trigger(Checkpoint);
    let source = h.all[0];
    h.ack(a, source);
    let actions = h.send(Event::SubtaskStatus {
        subtask: source,
        status: TaskStatus::Finished,
    });
    assert_eq!(
        aborted(&actions),
        vec![(b, AbortReason::SubtaskFinished(source))]
    );
    assert_eq!(completed(&h.ack(a, h.all[1])), vec![], "metadata first");
    assert_eq!(h.pending_ids(), vec![a]);
}

#[test]
fn an_acknowledgement_of_an_earlier_attempt_is_never_recorded_and_its_unreferenced_files_go() {
    let mut h = Harness::running(lenient(), 1, 1);
    let (s0, s1) = (h.all[0], h.all[1]);
    let first = h.trigger(Checkpoint);
    h.ack_with(first, s0, shared_state(first, s0, &["shared/kept"]));
    h.ack(first, s1);
    h.metadata_written(first);
    let second = h.trigger(Checkpoint);
    let stale = |checkpoint, state| Event::StaleAck {
        job: JOB,
        subtask: s0,
        checkpoint,
        state,
    };
    let state = shared_state(second, s0, &["shared/kept", "shared/new"]);
    let actions = h.send(stale(second, state));
    assert_eq!(
        discarded_state(&actions),
        vec![format!("chk-{second}/{s0}"), "shared/new".to_string()],
        "the file the retained checkpoint references stays"
    );
    let entry = h.coordinator.stats().entry(second);
    assert_eq!(entry.map(|e| e.num_acknowledged_subtasks), Some(0));
    // A repeat for a completed checkpoint may name its very files: nothing goes.
    let actions = h.send(stale(first, shared_state(first, s0, &["shared/kept"])));
    assert!(actions.is_empty(), "{actions:?}");
}
