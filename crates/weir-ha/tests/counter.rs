//! The checkpoint id counter against a real ZooKeeper: ids strictly ascend across job managers,
//! leaders and concurrent writers.

mod common;

use common::*;
use std::time::Duration;
use weir_checkpoint::CheckpointIdCounter;
use weir_core::CheckpointId;
use weir_ha::{LeaderElection, ZooKeeperCheckpointIdCounter};

const SESSION: Duration = Duration::from_secs(4);

#[test]
fn ids_strictly_ascend_across_two_job_managers_taking_turns_to_lead() {
    let znodes = job_znodes("counter-turns");
    let (jm1, jm2) = (connect(SESSION), connect(SESSION));
    let mut ids = Vec::new();

    let (election1, token1) = leader(&jm1, &znodes, "jm1");
    let election2 = LeaderElection::start(&jm2, &znodes, "jm2");
    let mut counter1 = ZooKeeperCheckpointIdCounter::new(&jm1, &znodes, token1).unwrap();
    for _ in 0..3 {
        ids.push(counter1.get_and_increment().unwrap());
    }

    election1.close();
    let token2 = election2
        .await_leadership(PROMPTLY)
        .expect("jm2 takes over");
    let mut counter2 = ZooKeeperCheckpointIdCounter::new(&jm2, &znodes, token2).unwrap();
    assert_eq!(counter2.current(), CheckpointId(4));
    for _ in 0..3 {
        ids.push(counter2.get_and_increment().unwrap());
    }
    // jm1 still has its counter, but its token is gone.
    let e = counter1.next_id().unwrap_err();
    assert!(e.is_fenced(), "{e}");

    let election1 = LeaderElection::start(&jm1, &znodes, "jm1");
    election2.close();
    let token1 = election1
        .await_leadership(PROMPTLY)
        .expect("jm1 leads again");
    let mut counter1 = ZooKeeperCheckpointIdCounter::new(&jm1, &znodes, token1).unwrap();
    for _ in 0..3 {
        ids.push(counter1.get_and_increment().unwrap());
    }

    let expected: Vec<CheckpointId> = (1..=9).map(CheckpointId).collect();
    assert_eq!(ids, expected);
    election1.close();
}

#[test]
fn concurrent_increments_from_two_sessions_never_hand_out_an_id_twice() {
    let znodes = job_znodes("counter-concurrent");
    let (jm1, jm2) = (connect(SESSION), connect(SESSION));
    let (election, token) = leader(&jm1, &znodes, "jm1");
    // Two sessions writing with one valid token: only the compare-and-set keeps them apart.
    let counters = [
        ZooKeeperCheckpointIdCounter::new(&jm1, &znodes, token.clone()).unwrap(),
        ZooKeeperCheckpointIdCounter::new(&jm2, &znodes, token).unwrap(),
    ];
    let per_writer = 40;
    let handed_out: Vec<Vec<u64>> = std::thread::scope(|s| {
        let writers: Vec<_> = counters
            .into_iter()
            .map(|mut counter| {
                s.spawn(move || {
                    (0..per_writer)
                        .map(|_| counter.get_and_increment().unwrap().0)
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for ids in &handed_out {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "not ascending: {ids:?}"
        );
    }
    let mut all: Vec<u64> = handed_out.concat();
    all.sort_unstable();
    let expected: Vec<u64> = (1..=2 * per_writer).collect();
    assert_eq!(all, expected, "every id exactly once");
    election.close();
}

#[test]
fn a_counter_seeded_from_storage_starts_above_the_highest_id_found_and_is_never_lowered() {
    let znodes = job_znodes("counter-seeded");
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let mut counter =
        ZooKeeperCheckpointIdCounter::starting_after(&zk, &znodes, token.clone(), CheckpointId(41))
            .unwrap();
    assert_eq!(counter.next_id().unwrap(), CheckpointId(42));
    let mut again =
        ZooKeeperCheckpointIdCounter::starting_after(&zk, &znodes, token, CheckpointId(10))
            .unwrap();
    assert_eq!(again.current(), CheckpointId(43));
    assert_eq!(again.next_id().unwrap(), CheckpointId(43));
    assert_eq!(counter.read().unwrap(), CheckpointId(44));
    election.close();
}
