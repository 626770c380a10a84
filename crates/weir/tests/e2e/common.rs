//! Shared helpers: running the binary, reading a job's checkpoints and final keyed state.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use weir_core::{CheckpointId, KeyGroupRange, OperatorId};
use weir_state::{KeyedStateSet, ValueState, DEFAULT_MAX_PARALLELISM};
use weir_storage::CheckpointStorage;

pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("RUST_LOG");
    // A secret in the caller's environment would change what the cluster tests check.
    c.env_remove("WEIR_CLUSTER_SECRET");
    c
}

/// Runs `weir` with `args` in `dir` and waits for it.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    weir()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run weir")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Ids of the completed checkpoints (those with `_metadata`) of job `job`, ascending.
pub fn completed_checkpoints(checkpoint_dir: &Path, job: &str) -> Vec<CheckpointId> {
    CheckpointStorage::open(checkpoint_dir, job)
        .expect("open storage")
        .list_completed()
        .expect("list")
}

/// The demo's keyed state (`spend` per user) in the job's latest intact checkpoint.
pub fn final_spend(checkpoint_dir: &Path) -> BTreeMap<u64, u64> {
    let storage = CheckpointStorage::open(checkpoint_dir, "demo").expect("open storage");
    let latest = storage
        .find_latest()
        .expect("find")
        .metadata
        .expect("a checkpoint");
    let operator = OperatorId::from_uid("spend-per-user");
    let all = KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM);
    let reader = weir_runtime::restore::read_keyed_state(&storage, &latest, operator, all)
        .expect("read keyed state")
        .expect("keyed state");
    let mut spend = ValueState::<u64, u64>::new("spend");
    spend.init(
        DEFAULT_MAX_PARALLELISM,
        KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM),
    );
    spend.restore(&reader).expect("restore");
    spend.iter().map(|(k, v)| (*k, *v)).collect()
}

/// Parses the demo's output lines (`user<TAB>total`) from every part file.
pub fn milestones(output_dir: &Path) -> Vec<(u64, u64)> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(output_dir).expect("output dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read part");
        for line in text.lines() {
            let (user, total) = line.split_once('\t').expect("user<TAB>total");
            lines.push((user.parse().expect("user"), total.parse().expect("total")));
        }
    }
    lines
}

/// A pseudo-random number from the clock: test runs differ, no extra dependency.
pub fn random_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos() as u64;
    (nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % n.max(1)
}

/// Writes `files` text files of `lines` lines of 6 words each (from a vocabulary of 200) under
/// `dir/input`, deterministically from `seed`; returns the input directory.
pub fn write_text_input(dir: &Path, seed: u64, files: usize, lines: usize) -> std::path::PathBuf {
    let input = dir.join("input");
    std::fs::create_dir_all(&input).unwrap();
    let mut x = seed | 1;
    for f in 0..files {
        let mut text = String::new();
        push_random_lines(&mut x, lines, &mut text, |_| {});
        std::fs::write(input.join(format!("part-{f:03}.txt")), text).unwrap();
    }
    input
}

/// Appends `lines` lines of 6 words each (from a vocabulary of 200) to `text`, drawn from the
/// xorshift state `x`; `word` sees every word written.
pub fn push_random_lines(x: &mut u64, lines: usize, text: &mut String, mut word: impl FnMut(&str)) {
    for _ in 0..lines {
        for w in 0..6 {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            if w > 0 {
                text.push(' ');
            }
            let start = text.len();
            text.push('w');
            text.push_str(&(*x % 200).to_string());
            word(&text[start..]);
        }
        text.push('\n');
    }
}

/// Occurrences of every word in the input files.
pub fn word_totals(input: &Path) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for entry in std::fs::read_dir(input).unwrap() {
        for word in std::fs::read_to_string(entry.unwrap().path())
            .unwrap()
            .split_whitespace()
        {
            *totals.entry(word.to_string()).or_insert(0) += 1;
        }
    }
    totals
}

/// The committed `word<TAB>count` lines of wordcount's output (hidden files excluded).
pub fn committed_counts(output: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for entry in std::fs::read_dir(output).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let (word, count) = line.split_once('\t').expect("word<TAB>count");
            counts
                .entry(word.to_string())
                .or_default()
                .push(count.parse().expect("count"));
        }
    }
    for v in counts.values_mut() {
        v.sort();
    }
    counts
}

/// Exactly once: for every word, the committed counts are 1..=n, each once.
pub fn assert_exactly_once(input: &Path, output: &Path) {
    assert_counts_exactly_once(&word_totals(input), output);
}

/// Exactly once against known totals: for every word, the committed counts are 1..=n.
pub fn assert_counts_exactly_once(totals: &BTreeMap<String, u64>, output: &Path) {
    let mut counts = committed_counts(output);
    for (word, n) in totals {
        let got = counts.remove(word).unwrap_or_default();
        let want: Vec<u64> = (1..=*n).collect();
        if got != want {
            let lost = want.iter().filter(|c| !got.contains(c)).count();
            let extra = got.len() as i64 - (want.len() - lost) as i64;
            panic!("word {word}: {lost} counts lost, {extra} duplicated (expected 1..={n})");
        }
    }
    assert!(
        counts.is_empty(),
        "counts for words not in the input: {:?}",
        counts.keys()
    );
}

/// Whether some word has a count committed twice.
pub fn has_duplicates(output: &Path) -> bool {
    committed_counts(output)
        .values()
        .any(|v| v.windows(2).any(|w| w[0] == w[1]))
}

/// The number in "N restarts" of wordcount's summary.
pub fn restarts(stdout: &str) -> u64 {
    stdout
        .split(" restarts")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no restart count in {stdout}"))
}

/// Waits until job `job` completed at least `at_least` checkpoints in `checkpoints`; a job that
/// ends first, or 60 s without them, fails the test (the job killed, so that it does not
/// outlive it).
pub fn wait_for_checkpoints(
    checkpoints: &Path,
    job_name: &str,
    job: &mut std::process::Child,
    at_least: usize,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while completed_checkpoints(checkpoints, job_name).len() < at_least {
        if let Some(status) = job.try_wait().unwrap() {
            panic!("the job ended ({status})");
        }
        if std::time::Instant::now() >= deadline {
            job.kill().unwrap();
            job.wait().unwrap();
            panic!("no checkpoint completed in 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Reads a job's stdout until it prints its REST address, then keeps draining it in the
/// background so the job never blocks on a full pipe.
pub fn rest_url(job: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let stdout = job.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.split("REST API and dashboard:").nth(1) {
            std::thread::spawn(move || for _ in lines {});
            return url.trim().to_string();
        }
    }
    panic!("the job printed no REST address");
}

/// Checks spend-windows' committed output (windows of `window_ms`) against its `generator`,
/// which made `per_split` purchases in each of `splits` splits: one line per user and window,
/// with the window's spend and purchases.
pub fn assert_windows_exactly_once(
    output: &Path,
    generator: &weir_connectors::EventGenerator,
    window_ms: u64,
    splits: u32,
    per_split: u64,
) {
    let mut expected: BTreeMap<(u64, u64), (u64, u64)> = BTreeMap::new();
    for split in 0..splits {
        for n in 0..per_split {
            let e = generator.event(split, n);
            let window = n / window_ms * window_ms;
            let slot = expected.entry((e.user, window)).or_default();
            slot.0 += e.amount;
            slot.1 += 1;
        }
    }
    let mut got: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for entry in std::fs::read_dir(output).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let f: Vec<u64> = line.split('\t').map(|v| v.parse().unwrap()).collect();
            got.entry((f[0], f[1])).or_default().push((f[2], f[3]));
        }
    }
    let mut lost = 0;
    let mut wrong = Vec::new();
    for (key, want) in &expected {
        match got.remove(key) {
            None => lost += 1,
            Some(v) if v == [*want] => {}
            Some(v) => wrong.push(format!(
                "user {} window {}: {v:?}, expected {want:?}",
                key.0, key.1
            )),
        }
    }
    assert!(
        lost == 0 && wrong.is_empty() && got.is_empty(),
        "{lost} windows lost, {} wrong or duplicated (first: {:?}), {} unexpected",
        wrong.len(),
        wrong.first(),
        got.len()
    );
}
