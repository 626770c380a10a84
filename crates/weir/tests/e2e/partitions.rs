//! Network partitions: a cluster whose job managers, task managers and ZooKeeper each run on a
//! test host of their own, running wordcount while links between them are cut, restored,
//! delayed or made to lose packets. Each test checks the committed output word by word (nothing
//! lost, nothing duplicated) and that checkpoint ids, in the order the job managers completed
//! them, never repeat or go back.

mod wordcount_cluster;

use std::time::Duration;

use crate::netns::{has_program, unavailable};
use wordcount_cluster::{completions, first, timestamp, Cluster, Setup};

/// Every test here starts a whole cluster and times its faults against timeouts of a few
/// seconds: one at a time, so that they do not starve each other of the machine's cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long the delay-and-loss test degrades the links between task managers: long enough for
/// several checkpoints to complete through it (a minute shows nothing more, at three times the
/// cost).
const DEGRADED_FOR: Duration = Duration::from_secs(20);

#[test]
fn a_leader_cut_off_from_zookeeper_stops_committing_before_the_standby_completes_a_checkpoint() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("leader-cut-from-zookeeper", Setup::new(2, true)) else {
        return;
    };
    let leader = c.wait_for_leader(2);
    let standby = 1 - leader;
    // The leader still reaches every task manager, and they it: only ZooKeeper is gone.
    c.net.cut(&c.jm_hosts[leader], c.zk_host());
    c.wait_until(
        "the standby completed no checkpoint after the cut",
        Duration::from_secs(60),
        |c| !completions(&c.jms[standby].log()).is_empty(),
    );
    c.net.restore(&c.jm_hosts[leader], c.zk_host());
    let new_log = c.finished(standby, Duration::from_secs(90));
    // The old leader rejoins as a standby; once the new leader has recorded the job's end and
    // its session is gone, it is elected, finds the end, and exits without running anything.
    let old_log = c.finished(leader, Duration::from_secs(60));
    assert!(old_log.contains("lost leadership"), "{old_log}");
    assert!(old_log.contains("the job already ended"), "{old_log}");
    let last_old = completions(&old_log).last().cloned().expect("some");
    let granted = first(&new_log, "granted leadership").expect("the standby was granted");
    let first_new = completions(&new_log).first().cloned().expect("some");
    assert!(
        last_old.0 < granted && granted < first_new.0,
        "the old leader completed checkpoint {} at {}, the standby was granted leadership at {granted} and completed checkpoint {} at {}",
        last_old.1,
        last_old.0,
        first_new.1,
        first_new.0
    );
    assert!(
        new_log.contains("recovered the completed checkpoints ZooKeeper records"),
        "{new_log}"
    );
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn a_task_manager_cut_off_from_the_job_manager_but_not_its_peers_is_replaced_and_nothing_is_lost() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("task-manager-cut-from-job-manager", Setup::new(1, false))
    else {
        return;
    };
    c.wait_for_leader(2);
    c.net.cut(&c.tm_hosts[1], &c.jm_hosts[0]);
    c.wait_until(
        "the job manager did not redeploy without the cut-off task manager",
        Duration::from_secs(30),
        |c| c.jms[0].log().contains("deployed the attempt attempt=1"),
    );
    // It gives the silent job manager up by itself, while the partition lasts: its subtasks
    // stop instead of running on for nobody.
    c.wait_until(
        "the cut-off task manager did not give up the job manager",
        Duration::from_secs(15),
        |c| c.tms[1].log().contains("lost the job manager"),
    );
    c.net.restore(&c.tm_hosts[1], &c.jm_hosts[0]);
    let log = c.finished(0, Duration::from_secs(90));
    assert!(log.contains("task manager lost"), "{log}");
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn a_task_manager_cut_off_from_its_peers_but_not_the_job_manager_fails_over_and_nothing_is_lost() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // The checkpoint timeout stays at its default (10 min): the data connections notice.
    let Some(mut c) = Cluster::start("task-manager-cut-from-peers", Setup::new(1, false)) else {
        return;
    };
    c.wait_for_leader(2);
    let before = completions(&c.jms[0].log()).len();
    for peer in [0, 2] {
        c.net.cut(&c.tm_hosts[1], &c.tm_hosts[peer]);
    }
    std::thread::sleep(Duration::from_secs(10));
    for peer in [0, 2] {
        c.net.restore(&c.tm_hosts[1], &c.tm_hosts[peer]);
    }
    let log = c.finished(0, Duration::from_secs(90));
    // Noticed by the data connections across the partition, which went silent (within twice
    // the task managers' heartbeat timeout), not by a checkpoint expiring — also when no
    // producer sends across it any more (each blocked on a local channel whose consumer waits
    // for a barrier from the other side): the task manager that gave a connection up fails
    // the attempt itself.
    assert!(log.contains("the data connection to task manager"), "{log}");
    assert!(
        !log.contains("expired before every subtask acknowledged"),
        "{log}"
    );
    assert!(completions(&log).len() > before, "{log}");
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn a_leader_cut_off_from_everyone_is_replaced_while_the_partition_lasts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("leader-isolated", Setup::new(2, true)) else {
        return;
    };
    let leader = c.wait_for_leader(2);
    let standby = 1 - leader;
    c.net.isolate(&c.jm_hosts[leader]);
    c.wait_until(
        "the standby completed no checkpoint while the old leader was cut off",
        Duration::from_secs(60),
        |c| completions(&c.jms[standby].log()).len() >= 2,
    );
    c.net.rejoin(&c.jm_hosts[leader]);
    let new_log = c.finished(standby, Duration::from_secs(90));
    let old_log = c.finished(leader, Duration::from_secs(60));
    let last_old = completions(&old_log).last().cloned().expect("some");
    let granted = first(&new_log, "granted leadership").expect("the standby was granted");
    assert!(last_old.0 < granted, "{last_old:?} {granted}");
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn zookeeper_cut_off_from_everyone_for_longer_than_a_session_stops_the_job_and_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("zookeeper-isolated", Setup::new(2, true)) else {
        return;
    };
    let leader = c.wait_for_leader(2);
    c.net.isolate(c.zk_host());
    c.wait_until(
        "the leader did not give up leadership without ZooKeeper",
        Duration::from_secs(30),
        |c| c.jms[leader].log().contains("lost leadership"),
    );
    // Well past the session timeout: ZooKeeper expires both job managers' sessions.
    std::thread::sleep(Duration::from_secs(5));
    c.net.rejoin(c.zk_host());
    // Either may lead now; the other finds the job's end when its turn comes.
    let logs = c.job_managers_finished(Duration::from_secs(90));
    let lost = first(&logs[leader], "lost leadership").expect("logged");
    let regained = logs
        .iter()
        .flat_map(|log| log.lines())
        .filter(|l| l.contains("leading: accepting task managers"))
        .map(timestamp)
        .filter(|at| *at > lost.as_str())
        .min()
        .expect("leadership granted again")
        .to_string();
    // Nobody led, so nothing completed, while ZooKeeper was away.
    for (at, id) in logs.iter().flat_map(|log| completions(log)) {
        assert!(
            at < lost || at > regained,
            "checkpoint {id} completed at {at}, while no job manager led ({lost} to {regained})"
        );
    }
    assert!(
        logs.iter().any(|log| log.contains("opening a new one")),
        "no ZooKeeper session expired:\n{}",
        logs.join("\n")
    );
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn delay_and_loss_between_task_managers_slow_the_job_but_checkpoints_keep_completing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut setup = Setup::new(1, false);
    // Enough that the job still runs when the links are repaired.
    setup.input = (43, 60, 20_000);
    let Some(mut c) = Cluster::start("task-managers-delayed", setup) else {
        return;
    };
    if !has_program("iptables") {
        unavailable::<()>("iptables is not installed (scripts/test.sh installs Debian's)");
        return;
    }
    c.wait_for_leader(2);
    let pairs = [(0, 1), (0, 2), (1, 2)];
    for (a, b) in pairs {
        c.net.degrade(
            &c.tm_hosts[a],
            &c.tm_hosts[b],
            Duration::from_millis(200),
            5.0,
        );
    }
    let before = completions(&c.jms[0].log()).len();
    std::thread::sleep(DEGRADED_FOR);
    let during = completions(&c.jms[0].log()).len() - before;
    assert!(
        c.jms[0].is_running(),
        "the job ended before the links were repaired: its input was too small"
    );
    for (a, b) in pairs {
        c.net.repair(&c.tm_hosts[a], &c.tm_hosts[b]);
    }
    let log = c.finished(0, Duration::from_secs(90));
    assert!(
        during >= 3,
        "only {during} checkpoints completed in {DEGRADED_FOR:?} of delay and loss:\n{log}"
    );
    assert!(log.contains("0 restarts"), "{log}");
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn a_partition_that_heals_while_the_standby_takes_over_forks_no_history() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("heal-during-takeover", Setup::new(2, true)) else {
        return;
    };
    let leader = c.wait_for_leader(2);
    let standby = 1 - leader;
    c.net.isolate(&c.jm_hosts[leader]);
    c.wait_until(
        "the standby was not granted leadership",
        Duration::from_secs(30),
        |c| c.jms[standby].log().contains("granted leadership"),
    );
    // The standby is recovering the job and waiting for task managers, which may not have
    // given up the old leader yet.
    c.net.rejoin(&c.jm_hosts[leader]);
    let new_log = c.finished(standby, Duration::from_secs(90));
    let old_log = c.finished(leader, Duration::from_secs(60));
    let last_old = completions(&old_log).last().cloned().expect("some");
    let granted = first(&new_log, "granted leadership").expect("logged");
    assert!(
        last_old.0 < granted,
        "the old leader completed checkpoint {} at {}, after the standby took over at {granted}",
        last_old.1,
        last_old.0
    );
    assert!(old_log.contains("the job already ended"), "{old_log}");
    c.task_managers_exited();
    c.check_output_and_ids();
}

#[test]
fn a_leader_that_loses_zookeeper_for_less_than_a_session_never_leads_again_under_the_same_term() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut c) = Cluster::start("leader-blip", Setup::new(2, true)) else {
        return;
    };
    let leader = c.wait_for_leader(2);
    // A restart first, so that the term's attempts go past 0: a task manager cut off long
    // enough to be lost, then back.
    c.net.cut(&c.tm_hosts[2], &c.jm_hosts[leader]);
    c.wait_until("no restart", Duration::from_secs(30), |c| {
        c.jms[leader]
            .log()
            .contains("deployed the attempt attempt=1")
    });
    c.net.restore(&c.tm_hosts[2], &c.jm_hosts[leader]);
    c.wait_until(
        "the task manager did not come back",
        Duration::from_secs(30),
        |c| {
            let log = c.jms[leader].log();
            log.matches("task manager registered task_manager=tm2")
                .count()
                == 2
                && completions(&log).len() >= 4
        },
    );
    c.net.cut(&c.jm_hosts[leader], c.zk_host());
    c.wait_until(
        "the leader did not give up leadership without ZooKeeper",
        Duration::from_secs(30),
        |c| c.jms[leader].log().contains("lost leadership"),
    );
    // Back before the session expires.
    std::thread::sleep(Duration::from_millis(300));
    c.net.restore(&c.jm_hosts[leader], c.zk_host());
    let logs = c.job_managers_finished(Duration::from_secs(90));
    let mut terms: Vec<&str> = logs
        .iter()
        .flat_map(|log| log.lines())
        .filter(|l| l.contains("leading: accepting task managers"))
        .filter_map(|l| l.split("term=").nth(1))
        .collect();
    let granted = terms.len();
    terms.sort();
    terms.dedup();
    assert_eq!(
        terms.len(),
        granted,
        "a term led twice: {terms:?}\n{}",
        logs.join("\n")
    );
    c.task_managers_exited();
    c.check_output_and_ids();
}
