//! The completed checkpoint store against a real ZooKeeper and real checkpoint storage: what
//! one leader adds, the next recovers, with the same retained checkpoints and reference counts.

mod common;

use common::*;
use std::time::Duration;
use weir_checkpoint::{CompletedCheckpointStore, Discard};
use weir_core::CheckpointId;
use weir_ha::{HaError, LeaderElection, ZooKeeperCompletedCheckpointStore};
use weir_storage::CheckpointLayout;

const SESSION: Duration = Duration::from_secs(4);

fn ids(store: &ZooKeeperCompletedCheckpointStore) -> Vec<u64> {
    store.all().iter().map(|c| c.id.0).collect()
}

#[test]
fn a_store_added_to_by_one_leader_is_recovered_by_the_next_with_the_same_checkpoints_and_reference_counts(
) {
    let job = "store-takeover";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let (jm1, jm2) = (connect(SESSION), connect(SESSION));

    let (election1, token1) = leader(&jm1, &znodes, "jm1");
    let election2 = LeaderElection::start(&jm2, &znodes, "jm2");
    let (mut store1, discards) =
        ZooKeeperCompletedCheckpointStore::recover(&jm1, &znodes, token1, storage.clone(), 3)
            .unwrap();
    assert!(discards.is_empty() && store1.latest().is_none());
    let shared: [&[&str]; 5] = [&["a", "b"], &["a", "c"], &["c", "d"], &["a", "d"], &["d"]];
    let mut evicted = Vec::new();
    for (i, files) in shared.iter().enumerate() {
        let cp = checkpoint(job, i as u64 + 1, files);
        write_metadata(&storage, &cp);
        evicted.extend(store1.add_checkpoint(cp).unwrap());
    }
    assert_eq!(ids(&store1), vec![3, 4, 5]);
    // Checkpoint 1 left: "b" was only its own. Checkpoint 2 left: "a" is still 4's.
    assert_eq!(
        evicted,
        vec![
            Discard {
                checkpoint: CheckpointId(1),
                shared_paths: vec!["shared/b".into()]
            },
            Discard {
                checkpoint: CheckpointId(2),
                shared_paths: vec![]
            },
        ]
    );

    election1.close();
    let token2 = election2
        .await_leadership(PROMPTLY)
        .expect("jm2 takes over");
    let (store2, discards) =
        ZooKeeperCompletedCheckpointStore::recover(&jm2, &znodes, token2, storage.clone(), 3)
            .unwrap();
    assert!(discards.is_empty());
    assert_eq!(store2.all(), store1.all());
    for path in ["shared/a", "shared/b", "shared/c", "shared/d"] {
        assert_eq!(
            store2.shared_ref_count(path),
            store1.shared_ref_count(path),
            "{path}"
        );
    }
    assert_eq!(store2.shared_ref_count("shared/d"), 3);
    assert_eq!(store2.latest().map(|c| c.id), Some(CheckpointId(5)));
    election2.close();
}

#[test]
fn recovery_skips_checkpoints_whose_metadata_is_missing_or_corrupt() {
    let job = "store-damaged";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 5)
            .unwrap();
    for id in 1..=4 {
        let cp = checkpoint(job, id, &["x"]);
        write_metadata(&storage, &cp);
        store.add_checkpoint(cp).unwrap();
    }
    let metadata = |id| {
        dir.path()
            .join(job)
            .join(CheckpointLayout::metadata_file(CheckpointId(id)))
    };
    std::fs::remove_file(metadata(3)).unwrap();
    std::fs::write(metadata(4), b"WEIRMETA torn").unwrap();

    let (recovered, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage, 5).unwrap();
    assert_eq!(ids(&recovered), vec![1, 2]);
    assert_eq!(recovered.shared_ref_count("shared/x"), 2);
    election.close();
}

#[test]
fn recovery_fails_rather_than_start_empty_when_no_listed_checkpoint_can_be_restored() {
    let job = "store-unrecoverable";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 3)
            .unwrap();
    let cp = checkpoint(job, 7, &[]);
    write_metadata(&storage, &cp);
    store.add_checkpoint(cp).unwrap();
    std::fs::remove_dir_all(dir.path().join(job).join("chk-7")).unwrap();

    let e =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage, 3).unwrap_err();
    assert!(
        matches!(e, HaError::NoRecoverableCheckpoint { listed: 1, .. }),
        "{e}"
    );
    let message = e.to_string();
    assert!(
        message.contains("chk-7/_metadata") && message.contains("missing"),
        "{message}"
    );
    election.close();
}

#[test]
fn a_lowered_num_retained_evicts_the_oldest_on_recovery_and_removes_their_pointers() {
    let job = "store-lowered";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 3)
            .unwrap();
    for id in 1..=3 {
        let cp = checkpoint(job, id, &[&format!("only-{id}"), "all"]);
        write_metadata(&storage, &cp);
        store.add_checkpoint(cp).unwrap();
    }
    let (recovered, discards) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 1)
            .unwrap();
    assert_eq!(ids(&recovered), vec![3]);
    let evicted: Vec<(u64, Vec<String>)> = discards
        .into_iter()
        .map(|d| (d.checkpoint.0, d.shared_paths))
        .collect();
    assert_eq!(
        evicted,
        vec![
            (1, vec!["shared/only-1".to_string()]),
            (2, vec!["shared/only-2".to_string()])
        ]
    );
    // Their pointers are gone: a third recovery sees checkpoint 3 alone, even keeping 3.
    let (again, discards) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage, 3).unwrap();
    assert_eq!(ids(&again), vec![3]);
    assert!(discards.is_empty());
    election.close();
}

#[test]
fn discarding_all_removes_every_pointer_and_returns_every_checkpoint_for_deletion() {
    let job = "store-discard-all";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 3)
            .unwrap();
    for id in 1..=2 {
        let cp = checkpoint(job, id, &["s"]);
        write_metadata(&storage, &cp);
        // Through the trait, as the coordinator adds.
        assert!(store.add(cp).unwrap().is_empty());
    }
    assert!(store.shutdown(false).is_empty(), "kept for the next leader");
    let discards = store.shutdown(true);
    let ids: Vec<u64> = discards.iter().map(|d| d.checkpoint.0).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(discards[1].shared_paths, vec!["shared/s".to_string()]);
    let (recovered, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage, 3).unwrap();
    assert!(recovered.latest().is_none());
    election.close();
}

#[test]
fn adding_a_checkpoint_already_recorded_is_a_no_op() {
    let job = "store-repeat";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage.clone(), 3)
            .unwrap();
    let cp = checkpoint(job, 1, &["s"]);
    write_metadata(&storage, &cp);
    store.add_checkpoint(cp.clone()).unwrap();
    // The coordinator's restore hands recovered checkpoints back to the store.
    assert!(store.add_checkpoint(cp).unwrap().is_empty());
    assert_eq!(ids(&store), vec![1]);
    assert_eq!(store.shared_ref_count("shared/s"), 1);
    election.close();
}
