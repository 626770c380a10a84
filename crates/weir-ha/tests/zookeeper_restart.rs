//! ZooKeeper stopped and started again (its data kept) in the middle of a sequence of
//! operations: every call fails promptly with an error, none hangs or panics, leadership is
//! revoked while ZooKeeper is away, and everything works again once it is back.
//!
//! It restarts the shared test server, so it is the only test in this file (test files run one
//! after another).

mod common;

use common::*;
use std::time::{Duration, Instant};
use weir_checkpoint::CompletedCheckpointStore;
use weir_ha::{
    HaError, LeaderElection, ZooKeeper, ZooKeeperCheckpointIdCounter,
    ZooKeeperCompletedCheckpointStore,
};

/// Long enough for the session to outlive the restart (ZooKeeper's test config allows 10 s).
const SESSION: Duration = Duration::from_secs(10);

/// Runs `call` and checks it failed with a transient error, promptly.
fn fails_promptly<T: std::fmt::Debug>(what: &str, call: impl FnOnce() -> Result<T, HaError>) {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    match result {
        Err(e) => assert!(e.is_transient(), "{what}: not a transient error: {e}"),
        Ok(v) => panic!("{what} succeeded while ZooKeeper was down: {v:?}"),
    }
    assert!(
        took < OPERATION_TIMEOUT + Duration::from_secs(1),
        "{what} took {took:?}"
    );
}

#[test]
fn operations_fail_cleanly_while_zookeeper_restarts_and_succeed_again_once_it_is_back() {
    let job = "restart";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let mut counter = ZooKeeperCheckpointIdCounter::new(&zk, &znodes, token.clone()).unwrap();
    let (mut store, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token.clone(), storage.clone(), 3)
            .unwrap();
    let add = |store: &mut ZooKeeperCompletedCheckpointStore, id| {
        let cp = checkpoint(job, id, &["s"]);
        write_metadata(&storage, &cp);
        store.add_checkpoint(cp)
    };
    let before = counter.next_id().unwrap();
    add(&mut store, before.0).unwrap();

    zookeeper_script("stop");
    assert!(
        election.await_revocation(PROMPTLY),
        "leadership outlived the connection"
    );
    fails_promptly("increment the counter", || counter.next_id());
    fails_promptly("add a checkpoint", || add(&mut store, before.0 + 1));
    assert_eq!(store.all().len(), 1, "a failed add changes nothing");
    fails_promptly("find the leader", || {
        LeaderElection::current_leader(&zk, &znodes)
    });
    fails_promptly("connect", || {
        ZooKeeper::connect(&zookeeper_address(), SESSION, OPERATION_TIMEOUT)
    });

    zookeeper_script("start");
    // The session survived the restart: the same leader, with the same token.
    let again = election.await_leadership(PROMPTLY).expect("leads again");
    assert_eq!(again, token);
    let after = retry_until_back(|| counter.next_id());
    assert!(after > before, "{after} after {before}");
    retry_until_back(|| add(&mut store, after.0));
    let ids: Vec<u64> = store.all().iter().map(|c| c.id.0).collect();
    assert_eq!(ids, vec![before.0, after.0]);
    let (recovered, _) =
        ZooKeeperCompletedCheckpointStore::recover(&zk, &znodes, token, storage.clone(), 3)
            .unwrap();
    assert_eq!(recovered.all(), store.all());
    election.close();
}

/// The first calls after a restart may still find the session reconnecting.
fn retry_until_back<T>(mut call: impl FnMut() -> Result<T, HaError>) -> T {
    let deadline = Instant::now() + PROMPTLY;
    loop {
        match call() {
            Ok(v) => return v,
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("still failing after ZooKeeper came back: {e}"),
        }
    }
}
