//! `weir run kafka-wordcount` against a real Kafka-protocol broker (`WEIR_TEST_KAFKA`, started
//! by scripts/test.sh): killed, failed between a checkpoint's completion and its commit,
//! restored from a savepoint at another parallelism, with input topics appearing mid-run. The
//! output is checked from its raw record batches and transaction markers, keeping only
//! committed transactions (the test broker hands aborted records to read_committed readers).
//!
//! Scale: by default the tests write 1.2 million words (the kills) and 900 thousand (the
//! savepoint), so that each finishes in under half a minute in a debug build on two cores; the
//! kills, injected failures, restore and discovery are the same at any size.
//! `WEIR_KAFKA_E2E_WORDS=10000000` runs them at ten million words (the savepoint test at three
//! quarters of that), which takes a few minutes in a release build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_kafka::committed::{read_committed, CommittedReader};
use weir_kafka::wire::WireClient;

use crate::common::{
    completed_checkpoints, push_random_lines, random_below, rest_url, run_in, text,
    wait_for_checkpoints, weir,
};

const JOB: &str = "kafka-wordcount";

fn broker() -> String {
    std::env::var("WEIR_TEST_KAFKA").expect(
        "WEIR_TEST_KAFKA is not set: run the tests with scripts/test.sh, which starts a broker",
    )
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

fn create_topic(topic: &str, partitions: i32) {
    WireClient::connect(&broker())
        .unwrap()
        .create_topic(topic, partitions)
        .unwrap();
}

/// Writes `lines` lines of 6 words into `topic`'s partitions (round-robin, in chunks, pausing
/// `pause` between chunks), from a thread; returns the occurrences of every word written.
fn writer(
    topic: String,
    partitions: i32,
    seed: u64,
    lines: usize,
    pause: Duration,
) -> JoinHandle<BTreeMap<String, u64>> {
    std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", broker())
            .set("linger.ms", "5")
            .create()
            .unwrap();
        let mut totals = BTreeMap::new();
        let mut x = seed | 1;
        let chunk = 500;
        for c in 0..lines.div_ceil(chunk) {
            let mut text = String::new();
            push_random_lines(&mut x, chunk.min(lines - c * chunk), &mut text, |w| {
                *totals.entry(w.to_string()).or_insert(0u64) += 1;
            });
            for (i, line) in text.lines().enumerate() {
                let record = BaseRecord::<(), str>::to(&topic)
                    .partition(((c * chunk + i) % partitions as usize) as i32)
                    .payload(line);
                let mut record = record;
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((_, back)) => {
                            producer.poll(Duration::from_millis(10));
                            record = back;
                        }
                    }
                }
                producer.poll(Duration::ZERO);
            }
            std::thread::sleep(pause);
        }
        producer.flush(Duration::from_secs(60)).unwrap();
        totals
    })
}

/// Words the kills test writes (`WEIR_KAFKA_E2E_WORDS`, 1.2 million by default); the savepoint
/// test writes three quarters of it.
fn words_to_write() -> usize {
    std::env::var("WEIR_KAFKA_E2E_WORDS")
        .map(|v| {
            v.parse()
                .expect("WEIR_KAFKA_E2E_WORDS is a number of words")
        })
        .unwrap_or(1_200_000)
}

/// One run's topics and flags.
struct Run {
    input: String,
    output: String,
    prefix: String,
}

impl Run {
    fn new(name: &str) -> Run {
        let stem = unique(name);
        let run = Run {
            input: format!("{stem}-in-a"),
            output: format!("{stem}-out"),
            prefix: stem.clone(),
        };
        create_topic(&run.input, 4);
        create_topic(&run.output, 4);
        run
    }

    /// The input topics are `{stem}-in-*`, so that a topic created later is read too.
    fn input_pattern(&self) -> String {
        format!("{}-in-.*", self.prefix)
    }

    fn args(&self, checkpoints: &Path, parallelism: u32) -> Vec<String> {
        [
            "run",
            JOB,
            "--bootstrap-servers",
            &broker(),
            "--input-pattern",
            &self.input_pattern(),
            "--output-topic",
            &self.output,
            "--transactional-id-prefix",
            &self.prefix,
            "--discovery-interval",
            "500ms",
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

    /// Every count of every word in the committed output, and the records left out.
    fn committed_counts(&self) -> (BTreeMap<String, Vec<u64>>, u64, u64) {
        let read = read_committed(&broker(), &self.output).unwrap();
        let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for record in &read.records {
            let payload = std::str::from_utf8(record.payload.as_deref().unwrap_or_default())
                .unwrap()
                .to_string();
            let (word, count) = payload.split_once('\t').expect("word<TAB>count");
            assert_eq!(
                record.key.as_deref(),
                Some(word.as_bytes()),
                "records are keyed by their word"
            );
            counts
                .entry(word.to_string())
                .or_default()
                .push(count.parse().unwrap());
        }
        (counts, read.aborted, read.open)
    }

    /// Waits until the committed output holds as many counts as words were written (one per
    /// word occurrence; a lost one keeps it short until the deadline), then stops the job and
    /// checks that every count of every word is there exactly once.
    fn stop_and_check(&self, dir: &Path, mut job: Child, totals: &BTreeMap<String, u64>) {
        let words: u64 = totals.values().sum();
        let allowed = Duration::from_secs(90 + words / 20_000);
        let deadline = Instant::now() + allowed;
        let mut reader = CommittedReader::new(&broker(), &self.output, false).unwrap();
        loop {
            if let Some(status) = job.try_wait().unwrap() {
                panic!("the job ended ({status}): {}", log(dir));
            }
            reader.catch_up().unwrap();
            if reader.committed() >= words {
                break;
            }
            if Instant::now() >= deadline {
                // A job left running would go on writing into the topic after the test.
                job.kill().unwrap();
                job.wait().unwrap();
                panic!(
                    "the output did not catch up in {allowed:?} ({} of {words} counts committed; \
                     (partition, offset, waiting for a marker): {:?}): {}",
                    reader.committed(),
                    reader.positions(),
                    log(dir)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // SAFETY: signalling a child process this test started and still owns.
        unsafe { libc::kill(job.id() as i32, libc::SIGINT) };
        job.wait().unwrap();
        let (counts, aborted, open) = self.committed_counts();
        for (word, &total) in totals {
            let mut seen = counts.get(word).cloned().unwrap_or_default();
            seen.sort_unstable();
            let expected: Vec<u64> = (1..=total).collect();
            assert!(
                seen == expected,
                "word {word}: {} counts committed for {total} occurrences (duplicates or gaps)",
                seen.len()
            );
        }
        assert_eq!(counts.len(), totals.len(), "words that were never written");
        eprintln!(
            "{}: {} words checked; {aborted} records of aborted transactions and {open} of open ones left out",
            self.output,
            totals.values().sum::<u64>()
        );
    }
}

fn log(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Starts the job in `dir`; its log is appended to `dir/job.log`. Its standard output is
/// piped when it serves REST on a port of its own (to read the address); otherwise it serves
/// none and its output is dropped.
fn spawn(dir: &Path, args: &[String]) -> Child {
    let rest = args.iter().any(|a| a == "--rest-port");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("job.log"))
        .unwrap();
    weir()
        .args(args)
        .args(if rest { None } else { Some("--no-rest") })
        .env("RUST_LOG", "info")
        .current_dir(dir)
        .stdout(if rest { Stdio::piped() } else { Stdio::null() })
        .stderr(log)
        .spawn()
        .expect("start weir")
}

fn merge(into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>) {
    for (word, n) in from {
        *into.entry(word).or_insert(0) += n;
    }
}

#[test]
fn killed_five_times_and_failing_before_commits_every_count_is_committed_once() {
    let run = Run::new("kafka-kills");
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ck");
    let writer = writer(
        run.input.clone(),
        4,
        7,
        words_to_write() / 6,
        Duration::from_millis(25),
    );
    let mut args = run.args(&checkpoints, 2);
    // One completion notice in seven fails its attempt before the commit.
    args.extend(["--fail-before-commit".into(), "0.15".into()]);
    let mut kills = 0;
    while kills < 5 {
        let mut job = spawn(dir.path(), &args);
        if kills > 0 {
            wait_for_checkpoints(&checkpoints, JOB, &mut job, 1);
        }
        std::thread::sleep(Duration::from_millis(300 + random_below(900)));
        if let Some(status) = job.try_wait().unwrap() {
            panic!("the job ended by itself ({status}): {}", log(dir.path()));
        }
        job.kill().unwrap(); // SIGKILL
        job.wait().unwrap();
        kills += 1;
        if !args.iter().any(|a| a == "--resume") {
            args.push("--resume".into());
        }
    }
    let job = spawn(dir.path(), &args);
    let totals = writer.join().unwrap();
    run.stop_and_check(dir.path(), job, &totals);
    let log = std::fs::read_to_string(dir.path().join("job.log")).unwrap();
    assert!(
        log.contains("injected failure before committing"),
        "no failure was injected between a completion and its commit"
    );
    assert!(
        log.contains("committed a transaction of a completed checkpoint on restore"),
        "no restore committed a recorded transaction"
    );
}

#[test]
fn a_savepoint_restored_at_three_subtasks_with_a_topic_added_mid_run_commits_every_count_once() {
    let run = Run::new("kafka-savepoint");
    let dir = tempfile::tempdir().unwrap();
    let ck1 = dir.path().join("ck1");
    let savepoints = dir.path().join("savepoints");
    let first = writer(
        run.input.clone(),
        4,
        11,
        words_to_write() / 12,
        Duration::from_millis(25),
    );
    let mut args = run.args(&ck1, 2);
    args.extend([
        "--rest-port".into(),
        "0".into(),
        "--savepoint-root".into(),
        savepoints.display().to_string(),
    ]);
    let mut job = spawn(dir.path(), &args);
    let url = rest_url(&mut job);
    wait_for_checkpoints(&ck1, JOB, &mut job, 3);

    // A second input topic appears while the job runs (the test broker cannot add partitions
    // to an existing topic, so new partitions come with a new topic the pattern matches).
    let added = format!("{}-in-b", run.prefix);
    create_topic(&added, 2);
    let second = writer(
        added,
        2,
        13,
        words_to_write() / 24,
        Duration::from_millis(25),
    );
    std::thread::sleep(Duration::from_millis(1500));

    let out = run_in(
        dir.path(),
        &[
            "stop",
            JOB,
            "--savepoint",
            &savepoints.display().to_string(),
            "--rest",
            &url,
        ],
    );
    assert!(out.status.success(), "weir stop: {}", text(&out.stderr));
    assert!(job.wait().unwrap().success(), "{}", log(dir.path()));
    let savepoint = PathBuf::from(
        text(&out.stdout)
            .trim()
            .rsplit("savepoint: ")
            .next()
            .unwrap(),
    );

    let mut args = run.args(&dir.path().join("ck2"), 3);
    args.extend(["--from-savepoint".into(), savepoint.display().to_string()]);
    let job = spawn(dir.path(), &args);
    let mut totals = first.join().unwrap();
    merge(&mut totals, second.join().unwrap());
    run.stop_and_check(dir.path(), job, &totals);
    let log = std::fs::read_to_string(dir.path().join("job.log")).unwrap();
    assert!(
        log.contains("reading a newly discovered partition"),
        "the added topic's partitions were not discovered"
    );
}

/// Where a restored run starts from.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// `weir stop --savepoint`, then `--from-savepoint`.
    Savepoint,
    /// The latest retained checkpoint of a killed run (its transactions still open).
    Retained,
}

/// A first run at `from` subtasks while words are written; then a run at `to` subtasks from a
/// savepoint or a killed run's retained checkpoint, in claim or no-claim mode, to the end of
/// the input: every count committed once, and the snapshot kept or deleted as the mode says.
fn restore_case(start: Start, claim: bool, from: u32, to: u32) {
    let run = Run::new(&format!("kafka-{start:?}-{claim}-{from}-{to}").to_lowercase());
    let dir = tempfile::tempdir().unwrap();
    let ck1 = dir.path().join("ck1");
    let writer = writer(
        run.input.clone(),
        4,
        17,
        words_to_write() / 12,
        Duration::from_millis(25),
    );
    let snapshot: PathBuf = match start {
        Start::Savepoint => {
            let savepoints = dir.path().join("savepoints");
            let mut args = run.args(&ck1, from);
            args.extend([
                "--rest-port".into(),
                "0".into(),
                "--savepoint-root".into(),
                savepoints.display().to_string(),
            ]);
            let mut job = spawn(dir.path(), &args);
            let url = rest_url(&mut job);
            wait_for_checkpoints(&ck1, JOB, &mut job, 3);
            let out = run_in(
                dir.path(),
                &[
                    "stop",
                    JOB,
                    "--savepoint",
                    &savepoints.display().to_string(),
                    "--rest",
                    &url,
                ],
            );
            assert!(out.status.success(), "weir stop: {}", text(&out.stderr));
            assert!(job.wait().unwrap().success(), "{}", log(dir.path()));
            PathBuf::from(
                text(&out.stdout)
                    .trim()
                    .rsplit("savepoint: ")
                    .next()
                    .unwrap(),
            )
        }
        Start::Retained => {
            let mut job = spawn(dir.path(), &run.args(&ck1, from));
            wait_for_checkpoints(&ck1, JOB, &mut job, 3);
            std::thread::sleep(Duration::from_millis(random_below(300)));
            job.kill().unwrap(); // SIGKILL, mid-transaction
            job.wait().unwrap();
            let latest = *completed_checkpoints(&ck1, JOB).last().unwrap();
            ck1.join(JOB).join(format!("chk-{}", latest.0))
        }
    };
    let mut args = run.args(&dir.path().join("ck2"), to);
    args.extend([
        "--from-savepoint".into(),
        snapshot.display().to_string(),
        "--claim-mode".into(),
        if claim { "claim" } else { "no-claim" }.into(),
    ]);
    let job = spawn(dir.path(), &args);
    let totals = writer.join().unwrap();
    run.stop_and_check(dir.path(), job, &totals);
    assert_eq!(
        snapshot.join("_metadata").exists(),
        !claim,
        "claim mode {claim}: the snapshot must be deleted exactly when it was claimed"
    );
}

#[test]
fn a_savepoint_restored_at_fewer_subtasks_with_claim_commits_every_count_once() {
    restore_case(Start::Savepoint, true, 3, 1);
}

#[test]
fn a_killed_runs_retained_checkpoint_restored_at_more_subtasks_with_claim_commits_every_count_once()
{
    restore_case(Start::Retained, true, 2, 3);
}

#[test]
fn a_killed_runs_retained_checkpoint_restored_at_fewer_subtasks_without_claim_commits_every_count_once(
) {
    restore_case(Start::Retained, false, 3, 1);
}
