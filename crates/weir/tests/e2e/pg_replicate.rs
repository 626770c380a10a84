//! `weir run pg-replicate` against a real PostgreSQL (`scripts/postgres.sh`, started by
//! `scripts/test.sh`; its URL in `WEIR_TEST_PG`, its state in `WEIR_PG_DIR`): a writer process
//! inserts, updates and deletes orders while the job runs with 200 ms checkpoints and is
//! killed, failed, restored at other parallelisms and cut off from its server. At the end the
//! totals table must equal the aggregate of the orders table computed by SQL — a lost change
//! or one applied twice shows as a wrong total — and no prepared transaction of the job may be
//! left in `pg_prepared_xacts`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    completed_checkpoints, random_below, rest_url, run_in, text, wait_for_checkpoints, weir,
};

/// The server's URL, as `scripts/test.sh` exports it.
fn server() -> String {
    std::env::var("WEIR_TEST_PG").expect(
        "WEIR_TEST_PG is not set: run the tests with scripts/test.sh, which starts PostgreSQL",
    )
}

/// `url` with its database replaced by `database`.
fn database_url(url: &str, database: &str) -> String {
    let base = url.rsplit_once('/').expect("a database in the URL").0;
    format!("{base}/{database}")
}

/// A PostgreSQL server of a test's own (for a test that stops and starts it while the shared
/// one serves other tests), through `scripts/postgres.sh`; stopped and removed when dropped.
struct OwnServer {
    dir: tempfile::TempDir,
    url: String,
}

impl OwnServer {
    fn start() -> OwnServer {
        let dir = tempfile::tempdir().unwrap();
        let url = OwnServer::script(dir.path(), "start");
        OwnServer { dir, url }
    }

    fn script(dir: &Path, command: &str) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh");
        let out = Command::new(script)
            .arg(command)
            .env("WEIR_PG_DIR", dir)
            .output()
            .expect("run scripts/postgres.sh");
        assert!(
            out.status.success(),
            "postgres.sh {command}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).trim().to_string()
    }

    fn stop(&self) {
        OwnServer::script(self.dir.path(), "stop");
    }

    fn start_again(&self) {
        OwnServer::script(self.dir.path(), "start");
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        OwnServer::script(self.dir.path(), "stop");
    }
}

/// Runs SQL through `psql` and returns its unaligned output (`|` between columns).
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("run psql (Debian's postgresql-client)");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A source and a sink database of their own, the source holding `orders` rows.
struct Databases {
    source: String,
    sink: String,
    name: String,
}

impl Databases {
    fn new(test: &str, orders: u32) -> Databases {
        Databases::on(&server(), test, orders)
    }

    /// The databases on the server at `admin`.
    fn on(admin: &str, test: &str, orders: u32) -> Databases {
        let name = format!("{test}_{}", std::process::id());
        for db in [format!("{name}_src"), format!("{name}_dst")] {
            psql(admin, &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
            psql(admin, &format!("CREATE DATABASE {db}"));
        }
        let source = database_url(admin, &format!("{name}_src"));
        psql(
            &source,
            &format!(
                "CREATE TABLE orders (id bigserial PRIMARY KEY, customer bigint NOT NULL, amount numeric(12,2) NOT NULL);
                 INSERT INTO orders (customer, amount)
                   SELECT g % 50, round((g % 997)::numeric / 7, 2) FROM generate_series(1, {orders}) g;"
            ),
        );
        Databases {
            sink: database_url(admin, &format!("{name}_dst")),
            source,
            name,
        }
    }

    /// The job's flags, writing its checkpoints to `checkpoints`.
    fn args(&self, checkpoints: &Path, parallelism: u32) -> Vec<String> {
        [
            "run",
            "pg-replicate",
            "--source-url",
            &self.source,
            "--sink-url",
            &self.sink,
            "--slot",
            &self.name,
            "--transaction-prefix",
            &self.name,
            "--checkpoint-interval",
            "200ms",
            "--checkpoint-dir",
            &checkpoints.display().to_string(),
            "--parallelism",
            &parallelism.to_string(),
            "-D",
            "restart-strategy.exponential-delay.initial-backoff=200ms",
            "-D",
            "restart-strategy.exponential-delay.max-backoff=2s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Starts a writer process: `ops` random inserts, updates (some moving an order to another
    /// customer) and deletes, each its own transaction.
    fn writer(&self, ops: u32) -> Child {
        let sql = format!(
            "DO $$
             DECLARE r float; top bigint;
             BEGIN
               FOR i IN 1..{ops} LOOP
                 SELECT max(id) INTO top FROM orders;
                 r := random();
                 IF r < 0.45 THEN
                   INSERT INTO orders (customer, amount)
                     VALUES (floor(random() * 50), round((random() * 100)::numeric, 2));
                 ELSIF r < 0.8 THEN
                   UPDATE orders SET amount = amount + 1.25,
                     customer = CASE WHEN random() < 0.3 THEN floor(random() * 50) ELSE customer END
                   WHERE id = floor(random() * top) + 1;
                 ELSE
                   DELETE FROM orders WHERE id = floor(random() * top) + 1;
                 END IF;
                 COMMIT;
               END LOOP;
             END $$;"
        );
        Command::new("psql")
            .args([
                &self.source,
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &sql,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the writer (psql)")
    }

    /// `customer|total|orders` lines of the orders' aggregate.
    fn expected(&self) -> String {
        psql(
            &self.source,
            "SELECT customer, sum(amount)::numeric(20,2), count(*) FROM orders GROUP BY customer ORDER BY customer",
        )
    }

    fn actual(&self) -> String {
        psql(
            &self.sink,
            "SELECT customer, total::numeric(20,2), orders FROM order_totals WHERE orders <> 0 ORDER BY customer",
        )
    }

    /// The job's prepared transactions still in the sink's database.
    fn prepared(&self) -> String {
        psql(
            &self.sink,
            &format!(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE '{}:%'",
                self.name
            ),
        )
    }

    /// Waits until the totals equal the aggregate (the job catches up), or fails after 90 s.
    fn assert_converges(&self, dir: &Path, job: &mut Child) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (expected, actual) = (self.expected(), self.actual());
            if expected == actual {
                return;
            }
            let log = || std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
            if let Some(status) = job.try_wait().unwrap() {
                panic!(
                    "the job ended ({status}) before the totals matched: {}",
                    log()
                );
            }
            if Instant::now() > deadline {
                let _ = job.kill();
                let differ: Vec<String> = expected
                    .lines()
                    .zip(actual.lines())
                    .filter(|(e, a)| e != a)
                    .map(|(e, a)| format!("{e} ≠ {a}"))
                    .collect();
                panic!(
                    "totals never matched the orders (expected ≠ actual: {differ:?}; {} lines ≠ {} lines)\njob log:\n{}",
                    expected.lines().count(),
                    actual.lines().count(),
                    log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops the job with SIGINT (a final checkpoint commits its last transaction) and checks
    /// that it left no prepared transaction and the totals still match.
    fn stop_and_check(&self, dir: &Path, mut job: Child) {
        self.assert_converges(dir, &mut job);
        // SAFETY: signalling a child process this test started and still owns.
        unsafe { libc::kill(job.id() as i32, libc::SIGINT) };
        let status = job.wait().unwrap();
        let log = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
        assert!(status.success(), "{status}: {log}");
        assert_eq!(self.prepared(), "", "prepared transactions left behind");
        assert_eq!(self.expected(), self.actual());
        assert!(!log.contains(":weir@"), "a password in the log");
    }

    fn drop_slot(&self) {
        let _ = Command::new("psql")
            .args([
                &self.source,
                "-X",
                "-q",
                "-c",
                &format!("SELECT pg_drop_replication_slot('{}')", self.name),
            ])
            .output();
    }
}

impl Drop for Databases {
    fn drop(&mut self) {
        self.drop_slot();
    }
}

fn assert_writer_succeeds(writer: Child) {
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the writer failed: {}",
        text(&out.stderr)
    );
}

/// Starts the job in `dir`; its log is appended to `dir/job.log`. Its standard output is
/// piped when it serves REST on a port of its own (to read the address); otherwise it serves
/// none (tests run side by side) and its output is dropped.
fn spawn(dir: &Path, args: &[String], env: &[(&str, &str)]) -> Child {
    let rest = args.iter().any(|a| a == "--rest-port");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("job.log"))
        .unwrap();
    let mut command = weir();
    command
        .args(args)
        .args(if rest { None } else { Some("--no-rest") })
        .current_dir(dir)
        .stdout(if rest { Stdio::piped() } else { Stdio::null() })
        .stderr(log);
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().expect("start weir")
}

#[test]
fn killed_five_times_while_a_writer_runs_the_totals_equal_the_orders_aggregate() {
    let dbs = Databases::new("pg_kills", 60_000);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ck");
    let writer = dbs.writer(15_000);
    let mut args = dbs.args(&checkpoints, 2);
    let mut kills = 0;
    while kills < 5 {
        let mut job = spawn(dir.path(), &args, &[]);
        // The first kill lands during the snapshot; later ones anywhere after a checkpoint.
        if kills > 0 {
            wait_for_checkpoints(&checkpoints, "pg-replicate", &mut job, 1);
        }
        std::thread::sleep(Duration::from_millis(200 + random_below(700)));
        if let Some(status) = job.try_wait().unwrap() {
            panic!("the job ended by itself: {status}");
        }
        job.kill().unwrap(); // SIGKILL
        job.wait().unwrap();
        kills += 1;
        if !args.iter().any(|a| a == "--resume") {
            args.push("--resume".into());
        }
    }
    let job = spawn(dir.path(), &args, &[]);
    assert_writer_succeeds(writer);
    dbs.stop_and_check(dir.path(), job);
}

#[test]
fn injected_failures_and_a_server_restart_keep_the_totals_exact() {
    // A server of its own: the restart must not disturb the other tests.
    let server = OwnServer::start();
    let dbs = Databases::on(&server.url, "pg_failures", 30_000);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ck");
    let mut args = dbs.args(&checkpoints, 2);
    args.extend(["--rest-port".into(), "0".into()]);
    let mut job = spawn(
        dir.path(),
        &args,
        &[("WEIR_INJECT_FAILURES", "totals:1500ms")],
    );
    let rest = rest_url(&mut job);
    let writer = dbs.writer(4_000);
    wait_for_checkpoints(&checkpoints, "pg-replicate", &mut job, 3);
    assert_writer_succeeds(writer);
    // The server goes away mid-run (like a crash) and comes back: the attempt fails, the
    // restart strategy retries until the server answers, and the job carries on.
    server.stop();
    std::thread::sleep(Duration::from_secs(2));
    server.start_again();
    assert_writer_succeeds(dbs.writer(4_000));
    // The failures the REST API reports name the server, never with its password.
    let overview = http_get(&rest, "/jobs/overview");
    let id = overview
        .split("\"jid\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no job id in {overview}"));
    let exceptions = http_get(&rest, &format!("/jobs/{id}/exceptions"));
    assert!(exceptions.contains("200 OK"), "{exceptions}");
    assert!(
        !exceptions.contains(":weir@"),
        "a password in the REST API: {exceptions}"
    );
    dbs.stop_and_check(dir.path(), job);
    let log = std::fs::read_to_string(dir.path().join("job.log")).unwrap();
    assert!(
        log.contains("restarting the job"),
        "no attempt failed: {log}"
    );
    assert!(
        log.contains("weir:***@"),
        "the server's failure was not logged: {log}"
    );
}

/// `GET path` from the REST API at `url` (`http://host:port/`): status line, headers, body.
fn http_get(url: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// Where a restored run starts from.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// `weir stop --savepoint`, then `--from-savepoint`.
    Savepoint,
    /// The latest retained checkpoint of a killed run.
    Retained,
}

fn restore_case(start: Start, claim: bool, from: u32, to: u32) {
    let dbs = Databases::new(
        &format!("pg_{start:?}_{claim}_{from}_{to}").to_lowercase(),
        20_000,
    );
    let dir = tempfile::tempdir().unwrap();
    let ck1 = dir.path().join("ck1");
    let writer = dbs.writer(3_000);
    let snapshot: PathBuf = match start {
        Start::Savepoint => {
            let mut args = dbs.args(&ck1, from);
            args.extend([
                "--rest-port".into(),
                "0".into(),
                "--savepoint-root".into(),
                dir.path().join("savepoints").display().to_string(),
            ]);
            let mut job = spawn(dir.path(), &args, &[]);
            let url = rest_url(&mut job);
            wait_for_checkpoints(&ck1, "pg-replicate", &mut job, 2);
            let savepoints = dir.path().join("savepoints");
            let out = run_in(
                dir.path(),
                &[
                    "stop",
                    "pg-replicate",
                    "--savepoint",
                    &savepoints.display().to_string(),
                    "--rest",
                    &url,
                ],
            );
            assert!(out.status.success(), "weir stop: {}", text(&out.stderr));
            assert!(job.wait().unwrap().success());
            PathBuf::from(
                text(&out.stdout)
                    .trim()
                    .rsplit("savepoint: ")
                    .next()
                    .unwrap(),
            )
        }
        Start::Retained => {
            let mut job = spawn(dir.path(), &dbs.args(&ck1, from), &[]);
            wait_for_checkpoints(&ck1, "pg-replicate", &mut job, 3);
            job.kill().unwrap();
            job.wait().unwrap();
            let latest = *completed_checkpoints(&ck1, "pg-replicate").last().unwrap();
            ck1.join("pg-replicate").join(format!("chk-{}", latest.0))
        }
    };
    let mut args = dbs.args(&dir.path().join("ck2"), to);
    args.extend([
        "--from-savepoint".into(),
        snapshot.display().to_string(),
        "--claim-mode".into(),
        if claim { "claim" } else { "no-claim" }.into(),
    ]);
    let job = spawn(dir.path(), &args, &[]);
    assert_writer_succeeds(writer);
    dbs.stop_and_check(dir.path(), job);
    if claim {
        assert!(
            !snapshot.join("_metadata").exists(),
            "a claimed snapshot outlived the job's checkpoints"
        );
    } else {
        assert!(
            snapshot.join("_metadata").exists(),
            "an unclaimed snapshot was deleted"
        );
    }
}

#[test]
fn a_savepoint_restored_at_more_subtasks_with_claim_keeps_the_totals_exact() {
    restore_case(Start::Savepoint, true, 2, 3);
}

#[test]
fn a_savepoint_restored_at_fewer_subtasks_without_claim_keeps_the_totals_exact() {
    restore_case(Start::Savepoint, false, 3, 1);
}

#[test]
fn a_retained_checkpoint_restored_at_fewer_subtasks_with_claim_keeps_the_totals_exact() {
    restore_case(Start::Retained, true, 3, 1);
}

#[test]
fn a_retained_checkpoint_restored_without_claim_keeps_the_totals_exact() {
    restore_case(Start::Retained, false, 2, 2);
}
