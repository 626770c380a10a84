//! Cluster mode end to end: a job manager and task managers as separate processes on
//! loopback, running wordcount; failures are SIGKILLs of task managers. The output is checked
//! word by word — nothing lost, nothing duplicated.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{assert_exactly_once, restarts, text, weir, write_text_input};

mod unaligned;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process of the cluster, killed when dropped (a failing test leaves nothing running).
struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    fn start(mut cmd: Command, log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start weir");
        Process {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        text(&std::fs::read(&self.log).unwrap_or_default())
    }

    /// Sends `signal` (STOP, CONT) to the process.
    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    /// Waits for the process to exit; fails the test after `timeout`.
    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!("still running after {timeout:?}; its log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn job_manager(dir: &Path, port: u16, input: &Path, parallelism: u32) -> Process {
    job_manager_with(dir, port, input, parallelism, &[], "jobmanager")
}

fn job_manager_with(
    dir: &Path,
    port: u16,
    input: &Path,
    parallelism: u32,
    defines: &[String],
    name: &str,
) -> Process {
    let checkpoints = dir.join("checkpoints").display().to_string();
    job_manager_at(dir, port, input, parallelism, defines, name, &checkpoints)
}

fn job_manager_at(
    dir: &Path,
    port: u16,
    input: &Path,
    parallelism: u32,
    defines: &[String],
    name: &str,
    checkpoints: &str,
) -> Process {
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args(["jobmanager", "--bind", "127.0.0.1", "--rpc-port"])
        .arg(port.to_string())
        .args(["--wait-for-task-managers", "3"]);
    for define in defines {
        cmd.args(["-D", define]);
    }
    cmd.args([
        "-D",
        "heartbeat.interval=200ms",
        "-D",
        "heartbeat.timeout=3s",
    ])
    .args(["--", "run", "wordcount", "--input"])
    .arg(input)
    .args(["--output"])
    .arg(dir.join("output"))
    .args(["--checkpoint-dir", checkpoints])
    .args(["--parallelism", &parallelism.to_string()])
    .args(["--checkpoint-interval", "100ms"])
    .args(["-D", "restart-strategy.type=fixed-delay"])
    .args(["-D", "restart-strategy.fixed-delay.attempts=10"])
    .args(["-D", "restart-strategy.fixed-delay.delay=0ms"]);
    Process::start(cmd, dir.join(format!("{name}.log")))
}

fn task_manager_of(dir: &Path, job_managers: &str, slots: u32, n: usize) -> Process {
    task_manager_with_secret(dir, job_managers, slots, n, None)
}

/// A task manager with `secret` in WEIR_CLUSTER_SECRET.
fn task_manager_with_secret(
    dir: &Path,
    job_managers: &str,
    slots: u32,
    n: usize,
    secret: Option<&str>,
) -> Process {
    let mut cmd = weir();
    if let Some(secret) = secret {
        cmd.env("WEIR_CLUSTER_SECRET", secret);
    }
    cmd.current_dir(dir)
        .args(["taskmanager", "--jobmanager", job_managers])
        .args(["--slots", &slots.to_string(), "--id", &format!("tm-{n}")])
        .args(["--connect-timeout", "60s"]);
    Process::start(cmd, dir.join(format!("taskmanager-{n}.log")))
}

/// Polls the job manager's log until `done` holds; fails after 60 s with `what` did not happen.
fn wait_until(jm: &Process, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = jm.log();
        if done(&log) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within 60 s; job manager log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the job manager has completed `n` checkpoints.
fn wait_for_checkpoints(jm: &Process, n: usize) {
    wait_until(jm, &format!("no {n} checkpoints"), |log| {
        completed_ids(log).len() >= n
    });
}

/// Three task managers of `slots` slots each, for the job manager(s) at `job_managers`.
fn task_managers(dir: &Path, job_managers: &str, slots: u32) -> Vec<Process> {
    (0..3)
        .map(|n| task_manager_of(dir, job_managers, slots, n))
        .collect()
}

/// Waits for the job manager to exit with status 0; returns its log.
fn finished(jm: &mut Process) -> String {
    let status = jm.wait(Duration::from_secs(180));
    let log = jm.log();
    assert!(status.success(), "job manager failed:\n{log}");
    log
}

/// Waits for every task manager not killed by the test to exit with status 0.
fn all_exited_ok(tms: &mut [Process]) {
    for (n, tm) in tms.iter_mut().enumerate() {
        if tm.child.is_some() {
            let status = tm.wait(Duration::from_secs(30));
            assert!(status.success(), "task manager {n} failed:\n{}", tm.log());
        }
    }
}

/// A number no other run of the tests uses (for ZooKeeper roots and S3 prefixes).
fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn wordcount_on_three_task_managers_commits_every_count_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 7, 4, 5_000);
    let port = free_port();
    let mut jm = job_manager(dir.path(), port, &input, 3);
    let mut tms = task_managers(dir.path(), &format!("127.0.0.1:{port}"), 1);
    let log = finished(&mut jm);
    assert!(log.contains("0 restarts"), "{log}");
    all_exited_ok(&mut tms);
    // Every task manager ran subtasks: records crossed the network.
    for tm in &tms {
        assert!(tm.log().contains("deployed attempt=0"), "{}", tm.log());
    }
    assert_exactly_once(&input, &dir.path().join("output"));
}

#[test]
fn a_task_manager_killed_with_sigkill_mid_run_fails_over_and_the_output_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 11, 30, 20_000);
    let port = free_port();
    let mut jm = job_manager(dir.path(), port, &input, 3);
    let mut tms = task_managers(dir.path(), &format!("127.0.0.1:{port}"), 2);
    wait_for_checkpoints(&jm, 2);
    tms[1].kill();
    let log = finished(&mut jm);
    assert!(log.contains("task manager lost"), "{log}");
    assert!(
        log.contains("1 restarts"),
        "the job did not restart once:\n{log}"
    );
    // The second attempt ran on the two task managers left.
    for n in [0, 2] {
        assert!(
            tms[n].log().contains("deployed attempt=1"),
            "{}",
            tms[n].log()
        );
    }
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
}

/// The high-availability tests share the test ZooKeeper, and one restarts it: one at a time.
static ZOOKEEPER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn zookeeper() -> String {
    match std::env::var("WEIR_TEST_ZK") {
        Ok(address) if !address.is_empty() => address,
        _ => panic!(
            "WEIR_TEST_ZK is not set: the high-availability tests need a real ZooKeeper; run scripts/test.sh"
        ),
    }
}

/// The HA options of a job whose znodes live under a root no other run uses.
fn ha_options(dir: &Path, test: &str) -> Vec<String> {
    let nanos = unique();
    vec![
        "high-availability.type=zookeeper".into(),
        format!("high-availability.zookeeper.quorum={}", zookeeper()),
        format!("high-availability.zookeeper.path.root=/weir-e2e/{test}-{nanos}"),
        format!("high-availability.storageDir={}", dir.join("ha").display()),
        "high-availability.zookeeper.client.session-timeout=2s".into(),
        "high-availability.zookeeper.client.connection-timeout=2s".into(),
    ]
}

/// The ids of the checkpoints a job manager's log says completed, in order.
fn completed_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("checkpoint completed"))
        .filter_map(|l| {
            l.split("checkpoint=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

#[test]
fn the_standby_job_manager_takes_over_from_a_killed_leader_and_ids_keep_ascending() {
    let _zk = ZOOKEEPER.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 13, 30, 20_000);
    let ha = ha_options(dir.path(), "takeover");
    let ports = [free_port(), free_port()];
    let mut jms: Vec<Process> = ports
        .iter()
        .enumerate()
        .map(|(n, port)| {
            job_manager_with(
                dir.path(),
                *port,
                &input,
                3,
                &ha,
                &format!("jobmanager-{n}"),
            )
        })
        .collect();
    let addresses = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let mut tms = task_managers(dir.path(), &addresses, 2);
    // Whoever leads runs the job: wait for its checkpoints, then kill it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let leader = loop {
        if let Some(n) = (0..2).find(|n| completed_ids(&jms[*n].log()).len() >= 2) {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "no leader completed two checkpoints; logs:\n{}\n{}\n{}",
            jms[0].log(),
            jms[1].log(),
            tms[0].log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    jms[leader].kill();
    let before = completed_ids(&jms[leader].log());
    let standby = 1 - leader;
    let log = finished(&mut jms[standby]);
    assert!(log.contains("granted leadership"), "{log}");
    assert!(
        log.contains("recovered the completed checkpoints ZooKeeper records"),
        "the new leader did not recover from ZooKeeper:\n{log}"
    );
    let after = completed_ids(&log);
    assert!(!after.is_empty(), "{log}");
    assert!(
        after.iter().all(|id| id > before.iter().max().unwrap()),
        "ids did not keep ascending across leaders: before {before:?}, after {after:?}"
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));

    // The job's end is recorded: a job manager started later does not run it again.
    let mut late = job_manager_with(dir.path(), free_port(), &input, 3, &ha, "jobmanager-late");
    let status = late.wait(Duration::from_secs(30));
    assert!(status.success(), "{}", late.log());
    assert!(
        late.log().contains("the job already ended"),
        "{}",
        late.log()
    );
}

fn zookeeper_script(command: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zookeeper.sh");
    assert!(
        std::env::var_os("WEIR_ZK_DIR").is_some(),
        "WEIR_ZK_DIR is not set: this test restarts the test ZooKeeper; run scripts/test.sh"
    );
    let status = Command::new("bash")
        .arg(&script)
        .arg(command)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "scripts/zookeeper.sh {command}: {status}");
}

#[test]
fn a_zookeeper_restart_mid_run_loses_nothing() {
    let _zk = ZOOKEEPER.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 17, 30, 20_000);
    let ha = ha_options(dir.path(), "zk-restart");
    let port = free_port();
    let mut jm = job_manager_with(dir.path(), port, &input, 3, &ha, "jobmanager");
    let mut tms = task_managers(dir.path(), &format!("127.0.0.1:{port}"), 1);
    wait_for_checkpoints(&jm, 2);
    zookeeper_script("stop");
    std::thread::sleep(Duration::from_millis(1500));
    zookeeper_script("start");
    let log = finished(&mut jm);
    let ids = completed_ids(&log);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
}

#[test]
fn a_cluster_checkpointing_to_s3_survives_a_killed_task_manager() {
    let endpoint = std::env::var("WEIR_TEST_S3_ENDPOINT").expect(
        "WEIR_TEST_S3_ENDPOINT is not set: this test needs an S3-compatible server; run scripts/test.sh",
    );
    let bucket = std::env::var("WEIR_TEST_S3_BUCKET").expect("WEIR_TEST_S3_BUCKET");
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 19, 30, 20_000);
    let nanos = unique();
    let location = format!("s3://{bucket}/cluster-{nanos}");
    let s3 = vec![
        format!("s3.endpoint={endpoint}"),
        "s3.access-key=weir-test".into(),
        "s3.secret-key=weir-test".into(),
        "s3.region=us-east-1".into(),
        "s3.path.style.access=true".into(),
    ];
    let port = free_port();
    let mut jm = job_manager_at(dir.path(), port, &input, 3, &s3, "jobmanager", &location);
    let mut tms = task_managers(dir.path(), &format!("127.0.0.1:{port}"), 2);
    wait_for_checkpoints(&jm, 2);
    tms[2].kill();
    let log = finished(&mut jm);
    assert!(
        log.contains("1 restarts"),
        "the job did not restart once:\n{log}"
    );
    all_exited_ok(&mut tms);
    for tm in &tms[..2] {
        assert!(tm.log().contains("restored"), "{}", tm.log());
    }
    assert!(
        !dir.path().join("checkpoints").exists(),
        "nothing went to local disk"
    );
    assert_exactly_once(&input, &dir.path().join("output"));
}

/// Local recovery on a cluster: each task manager keeps a copy of the state files its subtasks
/// write, and a subtask restarted on the same task manager (failures injected about 1.5 s into
/// each attempt) reads its state from there.
#[test]
fn with_local_recovery_subtasks_restarted_on_their_task_manager_read_its_local_copy() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 47, 30, 20_000);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let local = dir.path().join("local-state");
    let defines = [
        "state.backend.local-recovery=true".to_string(),
        format!("taskmanager.state.local.root-dirs={}", local.display()),
        // Every piece of state in a file of its own, none inline in the metadata.
        "execution.checkpointing.data-inline-threshold=0".to_string(),
    ];
    let mut jm = job_manager_with(dir.path(), port, &input, 3, &defines, "jobmanager");
    let mut tms: Vec<Process> = (0..3)
        .map(|n| unaligned::task_manager(dir.path(), &address, n, Some("counts:1500ms")))
        .collect();
    let log = finished(&mut jm);
    assert!(restarts(&log) >= 1, "no injected failure struck\n{log}");
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
    let local_bytes: u64 = tms
        .iter()
        .flat_map(|tm| {
            let log = tm.log();
            let found: Vec<u64> = log
                .split("local_bytes=")
                .skip(1)
                .filter_map(|rest| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                })
                .collect();
            found
        })
        .sum();
    assert!(
        local_bytes > 0,
        "no restarted subtask read a local copy:\n{}",
        tms.iter().map(Process::log).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_task_manager_that_stops_answering_is_declared_lost_by_heartbeat_and_the_job_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 23, 30, 20_000);
    let port = free_port();
    let mut jm = job_manager(dir.path(), port, &input, 3);
    let mut tms = task_managers(dir.path(), &format!("127.0.0.1:{port}"), 2);
    wait_for_checkpoints(&jm, 2);
    // Frozen, not dead: its connections stay open, only its heartbeats stop.
    tms[1].signal("STOP");
    wait_until(&jm, "no redeployment", |log| {
        log.contains("deployed the attempt attempt=1")
    });
    let log = jm.log();
    assert!(log.contains("no heartbeat for"), "{log}");
    tms[1].signal("CONT");
    let log = finished(&mut jm);
    assert!(log.contains("1 restarts"), "{log}");
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
}

#[test]
fn a_cluster_with_a_secret_runs_the_job_only_on_task_managers_that_know_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 29, 4, 5_000);
    let secret = "correct horse battery staple";
    let secret_file = dir.path().join("cluster-secret");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let define = format!("security.internal.secret-file={}", secret_file.display());
    let mut jm = job_manager_with(dir.path(), port, &input, 3, &[define], "jobmanager");
    // First, one without the secret and one with another: refused, they stop.
    let mut strangers = [
        task_manager_with_secret(dir.path(), &address, 4, 90, None),
        task_manager_with_secret(dir.path(), &address, 4, 91, Some("somebody else's secret")),
    ];
    for stranger in &mut strangers {
        let status = stranger.wait(Duration::from_secs(60));
        let log = stranger.log();
        assert_eq!(status.code(), Some(2), "{log}");
        assert!(log.contains("refused this task manager"), "{log}");
        assert!(!log.contains("built the job"), "{log}");
    }
    let mut tms: Vec<Process> = (0..3)
        .map(|n| task_manager_with_secret(dir.path(), &address, 1, n, Some(secret)))
        .collect();
    let log = finished(&mut jm);
    assert!(log.contains("0 restarts"), "{log}");
    assert!(
        log.matches("refused a control-plane call").count() >= 2,
        "{log}"
    );
    // The strangers never registered: no slot of theirs was offered, no subtask placed.
    assert!(!log.contains("tm-90") && !log.contains("tm-91"), "{log}");
    all_exited_ok(&mut tms);
    for tm in &tms {
        assert!(tm.log().contains("deployed attempt=0"), "{}", tm.log());
    }
    assert_exactly_once(&input, &dir.path().join("output"));
}

/// A CA made for a test, and the certificates it signs (for localhost and 127.0.0.1, for
/// servers and clients), written as PEM files.
struct TestCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        TestCa {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// Writes `dir/<name>.crt`, `dir/<name>.key` and `dir/<name>-ca.crt` (with `trusted`);
    /// returns the -D options that use them.
    fn process(&self, dir: &Path, name: &str, trusted: &str) -> Vec<String> {
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_file, key_file, ca_file) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
            dir.join(format!("{name}-ca.crt")),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        std::fs::write(&ca_file, trusted).unwrap();
        vec![
            "security.ssl.internal.enabled=true".into(),
            format!("security.ssl.internal.cert={}", cert_file.display()),
            format!("security.ssl.internal.key={}", key_file.display()),
            format!(
                "security.ssl.internal.trust-certificates={}",
                ca_file.display()
            ),
        ]
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }
}

/// A task manager with these -D options.
fn task_manager_with(
    dir: &Path,
    job_managers: &str,
    slots: u32,
    n: usize,
    defines: &[String],
    connect_timeout: &str,
) -> Process {
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args(["taskmanager", "--jobmanager", job_managers])
        .args(["--slots", &slots.to_string(), "--id", &format!("tm-{n}")])
        .args(["--connect-timeout", connect_timeout]);
    for define in defines {
        cmd.args(["-D", define]);
    }
    Process::start(cmd, dir.join(format!("taskmanager-{n}.log")))
}

#[test]
fn a_cluster_with_mutual_tls_runs_the_job_only_on_task_managers_with_a_certificate_of_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 31, 4, 5_000);
    let ours = TestCa::new("cluster CA");
    let theirs = TestCa::new("another CA");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let jm_tls = ours.process(dir.path(), "jobmanager", &ours.pem());
    let mut jm = job_manager_with(dir.path(), port, &input, 3, &jm_tls, "jobmanager");

    // Strangers: of another CA (it refuses the job manager, which would refuse it); with a
    // certificate of another CA though trusting ours (the job manager refuses it); without
    // TLS at all (it never gets past the handshake).
    let both = format!("{}{}", ours.pem(), theirs.pem());
    let mut strangers = [
        task_manager_with(
            dir.path(),
            &address,
            4,
            90,
            &theirs.process(dir.path(), "tm-90", &theirs.pem()),
            "60s",
        ),
        task_manager_with(
            dir.path(),
            &address,
            4,
            91,
            &theirs.process(dir.path(), "tm-91", &both),
            "60s",
        ),
        task_manager_with(dir.path(), &address, 4, 92, &[], "5s"),
    ];
    for (n, stranger) in strangers.iter_mut().enumerate() {
        let status = stranger.wait(Duration::from_secs(60));
        let log = stranger.log();
        assert!(
            !log.contains("built the job") && !log.contains("registered"),
            "{log}"
        );
        if n < 2 {
            // A refused certificate: trying again cannot help.
            assert_eq!(status.code(), Some(2), "{log}");
            assert!(
                log.contains("do not accept each other's certificates"),
                "{log}"
            );
        } else {
            assert_eq!(status.code(), Some(1), "{log}");
            assert!(log.contains("cannot reach the job manager"), "{log}");
        }
    }

    let mut tms: Vec<Process> = (0..3)
        .map(|n| {
            let name = format!("tm-{n}");
            let tls = ours.process(dir.path(), &name, &ours.pem());
            task_manager_with(dir.path(), &address, 1, n, &tls, "60s")
        })
        .collect();
    let log = finished(&mut jm);
    assert!(log.contains("0 restarts"), "{log}");
    assert!(log.contains("tls=true"), "{log}");
    // The strangers never registered: no slot of theirs was offered, no subtask placed.
    assert!(
        !log.contains("tm-90") && !log.contains("tm-91") && !log.contains("tm-92"),
        "{log}"
    );
    all_exited_ok(&mut tms);
    for tm in &tms {
        let tm_log = tm.log();
        // Each one's data plane took TLS only, and records crossed it.
        assert!(tm_log.contains("tls=true"), "{tm_log}");
        assert!(tm_log.contains("deployed attempt=0"), "{tm_log}");
    }
    assert_exactly_once(&input, &dir.path().join("output"));
}
