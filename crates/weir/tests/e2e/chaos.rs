//! Exactly-once under failure: wordcount with injected subtask failures and with SIGKILLs of
//! the whole process, checked word by word — nothing lost, nothing duplicated.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::{
    assert_exactly_once, assert_windows_exactly_once, has_duplicates, random_below, restarts, text,
    weir, write_text_input,
};

/// Runs wordcount over `input` into `dir/output`, with `extra` arguments.
fn wordcount(dir: &Path, input: &Path, extra: &[&str], inject: Option<&str>) -> Output {
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args(["run", "wordcount", "--input"])
        .arg(input)
        .args([
            "--output",
            "output",
            "--checkpoint-dir",
            "checkpoints",
            "--parallelism",
            "2",
        ])
        .args(["--checkpoint-interval", "30ms"])
        .args(["-D", "restart-strategy.type=fixed-delay"])
        .args(["-D", "restart-strategy.fixed-delay.attempts=1000"])
        .args(["-D", "restart-strategy.fixed-delay.delay=0ms"])
        .args(extra);
    if let Some(spec) = inject {
        cmd.env("WEIR_INJECT_FAILURES", spec);
    }
    cmd.output().expect("run wordcount")
}

const INJECT: &str = "lines,words,counts,output:0.02";

#[test]
fn twenty_runs_with_injected_subtask_failures_commit_every_count_exactly_once() {
    with_injected_failures(20, 1000, &[], 1500, 20);
}

/// `runs` runs of wordcount with failures injected, with `extra` arguments (input: three files
/// of `lines` lines, seeds from `seed`): every count must be committed exactly once, and at
/// least `failures` failures must have struck.
fn with_injected_failures(runs: u64, seed: u64, extra: &[&str], lines: usize, failures: u64) {
    let mut total_restarts = 0;
    for run in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let input = write_text_input(dir.path(), seed + run, 3, lines);
        let out = wordcount(dir.path(), &input, extra, Some(INJECT));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "run {run}: {stdout}\n{}",
            text(&out.stderr)
        );
        total_restarts += restarts(&stdout);
        assert_exactly_once(&input, &dir.path().join("output"));
    }
    assert!(
        total_restarts >= failures,
        "only {total_restarts} injected failures over {runs} runs"
    );
}

#[test]
fn five_runs_killed_with_sigkill_and_resumed_commit_every_count_exactly_once() {
    killed_and_resumed(5, &[], LARGE_INPUT);
}

/// Unaligned checkpoints through the same failures: barriers overtake the queued records,
/// which are stored with each checkpoint and replayed after a restart or a `--resume`.
#[test]
fn with_unaligned_checkpoints_injected_failures_and_sigkills_commit_every_count_exactly_once() {
    const UNALIGNED: [&str; 2] = ["-D", "execution.checkpointing.unaligned.enabled=true"];
    with_injected_failures(5, 4000, &UNALIGNED, 4000, 5);
    killed_and_resumed(2, &UNALIGNED, LARGE_INPUT);
}

/// Checkpoints that start aligned and turn unaligned at each subtask not aligned 2 ms after
/// the trigger: within one checkpoint some subtasks align and others capture channel state.
#[test]
fn with_an_aligned_checkpoint_timeout_injected_failures_and_sigkills_commit_every_count_exactly_once(
) {
    const TIMEOUT: [&str; 4] = [
        "-D",
        "execution.checkpointing.unaligned.enabled=true",
        "-D",
        "execution.checkpointing.aligned-checkpoint-timeout=2ms",
    ];
    with_injected_failures(5, 5000, &TIMEOUT, 4000, 5);
    killed_and_resumed(2, &TIMEOUT, LARGE_INPUT);
}

/// Under back-pressure — every count held 20 µs (in practice the sleep's granularity, some
/// 60 µs) before the sink, so that every channel stays full — unaligned checkpoints store the
/// queued counts with each checkpoint: injected failures and SIGKILLs, exactly-once.
#[test]
fn under_back_pressure_with_unaligned_checkpoints_injected_failures_and_sigkills_commit_every_count_exactly_once(
) {
    const SLOW: [&str; 4] = [
        "-D",
        "execution.checkpointing.unaligned.enabled=true",
        "--slow-sink",
        "20us",
    ];
    // Input enough that the sources are still reading when checkpoints start (a smaller one
    // fits in the channels at once: the sources end, and the job's final checkpoint, always
    // aligned, drains the rest): 144,000 counts, a run takes about ten seconds, and the kills
    // land long before its end.
    with_injected_failures(2, 6000, &SLOW, 8000, 2);
    killed_and_resumed(2, &SLOW, (3, 8000));
}

/// Keyed event-time windows under back-pressure (each window result held 300 µs before the
/// sink) with unaligned checkpoints, killed with SIGKILL up to three times and resumed: every
/// window's result is committed exactly once, and it is the generator's.
#[test]
fn windows_under_back_pressure_with_unaligned_checkpoints_killed_and_resumed_commit_every_result_once(
) {
    const PER_SPLIT: u64 = 200_000;
    const WINDOW_MS: u64 = 2_000;
    let mut kills = 0;
    for run in 0..2u64 {
        let dir = tempfile::tempdir().unwrap();
        let seed = 7 + run;
        kills += kill_and_resume(run, (300, 1500), |resume| {
            let mut cmd = weir();
            cmd.current_dir(dir.path())
                .args(["run", "spend-windows", "--output", "output"])
                .args(["--checkpoint-dir", "checkpoints", "--parallelism", "2"])
                .args(["--checkpoint-interval", "50ms", "--no-rest"])
                .args(["--events", &PER_SPLIT.to_string(), "--users", "300"])
                .args(["--window", &WINDOW_MS.to_string()])
                .args(["--seed", &seed.to_string()])
                .args(["--rate", "100000", "--slow-sink", "300us"])
                .args(["-D", "execution.checkpointing.unaligned.enabled=true"])
                .args(resume);
            cmd
        });
        assert_windows_exactly_once(
            &dir.path().join("output"),
            &weir_connectors::EventGenerator::new(seed, 300),
            WINDOW_MS,
            2,
            PER_SPLIT,
        );
    }
    assert!(
        kills >= 2,
        "only {kills} kills: the runs are too short to kill"
    );
}

/// Runs the job `command` makes (given `--resume` after the first round) in rounds: each of
/// the first three is killed with SIGKILL at a random moment `kill_after` (a range of
/// milliseconds) after its start, if still running, and the next resumes; the last must end
/// well. Returns the number of kills.
fn kill_and_resume(
    run: u64,
    (from, span): (u64, u64),
    command: impl Fn(&[&str]) -> std::process::Command,
) -> u64 {
    let mut kills = 0;
    let mut resume: &[&str] = &[];
    for round in 0.. {
        assert!(round < 30, "run {run} never finished");
        let mut child = command(resume)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if round < 3 {
            std::thread::sleep(Duration::from_millis(from + random_below(span)));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
                resume = &["--resume"];
                continue;
            }
        }
        let status = child.wait().unwrap();
        assert!(status.success(), "run {run} round {round} failed");
        break;
    }
    kills
}

/// Files and lines per file of the input of the SIGKILL tests: large enough that a run has not
/// ended when the kills land.
const LARGE_INPUT: (usize, usize) = (20, 12_000);

/// `runs` runs of wordcount, each killed with SIGKILL up to three times at random moments and
/// resumed, with `extra` arguments; every count must be committed exactly once.
fn killed_and_resumed(runs: u64, extra: &[&str], (files, lines): (usize, usize)) {
    let mut kills = 0;
    for run in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let input = write_text_input(dir.path(), 2000 + run, files, lines);
        kills += kill_and_resume(run, (100, 600), |resume| {
            let mut cmd = weir();
            cmd.current_dir(dir.path())
                .args(["run", "wordcount", "--input"])
                .arg(&input)
                .args(["--output", "output", "--checkpoint-dir", "checkpoints"])
                .args(["--parallelism", "2", "--checkpoint-interval", "50ms"])
                .args(extra)
                .args(resume);
            cmd
        });
        assert_exactly_once(&input, &dir.path().join("output"));
    }
    assert!(
        kills >= runs,
        "only {kills} kills over {runs} runs: the runs are too short to kill"
    );
}

#[test]
fn the_at_least_once_sink_under_the_same_failures_commits_duplicates() {
    // The same job and failures, with the sink that does not roll back: the exactly-once check
    // above would fail on it, which is what makes that check meaningful.
    // A run shows duplicates only if a failure strikes after the sink wrote past the last
    // completed checkpoint; on a loaded machine fewer runs do, so take up to thirty.
    for run in 0..30 {
        let dir = tempfile::tempdir().unwrap();
        let input = write_text_input(dir.path(), 3000 + run, 3, 1500);
        let out = wordcount(
            dir.path(),
            &input,
            &["--sink-mode", "at-least-once"],
            Some(INJECT),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        if restarts(&stdout) > 0 && has_duplicates(&dir.path().join("output")) {
            return;
        }
    }
    panic!("thirty runs with injected failures never committed a duplicate in at-least-once mode");
}

#[test]
fn bad_input_to_wordcount_is_a_clear_error_and_nothing_committed_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = weir();
        cmd.current_dir(dir.path())
            .args(["run", "wordcount", "--checkpoint-dir", "checkpoints"]);
        cmd.args(args).output().unwrap()
    };
    let missing = run(&["--input", "no-such-input", "--output", "out"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("no-such-input"),
        "{}",
        text(&missing.stderr)
    );

    std::fs::write(dir.path().join("a-file"), "x").unwrap();
    std::fs::write(dir.path().join("ok.txt"), "a b\n").unwrap();
    let file_output = run(&["--input", "ok.txt", "--output", "a-file"]);
    assert_eq!(file_output.status.code(), Some(2));
    assert!(
        text(&file_output.stderr).contains("not a directory"),
        "{}",
        text(&file_output.stderr)
    );

    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::write(
        dir.path().join("in/bad.txt"),
        b"good words\nbad \xff byte\n",
    )
    .unwrap();
    let bad = run(&["--input", "in", "--output", "out", "--fresh"]);
    let stderr = text(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.txt") && stderr.contains("invalid UTF-8 at byte offset 15"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let skipped = run(&[
        "--input",
        "in",
        "--output",
        "out2",
        "--fresh",
        "--skip-invalid-utf8",
    ]);
    assert!(skipped.status.success(), "{}", text(&skipped.stderr));
    assert!(
        text(&skipped.stdout).contains("skipped 1 lines"),
        "{}",
        text(&skipped.stdout)
    );
    let mut committed = crate::common::committed_counts(&dir.path().join("out2"));
    assert_eq!(committed.remove("good"), Some(vec![1]));
    assert_eq!(committed.remove("words"), Some(vec![1]));
    assert!(committed.is_empty(), "{committed:?}");
}
