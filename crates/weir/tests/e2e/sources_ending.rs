//! A job whose sources end at different times: wordcount over a watched directory (a source
//! that never ends) and a side input read once (a short one). Checkpoints keep completing after
//! the side input ended, and a SIGKILL after that point resumes exactly-once: the side input is
//! neither read again nor lost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    committed_counts, completed_checkpoints, push_random_lines, random_below, weir,
};

fn start(dir: &Path, resume: bool) -> Child {
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args([
            "run",
            "wordcount",
            "--input",
            "input",
            "--side-input",
            "side.txt",
        ])
        .args([
            "--output",
            "output",
            "--checkpoint-dir",
            "ck",
            "--parallelism",
            "2",
        ])
        .args([
            "--checkpoint-interval",
            "100ms",
            "--monitor-interval",
            "50ms",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("job-{resume}.log"))).unwrap());
    if resume {
        cmd.arg("--resume");
    }
    cmd.spawn().unwrap()
}

/// Writes a file of `lines` random lines into the watched directory whole (hidden name, then
/// rename), adding its words to `totals`.
fn add_input(
    input: &Path,
    name: &str,
    seed: u64,
    lines: usize,
    totals: &mut BTreeMap<String, u64>,
) {
    let mut text = String::new();
    let mut x = seed | 1;
    push_random_lines(&mut x, lines, &mut text, |w| {
        *totals.entry(w.to_string()).or_insert(0) += 1
    });
    let hidden = input.join(format!(".{name}"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(hidden, input.join(name)).unwrap();
}

/// Waits until `done` holds, failing the test (the job killed) after 60 s or if the job ends.
fn wait_until(job: &mut Child, dir: &Path, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if let Some(status) = job.try_wait().unwrap() {
            let log = |run: &str| std::fs::read_to_string(dir.join(run)).unwrap_or_default();
            panic!(
                "the job ended ({status}) before {what}\n{}{}",
                log("job-false.log"),
                log("job-true.log")
            );
        }
        if Instant::now() >= deadline {
            job.kill().unwrap();
            job.wait().unwrap();
            panic!("60 s passed without {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether every word of `totals` has its final count committed.
fn all_committed(output: &Path, totals: &BTreeMap<String, u64>) -> bool {
    let counts = committed_counts(output);
    totals
        .iter()
        .all(|(w, n)| counts.get(w).is_some_and(|c| c.last() == Some(n)))
}

#[test]
fn checkpoints_go_on_after_a_side_input_ends_and_a_kill_after_it_resumes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let input: PathBuf = dir.path().join("input");
    let output = dir.path().join("output");
    let ckpt = dir.path().join("ck");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&output).unwrap();
    // The side input's words ("s…") are its own, so that its end is seen in the output.
    let side: String = (0..2000)
        .map(|i| format!("s{} s{}\n", i % 37, i % 11))
        .collect();
    std::fs::write(dir.path().join("side.txt"), &side).unwrap();
    let side_totals = word_totals_of(&side);
    let mut totals = side_totals.clone();
    add_input(&input, "part-000.txt", 1, 2000, &mut totals);

    let mut job = start(dir.path(), false);
    wait_until(&mut job, dir.path(), "the side input was committed", || {
        output.read_dir().unwrap().next().is_some() && all_committed(&output, &side_totals)
    });
    // The side input's source has ended: checkpoints still complete, with the main input
    // still flowing.
    let newest = || {
        completed_checkpoints(&ckpt, "wordcount")
            .last()
            .map_or(0, |id| id.0)
    };
    let after_side = newest();
    add_input(&input, "part-001.txt", 2, 300_000, &mut totals);
    wait_until(
        &mut job,
        dir.path(),
        "checkpoints after the side input ended",
        || newest() >= after_side + 5,
    );
    std::thread::sleep(Duration::from_millis(random_below(300)));
    job.kill().unwrap(); // SIGKILL
    job.wait().unwrap();
    assert!(
        !all_committed(&output, &totals),
        "the job had committed all its input before the kill: make the input larger"
    );

    let mut job = start(dir.path(), true);
    add_input(&input, "part-002.txt", 3, 2000, &mut totals);
    wait_until(&mut job, dir.path(), "every count was committed", || {
        all_committed(&output, &totals)
    });
    job.kill().unwrap();
    job.wait().unwrap();
    let mut counts = committed_counts(&output);
    for (word, n) in &totals {
        let got = counts.remove(word).unwrap_or_default();
        let want: Vec<u64> = (1..=*n).collect();
        assert_eq!(got, want, "counts of {word}: each of 1..={n} exactly once");
    }
    assert!(
        counts.is_empty(),
        "counts of words not in the input: {:?}",
        counts.keys()
    );
}

fn word_totals_of(text: &str) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for word in text.split_whitespace() {
        *totals.entry(word.to_string()).or_insert(0) += 1;
    }
    totals
}
