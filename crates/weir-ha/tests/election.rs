//! Leader election and fencing against a real ZooKeeper: leadership moves to the standby when
//! the leader's session ends, and a stale leader can write nothing.

mod common;

use common::partition::Partition;
use common::*;
use std::time::{Duration, Instant};
use weir_checkpoint::CompletedCheckpointStore;
use weir_core::CheckpointId;
use weir_ha::{
    HaError, LeaderElection, LeadershipEvent, ZooKeeperCheckpointIdCounter,
    ZooKeeperCompletedCheckpointStore,
};

const SESSION: Duration = Duration::from_secs(4);

#[test]
fn leadership_moves_to_the_standby_when_the_leaders_session_closes() {
    let znodes = job_znodes("election-close");
    let (jm1, jm2) = (connect(SESSION), connect(SESSION));
    let (election1, token1) = leader(&jm1, &znodes, "jm1:6123");
    let events1 = election1.subscribe();
    let election2 = LeaderElection::start(&jm2, &znodes, "jm2:6123");
    let events2 = election2.subscribe();
    // The standby waits behind the leader.
    assert!(events2.recv_timeout(Duration::from_millis(500)).is_err());
    assert!(!election2.is_leader());
    let info = LeaderElection::current_leader(&jm2, &znodes)
        .unwrap()
        .unwrap();
    assert_eq!(
        (info.contender.as_str(), info.epoch),
        ("jm1:6123", token1.epoch)
    );
    assert_eq!(
        events1.recv().unwrap(),
        LeadershipEvent::Granted(token1.clone())
    );

    let closed_at = Instant::now();
    jm1.close();
    match events2.recv_timeout(PROMPTLY) {
        Ok(LeadershipEvent::Granted(token2)) => {
            assert!(token2.epoch > token1.epoch, "{token2} after {token1}");
            assert_eq!(election2.fencing_token(), Some(token2));
        }
        other => panic!("the standby was not granted leadership: {other:?}"),
    }
    // No session timeout to wait for: the session was closed.
    assert!(
        closed_at.elapsed() < SESSION,
        "took {:?}",
        closed_at.elapsed()
    );
    assert!(matches!(
        events1.recv_timeout(PROMPTLY),
        Ok(LeadershipEvent::Revoked { token, .. }) if token == token1
    ));
    assert!(!election1.is_leader());
    let info = LeaderElection::current_leader(&jm2, &znodes)
        .unwrap()
        .unwrap();
    assert_eq!(info.contender, "jm2:6123");
    election2.close();
}

#[test]
fn a_stale_leader_whose_session_expired_cannot_increment_the_counter_or_add_a_checkpoint_while_the_new_leader_can(
) {
    let job = "election-fenced";
    let znodes = job_znodes(job);
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path(), job);
    // jm1 reaches ZooKeeper across a link the test can cut, with a short session.
    let link = Partition::relay_to(&zookeeper_address());
    let jm1 = connect_via(link.address(), Duration::from_secs(1));
    let jm2 = connect(SESSION);
    let (election1, token1) = leader(&jm1, &znodes, "jm1");
    let election2 = LeaderElection::start(&jm2, &znodes, "jm2");
    let mut counter1 = ZooKeeperCheckpointIdCounter::new(&jm1, &znodes, token1.clone()).unwrap();
    let (mut store1, _) = ZooKeeperCompletedCheckpointStore::recover(
        &jm1,
        &znodes,
        token1.clone(),
        storage.clone(),
        3,
    )
    .unwrap();
    let first = counter1.next_id().unwrap();
    let cp = checkpoint(job, first.0, &["a"]);
    write_metadata(&storage, &cp);
    store1.add_checkpoint(cp).unwrap();

    // A partition: jm1 stops leading at once; ZooKeeper expires its session and leadership
    // moves to jm2.
    link.cut();
    assert!(
        election1.await_revocation(PROMPTLY),
        "jm1 still believes it leads"
    );
    let token2 = election2
        .await_leadership(PROMPTLY)
        .expect("jm2 takes over");
    assert!(token2.epoch > token1.epoch);

    // The partition heals; jm1 carries on with what it had: ZooKeeper refuses every write.
    link.heal();
    let e = first_lasting_error(|| counter1.next_id());
    assert!(
        matches!(&e, HaError::Fenced { token, .. } if *token == token1),
        "{e}"
    );
    assert!(e.to_string().contains("not the leader any more"), "{e}");
    let stale = checkpoint(job, 99, &["b"]);
    write_metadata(&storage, &stale);
    let e = store1.add_checkpoint(stale.clone()).unwrap_err();
    assert!(e.is_fenced(), "{e}");
    assert_eq!(store1.all().len(), 1, "a refused add changes nothing");
    let refused = store1.add(stale).unwrap_err();
    assert!(
        refused.to_string().contains("not recorded in ZooKeeper"),
        "{refused}"
    );
    // Certainly not recorded: the coordinator deletes its metadata rather than leave a fork
    // that a sweep of storage would take for completed.
    assert!(
        matches!(refused, weir_checkpoint::StoreError::Fenced(_)),
        "{refused:?}"
    );
    assert_eq!(store1.all().len(), 1);

    // jm2 recovers what jm1 completed and carries on above every id jm1 handed out.
    let mut counter2 = ZooKeeperCheckpointIdCounter::new(&jm2, &znodes, token2.clone()).unwrap();
    let (mut store2, _) =
        ZooKeeperCompletedCheckpointStore::recover(&jm2, &znodes, token2, storage.clone(), 3)
            .unwrap();
    assert_eq!(store2.latest().map(|c| c.id), Some(first));
    let next = counter2.next_id().unwrap();
    assert!(next > first);
    let cp = checkpoint(job, next.0, &["a"]);
    write_metadata(&storage, &cp);
    store2.add_checkpoint(cp).unwrap();
    assert_eq!(store2.shared_ref_count("shared/a"), 2);
    assert!(!store2.all().iter().any(|c| c.id == CheckpointId(99)));

    // jm1's election joined again with a new session, as the standby.
    let token1_again = {
        election2.close();
        election1
            .await_leadership(PROMPTLY)
            .expect("jm1 leads again")
    };
    assert!(token1_again.epoch > token1.epoch);
    assert_ne!(token1_again.session_id, token1.session_id);
    election1.close();
}

/// The first error of `call` that is not ZooKeeper being unreachable (the session may still be
/// reconnecting, or find that it expired).
fn first_lasting_error<T: std::fmt::Debug>(
    mut call: impl FnMut() -> Result<T, HaError>,
) -> HaError {
    let deadline = Instant::now() + PROMPTLY;
    loop {
        match call() {
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => return e,
            Ok(v) => panic!("a stale leader's call succeeded: {v:?}"),
        }
    }
}

#[test]
fn a_leader_that_resigned_is_fenced_even_though_its_session_lives_on() {
    let znodes = job_znodes("election-resigned");
    let zk = connect(SESSION);
    let (election, token) = leader(&zk, &znodes, "jm");
    let mut counter = ZooKeeperCheckpointIdCounter::new(&zk, &znodes, token).unwrap();
    assert_eq!(counter.next_id().unwrap(), CheckpointId(1));
    election.close();
    assert!(zk.is_connected());
    assert!(counter.next_id().unwrap_err().is_fenced());
    assert!(LeaderElection::current_leader(&zk, &znodes)
        .unwrap()
        .is_none());
}

/// A standby that resigns while it waits — many times, some of them while its znode is being
/// created — leaves nothing in the queue: a contender joining again in the same session leads
/// as soon as the leader resigns.
#[test]
fn a_standby_that_resigns_while_waiting_and_joins_again_in_the_same_session_leads_next() {
    let znodes = job_znodes("election-rejoin");
    let (jm1, jm2) = (connect(SESSION), connect(SESSION));
    let (election1, token1) = leader(&jm1, &znodes, "jm1:6123");
    for round in 0..30u64 {
        let standby = LeaderElection::start(&jm2, &znodes, "jm2:6123");
        std::thread::sleep(Duration::from_millis(round % 10));
        standby.close();
    }
    let election2 = LeaderElection::start(&jm2, &znodes, "jm2:6123");
    let events2 = election2.subscribe();
    assert!(events2.recv_timeout(Duration::from_millis(300)).is_err());
    election1.close();
    match events2.recv_timeout(PROMPTLY) {
        Ok(LeadershipEvent::Granted(token2)) => {
            assert!(token2.epoch > token1.epoch, "{token2} after {token1}")
        }
        other => panic!("the contender that joined again was not granted leadership: {other:?}"),
    }
    election2.close();
}
