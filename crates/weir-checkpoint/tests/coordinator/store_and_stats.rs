//! Rule 5's store side (retention, shared-state reference counting, restore) and rule 9 (stats).

use crate::harness::*;
use std::collections::BTreeMap;
use std::time::Duration;
use weir_checkpoint::*;
use weir_core::CheckpointId;
use weir_core::CheckpointKind::{Checkpoint, Savepoint};

fn retaining(n: u32) -> CheckpointConfig {
    CheckpointConfig {
        num_retained: n,
        max_concurrent: 2,
        ..config()
    }
}

/// Completes a checkpoint whose first subtask references the given shared files.
fn complete_with_shared(h: &mut Harness, shared: &[&str]) -> (CheckpointId, Vec<Action>) {
    let cp = h.trigger(Checkpoint);
    let s0 = h.all[0];
    h.ack_with(cp, s0, shared_state(cp, s0, shared));
    (cp, h.complete(cp))
}

#[test]
fn the_store_keeps_num_retained_and_discards_evicted_checkpoints() {
    let mut h = Harness::running(retaining(2), 1, 1);
    for _ in 0..2 {
        let (_, actions) = complete_with_shared(&mut h, &[]);
        assert!(discarded(&actions).is_empty());
    }
    let (third, actions) = complete_with_shared(&mut h, &[]);
    assert_eq!(discarded(&actions), vec![(id(1), vec![])]);
    let discard_at = actions
        .iter()
        .position(|a| matches!(a, Action::DiscardCheckpoint { .. }));
    let notify_at = actions
        .iter()
        .position(|a| matches!(a, Action::NotifyComplete { .. }));
    assert!(discard_at < notify_at, "store first, then notifications");
    assert_eq!(h.retained_ids(), vec![2, third.0]);
}

#[test]
fn a_shared_file_referenced_by_two_retained_checkpoints_survives_eviction_of_one() {
    let mut h = Harness::running(retaining(2), 1, 1);
    complete_with_shared(&mut h, &["shared/a", "shared/b"]);
    complete_with_shared(&mut h, &["shared/a"]);
    let (_, actions) = complete_with_shared(&mut h, &[]);
    assert_eq!(
        discarded(&actions),
        vec![(id(1), vec!["shared/b".to_string()])]
    );
    let (_, actions) = complete_with_shared(&mut h, &[]);
    assert_eq!(
        discarded(&actions),
        vec![(id(2), vec!["shared/a".to_string()])]
    );
}

#[test]
fn a_shared_file_used_by_a_pending_checkpoint_survives_eviction_until_that_one_ends() {
    let mut h = Harness::running(retaining(1), 1, 1);
    complete_with_shared(&mut h, &["shared/a"]);
    let reuser = h.trigger(Checkpoint);
    let s0 = h.all[0];
    h.ack_with(reuser, s0, shared_state(reuser, s0, &["shared/a"]));
    let (newest, actions) = complete_with_shared(&mut h, &[]);
    // Checkpoint 1 is evicted while 2 still uses "shared/a"; 2 is then subsumed by 3 and the
    // file goes with it.
    assert_eq!(
        discarded(&actions),
        vec![(id(1), vec![]), (reuser, vec!["shared/a".to_string()])]
    );
    assert_eq!(h.retained_ids(), vec![newest.0]);
}

fn stored(id: u64, shared: &[&str]) -> CompletedCheckpoint {
    let h = Harness::new(config(), 1, 0);
    let mut states = BTreeMap::new();
    states.insert(h.all[0], shared_state(CheckpointId(id), h.all[0], shared));
    CompletedCheckpoint {
        job: JOB,
        id: CheckpointId(id),
        kind: Checkpoint,
        trigger_timestamp_ms: id * 100,
        completion_timestamp_ms: id * 100 + 5,
        subtask_states: states,
    }
}

#[test]
fn restore_seeds_the_store_with_reference_counts_and_counts_a_restore() {
    let mut h = Harness::new(retaining(2), 1, 1);
    let found = vec![
        stored(3, &["shared/a", "shared/b"]),
        stored(5, &["shared/a"]),
        stored(8, &["shared/c"]),
    ];
    let actions = h.coordinator.restore(found, h.now);
    assert_eq!(
        actions,
        vec![Action::DiscardCheckpoint {
            checkpoint: id(3),
            shared_paths: vec!["shared/b".into()]
        }]
    );
    assert_eq!(h.retained_ids(), vec![5, 8]);
    let stats = h.coordinator.stats();
    assert_eq!(stats.counts.restored, 1);
    assert_eq!(
        stats
            .latest
            .restored
            .map(|r| (r.id, r.restore_timestamp_ms)),
        Some((id(8), 1_000))
    );

    h.counter = StandaloneCheckpointIdCounter::starting_after(id(8));
    h.start();
    let (cp, actions) = complete_with_shared(&mut h, &["shared/c"]);
    assert_eq!(cp, id(9));
    assert_eq!(
        discarded(&actions),
        vec![(id(5), vec!["shared/a".to_string()])]
    );

    // After a failover the job restores from the latest retained checkpoint again.
    assert!(h.coordinator.restore(Vec::new(), 2_000).is_empty());
    assert_eq!(h.coordinator.stats().counts.restored, 2);
    assert_eq!(
        h.coordinator.stats().latest.restored.map(|r| r.id),
        Some(id(9))
    );
}

#[test]
fn stats_count_and_summarise_completed_and_failed_checkpoints() {
    let cfg = CheckpointConfig {
        tolerable_failed: 10,
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    for duration in [10, 30, 20] {
        let cp = h.trigger(Checkpoint);
        h.advance(duration);
        h.complete(cp);
    }
    let failed = h.trigger(Checkpoint);
    h.decline(failed, h.all[0], "no");
    let sp = h.trigger(Savepoint);
    let in_progress = h.trigger(Checkpoint);

    let stats = h.coordinator.stats();
    let c = stats.counts;
    assert_eq!(
        (c.completed, c.failed, c.in_progress, c.total, c.restored),
        (3, 1, 2, 6, 0)
    );
    let d = stats.summary.end_to_end_duration_ms.snapshot();
    assert_eq!(
        (d.count, d.min, d.avg, d.max, d.p50, d.p90, d.p99),
        (3, 10, 20, 30, 20, 30, 30)
    );
    let s = stats.summary.state_size.snapshot();
    assert_eq!((s.min, s.max), (20, 20));
    assert_eq!(stats.summary.persisted_size.snapshot().avg, 20);
    assert_eq!(stats.latest.completed.as_ref().map(|e| e.id), Some(id(3)));
    assert_eq!(stats.latest.failed.as_ref().map(|e| e.id), Some(failed));
    let statuses: Vec<_> = stats
        .history()
        .map(|e| (e.id, e.status, e.is_savepoint))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (id(1), CheckpointStatus::Completed, false),
            (id(2), CheckpointStatus::Completed, false),
            (id(3), CheckpointStatus::Completed, false),
            (failed, CheckpointStatus::Failed, false),
            (sp, CheckpointStatus::InProgress, true),
            (in_progress, CheckpointStatus::InProgress, false),
        ]
    );
}

#[test]
fn the_history_shows_every_trigger_at_least_min_pause_after_the_previous_completion() {
    let cfg = CheckpointConfig {
        interval: Some(Duration::from_millis(20)),
        min_pause: Duration::from_millis(50),
        max_concurrent: 2,
        history_size: 1_000,
        timeout: Duration::from_secs(10),
        ..config()
    };
    let mut h = Harness::running(cfg, 1, 1);
    let mut seed: u64 = 7;
    let mut next = move |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    for _ in 0..400 {
        h.advance(1 + next(40));
        if next(3) == 0 {
            if let Some(cp) = h.pending_ids().first().copied() {
                h.complete(cp);
            }
        }
        h.advance(1);
        h.tick();
    }
    let history: Vec<_> = h.coordinator.stats().history().cloned().collect();
    assert!(
        history
            .iter()
            .filter(|e| e.status == CheckpointStatus::Completed)
            .count()
            > 20
    );
    for entry in &history {
        let previous = history
            .iter()
            .filter_map(|c| c.completion_timestamp_ms)
            .filter(|done| *done <= entry.trigger_timestamp_ms)
            .max();
        if let Some(done) = previous {
            assert!(
                entry.trigger_timestamp_ms - done >= 50,
                "checkpoint {} triggered at {} only {} ms after a completion",
                entry.id,
                entry.trigger_timestamp_ms,
                entry.trigger_timestamp_ms - done
            );
        }
    }
}

/// A store that records until told to refuse, as a ZooKeeper store refuses when it loses
/// ZooKeeper mid-write (`fenced: false`) or when its leader was fenced (`fenced: true`).
struct Refusing {
    inner: StandaloneCompletedCheckpointStore,
    refuse: std::sync::Arc<std::sync::atomic::AtomicBool>,
    fenced: bool,
}

impl CompletedCheckpointStore for Refusing {
    fn add(&mut self, checkpoint: CompletedCheckpoint) -> Result<Vec<Discard>, StoreError> {
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(if self.fenced {
                StoreError::Fenced("fenced: not the leader any more".into())
            } else {
                StoreError::NotRecorded("ZooKeeper lost mid-write".into())
            });
        }
        self.inner.add(checkpoint)
    }
    fn latest(&self) -> Option<&CompletedCheckpoint> {
        self.inner.latest()
    }
    fn all(&self) -> &[CompletedCheckpoint] {
        self.inner.all()
    }
    fn is_shared_path_referenced(&self, path: &str) -> bool {
        self.inner.is_shared_path_referenced(path)
    }
    fn shutdown(&mut self, discard_all: bool) -> Vec<Discard> {
        self.inner.shutdown(discard_all)
    }
}

#[test]
fn a_checkpoint_the_store_may_have_recorded_is_aborted_without_completion_notices_and_keeps_its_files(
) {
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = Refusing {
        inner: StandaloneCompletedCheckpointStore::new(3),
        refuse: refuse.clone(),
        fenced: false,
    };
    let mut h = Harness::with_store(retaining(3), 1, 1, Box::new(store));
    h.start();
    let (first, actions) = complete_with_shared(&mut h, &["shared/a"]);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::NotifyComplete { checkpoint, .. } if *checkpoint == first)));

    refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let (second, actions) = complete_with_shared(&mut h, &["shared/b"]);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::NotifyComplete { .. })),
        "no sink may commit a checkpoint the store did not record: {actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(a,
            Action::NotifyAborted { checkpoint, reason: AbortReason::NotRecorded(why), .. }
                if *checkpoint == second && why.contains("mid-write"))),
        "{actions:?}"
    );
    assert!(
        discarded(&actions).is_empty(),
        "a new leader may restore it: its files stay"
    );
    assert_eq!(h.retained_ids(), vec![first.0]);
    assert_eq!(h.coordinator.stats().counts.failed, 1);
}

#[test]
fn a_checkpoint_a_fenced_store_refuses_loses_its_own_directory_but_no_shared_file() {
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = Refusing {
        inner: StandaloneCompletedCheckpointStore::new(3),
        refuse: refuse.clone(),
        fenced: true,
    };
    let mut h = Harness::with_store(retaining(3), 1, 1, Box::new(store));
    h.start();
    let (first, _) = complete_with_shared(&mut h, &["shared/a"]);
    refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let (second, actions) = complete_with_shared(&mut h, &["shared/a", "shared/b"]);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::NotifyComplete { .. })),
        "{actions:?}"
    );
    // Its metadata and private files go: no sweep of storage may take it for completed. The
    // shared files are the new leader's to count, even one only this checkpoint names.
    let discards: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::DiscardCheckpoint {
                checkpoint,
                shared_paths,
            } => Some((*checkpoint, shared_paths.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(discards, vec![(second, Vec::new())]);
    assert_eq!(h.retained_ids(), vec![first.0]);
}
