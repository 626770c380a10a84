//! Every restore path is exactly-once: the restore matrix.
//!
//! A case is a job × a start point × a claim mode × a parallelism change. The job runs at the
//! first parallelism until it is killed (or stopped with a savepoint); the restored run starts
//! from that point at the second parallelism and is killed with SIGKILL at a random moment;
//! `--resume` then runs it to the end. After each case the committed output is exactly-once,
//! every retained checkpoint verifies, and in no-claim mode the snapshot it started from is
//! untouched and can be deleted without breaking anything; in claim mode it is gone.
//!
//! `every_restore_path_is_exactly_once` runs, for each job and start point, one case with a
//! claim mode and parallelism change drawn at random (a printed seed; set
//! `WEIR_RESTORE_MATRIX_SEED` to draw the same again). `WEIR_RESTORE_MATRIX=full` runs all of
//! them (about 100, several minutes).
//!
//! Operator chaining is a dimension too: each case runs its first and its restored runs with
//! chaining on or off (`pipeline.operator-chaining.enabled`), so that state and in-flight data
//! taken with one restore into the other.
//!
//! With `WEIR_EXECUTION_CHECKPOINTING_UNALIGNED_ENABLED=true` (`scripts/test.sh` runs the
//! matrix so once) every job takes unaligned checkpoints: a start point that holds in-flight
//! data must then be refused at another parallelism, with the error that says to start from a
//! savepoint, and the case goes on at its first parallelism.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir_connectors::EventGenerator;

use crate::common::{
    assert_exactly_once, assert_windows_exactly_once, completed_checkpoints, run_in, text, weir,
    write_text_input,
};

/// Where a restored run starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// `--resume` from the latest checkpoint of a killed run, in its own directory.
    Resume,
    /// `--from-savepoint` of a savepoint taken by `weir stop --savepoint`.
    Savepoint,
    /// The same with `--type native`: with RocksDB, the databases' table files.
    NativeSavepoint,
    /// `--from-savepoint ck/<job>/chk-<id>`: the latest retained checkpoint of a killed run,
    /// incremental (with shared files) or full.
    RetainedIncremental,
    RetainedFull,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// File source, keyed running count (in state with a time to live), two-phase-commit file
    /// sink.
    Wordcount,
    /// Generator with watermarks, keyed tumbling event-time windows (timers), file sink.
    SpendWindows,
}

#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub job: Job,
    pub start: Start,
    pub claim: bool,
    pub from: u32,
    pub to: u32,
    /// Operator chaining in the first run and in the restored runs.
    pub chaining: [bool; 2],
}

impl Start {
    fn is_savepoint(self) -> bool {
        matches!(self, Start::Savepoint | Start::NativeSavepoint)
    }
}

const STARTS: [Start; 5] = [
    Start::Resume,
    Start::Savepoint,
    Start::NativeSavepoint,
    Start::RetainedIncremental,
    Start::RetainedFull,
];
/// Chaining in the first and the restored runs, taken in turn by the parallelism changes.
const CHAININGS: [[bool; 2]; 4] = [[true, true], [true, false], [false, true], [false, false]];
const RESCALES: [(u32, u32); 6] = [(2, 2), (1, 2), (2, 3), (3, 2), (2, 8), (8, 1)];

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for job in [Job::Wordcount, Job::SpendWindows] {
        for start in STARTS {
            // A resumed job continues in its own directory: there is nothing to claim.
            let claims: &[bool] = if start == Start::Resume {
                &[false]
            } else {
                &[false, true]
            };
            for &claim in claims {
                for (i, (from, to)) in RESCALES.into_iter().enumerate() {
                    cases.push(Case {
                        job,
                        start,
                        claim,
                        from,
                        to,
                        chaining: CHAININGS[(i + usize::from(claim)) % CHAININGS.len()],
                    });
                }
            }
        }
    }
    cases
}

/// A small deterministic generator (xorshift64*), so a seed reproduces a run's choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n.max(1)
    }
}

const WORDCOUNT_FILES: usize = 32;
const WORDCOUNT_LINES: usize = 20_000;
/// Purchases over all source splits of spend-windows, whatever the first parallelism.
const PURCHASES: u64 = 1_200_000;
/// Purchases per second over all source subtasks.
const PURCHASES_PER_SECOND: u64 = 300_000;
const USERS: &str = "300";
const WINDOW_MS: u64 = 2_000;
const SEED: &str = "42";

/// One case's directories and inputs.
pub struct Run {
    pub case: Case,
    pub dir: tempfile::TempDir,
    input: Option<PathBuf>,
}

impl Run {
    pub fn new(case: Case) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let input = (case.job == Job::Wordcount)
            .then(|| write_text_input(dir.path(), 7, WORDCOUNT_FILES, WORDCOUNT_LINES));
        Run { case, dir, input }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn job_name(&self) -> &'static str {
        match self.case.job {
            Job::Wordcount => "wordcount",
            Job::SpendWindows => "spend-windows",
        }
    }

    /// The job's flags at parallelism `p` with checkpoints in `ckpt`, for the first run or a
    /// restored one.
    fn args(&self, first: bool, p: u32, ckpt: &Path, extra: &[String]) -> Vec<String> {
        let mut args: Vec<String> = vec!["run".into(), self.job_name().into()];
        let chaining = self.case.chaining[usize::from(!first)];
        args.push("-D".into());
        args.push(format!("pipeline.operator-chaining.enabled={chaining}"));
        match self.case.job {
            Job::Wordcount => {
                args.push("--input".into());
                args.push(self.input.as_ref().unwrap().display().to_string());
                // The counts in state with a time to live (a day: none expires in a case, so
                // the output is checked as without), so that its tables take every path too.
                args.push("--state-ttl".into());
                args.push("1d".into());
            }
            Job::SpendWindows => {
                let per_split = PURCHASES / self.case.from as u64;
                for (flag, value) in [
                    ("--events", per_split.to_string()),
                    ("--users", USERS.to_string()),
                    ("--window", WINDOW_MS.to_string()),
                    ("--seed", SEED.to_string()),
                    // About the same pace at any parallelism, so that every run lasts long
                    // enough for a kill to land before the end.
                    ("--rate", (PURCHASES_PER_SECOND / p as u64).to_string()),
                ] {
                    args.push(flag.into());
                    args.push(value);
                }
            }
        }
        for (flag, value) in [
            ("--output", self.path("output").display().to_string()),
            ("--checkpoint-dir", ckpt.display().to_string()),
            ("--parallelism", p.to_string()),
            ("--checkpoint-interval", "150ms".to_string()),
        ] {
            args.push(flag.into());
            args.push(value);
        }
        if !extra.iter().any(|a| a == "--rest-port") {
            args.push("--no-rest".into());
        }
        args.extend(extra.iter().cloned());
        args
    }

    fn spawn(&self, args: &[String]) -> Spawned {
        let mut child = weir()
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = child.stderr.take().unwrap();
        let (etx, errors) = mpsc::channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
            }
            let _ = etx.send(all);
        });
        Spawned {
            child,
            lines,
            errors,
        }
    }

    /// Checks the committed output against the input: every count (wordcount) or window
    /// (spend-windows) exactly once.
    pub fn assert_output_exactly_once(&self) {
        // Every in-progress or pending file of a killed run was committed or removed.
        let leftovers: Vec<String> = std::fs::read_dir(self.path("output"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with('.'))
            .collect();
        assert!(
            leftovers.is_empty(),
            "uncommitted files left in the output directory: {leftovers:?}"
        );
        match self.case.job {
            Job::Wordcount => {
                assert_exactly_once(self.input.as_ref().unwrap(), &self.path("output"))
            }
            Job::SpendWindows => assert_windows_exactly_once(
                &self.path("output"),
                &EventGenerator::new(SEED.parse().unwrap(), USERS.parse().unwrap()),
                WINDOW_MS,
                self.case.from,
                PURCHASES / self.case.from as u64,
            ),
        }
    }
}

pub struct Spawned {
    child: Child,
    lines: mpsc::Receiver<String>,
    errors: mpsc::Receiver<String>,
}

impl Spawned {
    fn kill(mut self) {
        let finished = self.child.try_wait().unwrap();
        let _ = self.child.kill(); // SIGKILL
        let status = self.child.wait().unwrap();
        assert!(
            finished.is_none(),
            "the run ended ({status}) before it could be killed: the input is too small\n{}",
            self.stderr()
        );
    }

    /// The run must end at once with the usage error that says to start from a savepoint.
    fn refused(mut self) {
        let status = self.child.wait().unwrap();
        let stderr = self.stderr();
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("take a savepoint"), "{stderr}");
    }

    fn finish(mut self) -> String {
        let status = self.child.wait().unwrap();
        let stdout: Vec<String> = self.lines.try_iter().collect();
        let stderr = self.stderr();
        assert!(
            status.success(),
            "run failed ({status})\nstdout:\n{}\nstderr:\n{stderr}",
            stdout.join("\n")
        );
        stdout.join("\n")
    }

    fn stderr(&mut self) -> String {
        self.errors
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }

    /// The first stdout line that starts with `prefix`, without it.
    fn line_after(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => panic!("no line starting with {prefix:?}\n{}", self.stderr()),
            }
        }
    }
}

/// Waits until `ckpt` holds `n` completed checkpoints of `job`.
fn wait_for_checkpoints(ckpt: &Path, job: &str, n: usize, spawned: &mut Spawned) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while completed_checkpoints(ckpt, job).len() < n {
        if let Some(status) = spawned.child.try_wait().unwrap() {
            panic!(
                "the run ended ({status}) before {n} checkpoints completed\n{}",
                spawned.stderr()
            );
        }
        assert!(Instant::now() < deadline, "no {n} checkpoints in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file under `dir` with a checksum of its bytes.
fn checksums(dir: &Path) -> BTreeMap<PathBuf, u32> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), crc32c::crc32c(&std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn assert_verifies(dir: &Path, ckpt: &Path, what: &str) {
    let out = run_in(dir, &["checkpoints", "verify", &ckpt.display().to_string()]);
    assert!(
        out.status.success(),
        "weir checkpoints verify {what}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The first run, at the case's first parallelism, up to the start point; returns the snapshot
/// the restored run starts from (`None` for `--resume`).
pub fn first_run(run: &Run, rng: &mut Rng) -> Option<PathBuf> {
    let case = run.case;
    let ck1 = run.path("ck1");
    let job = run.job_name();
    match case.start {
        Start::Savepoint | Start::NativeSavepoint => {
            let extra = vec![
                "--rest-port".to_string(),
                "0".to_string(),
                "--savepoint-root".to_string(),
                run.path("savepoints").display().to_string(),
            ];
            let mut spawned = run.spawn(&run.args(true, case.from, &ck1, &extra));
            let url = spawned.line_after("REST API and dashboard:");
            wait_for_checkpoints(&ck1, job, 1, &mut spawned);
            std::thread::sleep(Duration::from_millis(rng.below(100)));
            let format = if case.start == Start::NativeSavepoint {
                "native"
            } else {
                "canonical"
            };
            let stop = run_in(
                run.dir.path(),
                &[
                    "stop",
                    job,
                    "--savepoint",
                    &run.path("savepoints").display().to_string(),
                    "--type",
                    format,
                    "--rest",
                    &url,
                ],
            );
            if !stop.status.success() {
                let _ = spawned.child.kill();
                panic!(
                    "weir stop: {}\njob:\n{}",
                    text(&stop.stderr),
                    spawned.stderr()
                );
            }
            let location = text(&stop.stdout)
                .trim()
                .rsplit("savepoint: ")
                .next()
                .unwrap()
                .to_string();
            let status = spawned.child.wait().unwrap();
            assert!(status.success(), "{status}: {}", spawned.stderr());
            Some(PathBuf::from(location))
        }
        Start::Resume | Start::RetainedIncremental | Start::RetainedFull => {
            let mut extra = Vec::new();
            if case.start == Start::RetainedFull {
                extra.push("-D".to_string());
                extra.push("execution.checkpointing.incremental=false".to_string());
            }
            let mut spawned = run.spawn(&run.args(true, case.from, &ck1, &extra));
            wait_for_checkpoints(&ck1, job, 2 + rng.below(2) as usize, &mut spawned);
            std::thread::sleep(Duration::from_millis(rng.below(150)));
            spawned.kill();
            if case.start == Start::Resume {
                return None;
            }
            let latest = *completed_checkpoints(&ck1, job).last().unwrap();
            Some(ck1.join(job).join(format!("chk-{}", latest.0)))
        }
    }
}

/// Whether the checkpoint a case restores holds channel state (in-flight data of an unaligned
/// checkpoint, with `WEIR_EXECUTION_CHECKPOINTING_UNALIGNED_ENABLED=true`): `snapshot`, or the
/// newest checkpoint in `ck1` for `--resume`.
fn holds_channel_state(ck1: &Path, job: &str, snapshot: Option<&Path>) -> bool {
    let (root, id) = match snapshot {
        Some(path) => {
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse().ok())
            else {
                return false; // a savepoint: always aligned
            };
            (ck1.to_path_buf(), weir_core::CheckpointId(id))
        }
        None => match completed_checkpoints(ck1, job).last() {
            Some(id) => (ck1.to_path_buf(), *id),
            None => return false,
        },
    };
    let storage = weir_storage::CheckpointStorage::open(&root, job).unwrap();
    storage
        .read_metadata(id)
        .unwrap()
        .checkpoint
        .subtask_states
        .values()
        .any(|s| {
            s.handles
                .iter()
                .any(|h| h.kind == weir_core::HandleKind::Channels)
        })
}

/// Runs one case end to end and checks everything the module documentation promises.
pub fn run_case(case: Case, rng: &mut Rng) {
    let run = Run::new(case);
    let snapshot = first_run(&run, rng);
    let ck1 = run.path("ck1");
    // Where the restored run keeps its checkpoints, and the flags that restore it.
    let (ckpt, restore): (PathBuf, Vec<String>) = match &snapshot {
        None => (ck1.clone(), vec!["--resume".into()]),
        Some(snapshot) => (
            run.path("ck2"),
            vec![
                "--from-savepoint".into(),
                snapshot.display().to_string(),
                "--claim-mode".into(),
                if case.claim { "claim" } else { "no-claim" }.into(),
            ],
        ),
    };
    let before = snapshot.as_ref().map(|_| {
        checksums(&run.path(if case.start.is_savepoint() {
            "savepoints"
        } else {
            "ck1"
        }))
    });

    // In-flight data restores only at its own parallelism: at another, the start is refused
    // with what to do instead, and the job is restored at its own.
    let mut to = case.to;
    if to != case.from && holds_channel_state(&ck1, run.job_name(), snapshot.as_deref()) {
        run.spawn(&run.args(false, to, &ckpt, &restore)).refused();
        to = case.from;
    }

    // The restored run, killed at a random moment (possibly before its first checkpoint).
    let spawned = run.spawn(&run.args(false, to, &ckpt, &restore));
    std::thread::sleep(Duration::from_millis(200 + rng.below(600)));
    spawned.kill();

    // `--resume` to the end (with the start point again, used only if no checkpoint completed).
    let mut resume = restore.clone();
    if snapshot.is_some() {
        resume.push("--resume".into());
    }
    run.spawn(&run.args(false, to, &ckpt, &resume)).finish();

    run.assert_output_exactly_once();
    assert_verifies(run.dir.path(), &ckpt, "of the restored job");
    let Some(snapshot) = snapshot else {
        return;
    };
    let snapshot_root = run.path(if case.start.is_savepoint() {
        "savepoints"
    } else {
        "ck1"
    });
    if case.claim {
        assert!(
            !snapshot.exists(),
            "claim mode: the claimed snapshot {} outlived the job's checkpoints",
            snapshot.display()
        );
    } else {
        assert_eq!(
            checksums(&snapshot_root),
            before.unwrap(),
            "no-claim mode: the snapshot's files changed"
        );
        std::fs::remove_dir_all(&snapshot_root).unwrap();
        assert_verifies(run.dir.path(), &ckpt, "after deleting the snapshot");
    }
}

fn seed() -> u64 {
    std::env::var("WEIR_RESTORE_MATRIX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

#[test]
fn every_restore_path_is_exactly_once() {
    let seed = seed();
    let full = std::env::var("WEIR_RESTORE_MATRIX").is_ok_and(|v| v == "full");
    println!("restore matrix: seed {seed} (WEIR_RESTORE_MATRIX_SEED={seed} draws the same)");
    let mut rng = Rng::new(seed);
    let mut cases = all_cases();
    if !full {
        // The reduced form: for each job and start point, one claim mode and parallelism
        // change drawn at random.
        let mut drawn = Vec::new();
        for job in [Job::Wordcount, Job::SpendWindows] {
            for start in STARTS {
                let of: Vec<Case> = cases
                    .iter()
                    .copied()
                    .filter(|c| c.job == job && c.start == start)
                    .collect();
                drawn.push(of[rng.below(of.len() as u64) as usize]);
            }
        }
        cases = drawn;
    }
    for case in cases {
        let started = Instant::now();
        println!("restore matrix: {case:?}");
        run_case(case, &mut rng);
        println!(
            "restore matrix: {case:?} passed in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn a_wordcount_savepoint_restored_at_more_subtasks_reads_no_input_twice() {
    let case = Case {
        job: Job::Wordcount,
        start: Start::Savepoint,
        claim: false,
        from: 2,
        to: 3,
        chaining: [true, false],
    };
    run_case(case, &mut Rng::new(seed()));
}

#[test]
fn a_job_started_from_a_retained_incremental_checkpoint_restores_after_its_directory_is_gone() {
    let case = Case {
        job: Job::Wordcount,
        start: Start::RetainedIncremental,
        claim: false,
        from: 2,
        to: 2,
        chaining: [false, true],
    };
    run_case(case, &mut Rng::new(seed()));
}
