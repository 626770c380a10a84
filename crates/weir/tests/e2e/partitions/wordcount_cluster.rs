//! A wordcount cluster on test hosts of its own ([`crate::netns`]): ZooKeeper (with high
//! availability), job managers and task managers, each in a network namespace with an address
//! of its own, sharing a secret so that they listen beyond loopback; and what the tests read in
//! their logs.
//!
//! The timeouts that decide how a partition is handled are set explicitly and short: ZooKeeper
//! sessions of 2 s, heartbeats every 200 ms with a 3 s timeout, on job and task managers alike.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{assert_exactly_once, write_text_input};
use crate::netns::{Host, Network, Process, ZooKeeperServer};

const SESSION_TIMEOUT: &str = "2s";
const HEARTBEAT_INTERVAL: &str = "200ms";
const HEARTBEAT_TIMEOUT: &str = "3s";
const RPC_PORT: u16 = 6123;
const DATA_PORT: u16 = 6121;

/// What a test's cluster looks like.
pub struct Setup {
    pub job_managers: usize,
    /// High availability with a ZooKeeper of its own (host `zk`).
    pub zookeeper: bool,
    pub task_managers: usize,
    pub slots: u32,
    pub parallelism: u32,
    /// Input: seed, files, lines per file.
    pub input: (u64, usize, usize),
    /// More options of the job, after `--`.
    pub job_options: Vec<String>,
}

impl Setup {
    pub fn new(job_managers: usize, zookeeper: bool) -> Setup {
        Setup {
            job_managers,
            zookeeper,
            task_managers: 3,
            slots: 2,
            parallelism: 3,
            input: (41, 30, 20_000),
            job_options: Vec::new(),
        }
    }
}

/// Wordcount on test hosts. Fields drop in order: processes first, then ZooKeeper, the
/// network, and last the files.
pub struct Cluster {
    pub jms: Vec<Process>,
    pub tms: Vec<Process>,
    _zookeeper: Option<ZooKeeperServer>,
    zk_host: Option<Host>,
    pub jm_hosts: Vec<Host>,
    pub tm_hosts: Vec<Host>,
    pub net: Network,
    input: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts every process of `setup`; `None` where namespaces are not available.
    pub fn start(test: &str, setup: Setup) -> Option<Cluster> {
        let net = Network::create(test)?;
        let dir = tempfile::tempdir().unwrap();
        let (seed, files, lines) = setup.input;
        let input = write_text_input(dir.path(), seed, files, lines);
        let secret = dir.path().join("cluster-secret");
        std::fs::write(&secret, "a secret of the partition tests\n").unwrap();
        let zk_host = setup.zookeeper.then(|| net.add_host("zk"));
        let jm_hosts: Vec<Host> = (0..setup.job_managers)
            .map(|n| net.add_host(&format!("jm{n}")))
            .collect();
        let tm_hosts: Vec<Host> = (0..setup.task_managers)
            .map(|n| net.add_host(&format!("tm{n}")))
            .collect();
        let zookeeper = zk_host
            .as_ref()
            .map(|h| ZooKeeperServer::start(&net, h, &dir.path().join("zookeeper")));
        let secret_option = format!("security.internal.secret-file={}", secret.display());
        let mut jm_options = vec![
            secret_option.clone(),
            format!("heartbeat.interval={HEARTBEAT_INTERVAL}"),
            format!("heartbeat.timeout={HEARTBEAT_TIMEOUT}"),
        ];
        if let Some(zk) = &zookeeper {
            jm_options.extend([
                "high-availability.type=zookeeper".to_string(),
                format!("high-availability.zookeeper.quorum={}", zk.address),
                "high-availability.zookeeper.path.root=/weir-partitions".into(),
                format!(
                    "high-availability.storageDir={}",
                    dir.path().join("ha").display()
                ),
                format!("high-availability.zookeeper.client.session-timeout={SESSION_TIMEOUT}"),
                format!("high-availability.zookeeper.client.connection-timeout={SESSION_TIMEOUT}"),
            ]);
        }
        let jms = jm_hosts
            .iter()
            .enumerate()
            .map(|(n, host)| {
                let mut cmd = in_namespace(&net, host);
                cmd.current_dir(dir.path())
                    .args(["jobmanager", "--bind", &host.address.to_string()])
                    .args(["--rpc-port", &RPC_PORT.to_string()])
                    .args(["--wait-for-task-managers", &setup.task_managers.to_string()]);
                for option in &jm_options {
                    cmd.args(["-D", option]);
                }
                cmd.args(["--", "run", "wordcount", "--input"])
                    .arg(&input)
                    .arg("--output")
                    .arg(dir.path().join("output"))
                    .arg("--checkpoint-dir")
                    .arg(dir.path().join("checkpoints"))
                    .args(["--parallelism", &setup.parallelism.to_string()])
                    .args(["--checkpoint-interval", "100ms"])
                    .args(["-D", "restart-strategy.type=fixed-delay"])
                    .args(["-D", "restart-strategy.fixed-delay.attempts=100"])
                    .args(["-D", "restart-strategy.fixed-delay.delay=100ms"])
                    .args(&setup.job_options);
                net.spawn(cmd, dir.path().join(format!("jobmanager-{n}.log")))
            })
            .collect();
        let job_managers: Vec<String> = jm_hosts
            .iter()
            .map(|h| format!("{}:{RPC_PORT}", h.address))
            .collect();
        let tms = tm_hosts
            .iter()
            .enumerate()
            .map(|(n, host)| {
                let mut cmd = in_namespace(&net, host);
                cmd.current_dir(dir.path())
                    .args(["taskmanager", "--jobmanager", &job_managers.join(",")])
                    .args(["--slots", &setup.slots.to_string(), "--id", &host.name])
                    .args(["--host", &host.address.to_string()])
                    .args(["--data-port", &DATA_PORT.to_string()])
                    .args(["--connect-timeout", "90s"])
                    .args(["-D", &format!("heartbeat.timeout={HEARTBEAT_TIMEOUT}")])
                    .args(["-D", &secret_option]);
                net.spawn(cmd, dir.path().join(format!("taskmanager-{n}.log")))
            })
            .collect();
        Some(Cluster {
            jms,
            tms,
            _zookeeper: zookeeper,
            zk_host,
            jm_hosts,
            tm_hosts,
            net,
            input,
            dir,
        })
    }

    pub fn zk_host(&self) -> &Host {
        self.zk_host.as_ref().expect("a cluster with ZooKeeper")
    }

    /// Every process's log, for a failure's message.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for (n, jm) in self.jms.iter().enumerate() {
            all += &format!("--- job manager {n}\n{}", jm.log());
        }
        for (n, tm) in self.tms.iter().enumerate() {
            all += &format!("--- task manager {n}\n{}", tm.log());
        }
        all
    }

    /// Polls until `done` holds; fails the test after `timeout` saying `what` did not happen.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Cluster) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what} within {timeout:?}; logs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The job manager that completed `n` checkpoints first: the leader.
    pub fn wait_for_leader(&self, n: usize) -> usize {
        let mut leader = None;
        self.wait_until(
            &format!("no job manager completed {n} checkpoints"),
            Duration::from_secs(60),
            |c| {
                leader = (0..c.jms.len()).find(|j| completions(&c.jms[*j].log()).len() >= n);
                leader.is_some()
            },
        );
        leader.expect("found")
    }

    /// Waits for job manager `n` to exit with status 0; returns its log.
    pub fn finished(&mut self, n: usize, timeout: Duration) -> String {
        let status = self.jms[n].wait(timeout);
        let log = self.jms[n].log();
        assert!(
            status.success(),
            "job manager {n} failed ({status}); logs:\n{}",
            self.logs()
        );
        log
    }

    /// Waits for every job manager to exit with status 0, in whatever order; returns their
    /// logs.
    pub fn job_managers_finished(&mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        while self.jms.iter_mut().any(|jm| jm.is_running()) {
            assert!(
                Instant::now() < deadline,
                "the job managers did not all exit within {timeout:?}; logs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (0..self.jms.len())
            .map(|n| self.finished(n, Duration::ZERO))
            .collect()
    }

    /// Waits for every task manager to exit with status 0 (the job manager told them the job
    /// ended).
    pub fn task_managers_exited(&mut self) {
        for n in 0..self.tms.len() {
            let status = self.tms[n].wait(Duration::from_secs(60));
            assert!(
                status.success(),
                "task manager {n} failed ({status}):\n{}",
                self.tms[n].log()
            );
        }
    }

    /// Exactly once, and checkpoint ids ascending in the order the job managers completed
    /// them.
    pub fn check_output_and_ids(&self) {
        assert_exactly_once(&self.input, &self.dir.path().join("output"));
        let mut all: Vec<(String, u64, usize)> = Vec::new();
        for (n, jm) in self.jms.iter().enumerate() {
            all.extend(
                completions(&jm.log())
                    .into_iter()
                    .map(|(at, id)| (at, id, n)),
            );
        }
        all.sort();
        assert!(
            all.windows(2).all(|w| w[0].1 < w[1].1),
            "checkpoint ids repeated or went back (time, id, job manager): {all:?}"
        );
    }
}

/// `weir` run on `host`, with no log filter or secret from the caller's environment.
fn in_namespace(net: &Network, host: &Host) -> std::process::Command {
    let mut cmd = net.command(host, env!("CARGO_BIN_EXE_weir"));
    cmd.env_remove("RUST_LOG").env_remove("WEIR_CLUSTER_SECRET");
    cmd
}

/// The timestamp that starts a log line (RFC 3339, UTC, fixed width: ordered as text).
pub fn timestamp(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("")
}

/// `(time, id)` of every checkpoint a job manager's log says completed — the moment it told
/// the sinks to commit.
pub fn completions(log: &str) -> Vec<(String, u64)> {
    log.lines()
        .filter(|l| l.contains("checkpoint completed"))
        .filter_map(|l| {
            let id = l
                .split("checkpoint=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((timestamp(l).to_string(), id))
        })
        .collect()
}

/// When a log first says `what`.
pub fn first(log: &str, what: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains(what))
        .map(|l| timestamp(l).to_string())
}
