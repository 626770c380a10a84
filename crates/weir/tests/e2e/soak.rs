//! Soak: wordcount over a directory that new files keep arriving in (two a second; files older
//! than three minutes are removed, as a retention policy would), with a subtask failure
//! injected about every 10 s and the whole process killed with SIGKILL (and resumed) every few
//! minutes (`WEIR_SOAK_KILLS=off`: never, so that one process lives through the whole run),
//! for `WEIR_SOAK_MINUTES` (30 by default). Not part of the normal test run:
//!
//! ```text
//! cargo test --release -p weir --test e2e soak -- --ignored --nocapture
//! ```
//!
//! Every second it samples the running process's resident memory and open file descriptors
//! and the files under the checkpoint directory; it prints them every minute and checks at the
//! end that none of them grew: the last third of the run stays within the bounds of its first
//! third. Then it stops the job with a savepoint, reads the rest of the input from that
//! savepoint, and checks that the committed output is exactly once.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use super::common::{
    assert_counts_exactly_once, push_random_lines, random_below, run_in, text, weir,
};

/// Lines per input file, six words each from a vocabulary of 200.
const LINES_PER_FILE: usize = 1_000;
/// How often a new input file appears: 12,000 words a second, 21.6 M in 30 minutes.
const FILE_EVERY: Duration = Duration::from_millis(500);
/// Input files kept in the directory: three minutes' worth.
const FILES_KEPT: u64 = 360;

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    rss_kib: u64,
    fds: u64,
    checkpoint_files: u64,
    checkpoint_bytes: u64,
}

struct Job {
    child: Child,
    rest: String,
}

/// `weir run wordcount` over `input/` into `output/`, at parallelism 2, checkpointing into
/// `checkpoint_dir`, followed by `rest`.
fn wordcount(checkpoint_dir: &str, rest: &[&str]) -> Vec<String> {
    [
        "run",
        "wordcount",
        "--input",
        "input",
        "--output",
        "output",
        "--checkpoint-dir",
        checkpoint_dir,
        "--parallelism",
        "2",
    ]
    .iter()
    .chain(rest)
    .map(|s| s.to_string())
    .collect()
}

/// Starts the job (the `run`-th start; its log goes to `job-<run>.log` in `dir`).
fn start(dir: &Path, resume: bool, run: u32) -> Job {
    let mut args = wordcount(
        "ck",
        &[
            "--checkpoint-interval",
            "1s",
            "--monitor-interval",
            "200ms",
            "--rest-port",
            "0",
            "--savepoint-root",
            "savepoints",
            "-D",
            "restart-strategy.type=fixed-delay",
            "-D",
            "restart-strategy.fixed-delay.attempts=1000000",
            "-D",
            "restart-strategy.fixed-delay.delay=100ms",
        ],
    );
    if resume {
        args.push("--resume".into());
    }
    let mut child = weir()
        .args(&args)
        .current_dir(dir)
        .env("WEIR_INJECT_FAILURES", "counts:10s")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("job-{run}.log"))).unwrap())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let rest = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the job printed no REST address");
        if let Some(url) = line.strip_prefix("REST API and dashboard:") {
            break url.trim().to_string();
        }
    };
    // Keep draining stdout so that the job never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Job { child, rest }
}

/// Writes input files whole (hidden name, then rename) until `stop` is set, removing those
/// older than [`FILES_KEPT`]; returns how often each word was written.
fn write_input(
    input: PathBuf,
    stop: Arc<AtomicBool>,
    files: Arc<AtomicU64>,
) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while !stop.load(Ordering::Relaxed) {
        let n = files.load(Ordering::Relaxed);
        let mut text = String::with_capacity(LINES_PER_FILE * 30);
        push_random_lines(&mut x, LINES_PER_FILE, &mut text, |word| {
            *totals.entry(word.to_string()).or_insert(0) += 1;
        });
        let hidden = input.join(format!(".part-{n:06}.txt"));
        std::fs::write(&hidden, text).unwrap();
        std::fs::rename(&hidden, input.join(format!("part-{n:06}.txt"))).unwrap();
        if let Some(old) = n.checked_sub(FILES_KEPT) {
            std::fs::remove_file(input.join(format!("part-{old:06}.txt"))).unwrap();
        }
        files.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(FILE_EVERY);
    }
    totals
}

fn sample(pid: u32, ckpt: &Path) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    let (mut checkpoint_files, mut checkpoint_bytes) = (0, 0);
    let mut stack = vec![ckpt.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => {
                    checkpoint_files += 1;
                    checkpoint_bytes += m.len();
                }
                Err(_) => {}
            }
        }
    }
    Sample {
        rss_kib,
        fds,
        checkpoint_files,
        checkpoint_bytes,
    }
}

/// The largest value of each measure over `samples`.
fn peak(samples: &[Sample]) -> Sample {
    samples.iter().fold(Sample::default(), |p, s| Sample {
        rss_kib: p.rss_kib.max(s.rss_kib),
        fds: p.fds.max(s.fds),
        checkpoint_files: p.checkpoint_files.max(s.checkpoint_files),
        checkpoint_bytes: p.checkpoint_bytes.max(s.checkpoint_bytes),
    })
}

fn describe(s: &Sample) -> String {
    format!(
        "rss {:.1} MiB, {} open fds, checkpoint dir {} files / {:.1} KiB",
        s.rss_kib as f64 / 1024.0,
        s.fds,
        s.checkpoint_files,
        s.checkpoint_bytes as f64 / 1024.0
    )
}

#[test]
#[ignore = "a soak of 30 minutes (WEIR_SOAK_MINUTES); run with --ignored"]
fn wordcount_over_a_growing_directory_with_a_failure_every_ten_seconds_stays_flat() {
    let minutes: u64 = std::env::var("WEIR_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    let length = Duration::from_secs(minutes * 60);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    std::fs::create_dir_all(&input).unwrap();
    let ckpt = dir.path().join("ck");
    let stop_writer = Arc::new(AtomicBool::new(false));
    let files = Arc::new(AtomicU64::new(0));
    let writer = {
        let (input, stop, files) = (input.clone(), stop_writer.clone(), files.clone());
        std::thread::spawn(move || write_input(input, stop, files))
    };

    let started = Instant::now();
    let mut job = start(dir.path(), false, 0);
    let mut samples: Vec<(Duration, Sample)> = Vec::new();
    let mut kills = 0;
    let kills_on = std::env::var("WEIR_SOAK_KILLS").map_or(true, |v| v != "off");
    let mut next_kill = Duration::from_secs(150 + random_below(60));
    let mut next_report = Duration::from_secs(60);
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(status) = job.child.try_wait().unwrap() {
            panic!(
                "the job ended by itself ({status}) after {:?}:\n{}",
                started.elapsed(),
                std::fs::read_to_string(dir.path().join(format!("job-{kills}.log")))
                    .unwrap_or_default()
            );
        }
        let now = started.elapsed();
        samples.push((now, sample(job.child.id(), &ckpt)));
        if kills_on && now >= next_kill {
            job.child.kill().unwrap(); // SIGKILL
            job.child.wait().unwrap();
            kills += 1;
            job = start(dir.path(), true, kills);
            next_kill = now + Duration::from_secs(150 + random_below(60));
        }
        if now >= next_report {
            let last = samples.last().unwrap().1;
            println!(
                "soak: {} min: {}; {} input files, {kills} kills",
                now.as_secs() / 60,
                describe(&last),
                files.load(Ordering::Relaxed)
            );
            next_report += Duration::from_secs(60);
        }
    }
    stop_writer.store(true, Ordering::Relaxed);
    let totals = writer.join().unwrap();

    // The report the soak is for: at 5, 15 and 30 minutes (scaled to the run's length).
    for at in [length / 6, length / 2, length] {
        let window: Vec<Sample> = samples
            .iter()
            .filter(|(t, _)| *t <= at && *t + Duration::from_secs(60) > at)
            .map(|(_, s)| *s)
            .collect();
        println!(
            "soak: peak over the minute before {} min: {}",
            at.as_secs() / 60,
            describe(&peak(&window))
        );
    }
    let all: Vec<Sample> = samples.iter().map(|(_, s)| *s).collect();
    println!("soak: peak over the whole run: {}", describe(&peak(&all)));

    // Flat: the last third of the run stays within the first third's bounds (after a minute
    // of warm-up), with a little room for noise.
    let third = length / 3;
    let first = peak(
        &samples
            .iter()
            .filter(|(t, _)| *t >= Duration::from_secs(60).min(third / 2) && *t <= third)
            .map(|(_, s)| *s)
            .collect::<Vec<_>>(),
    );
    let last = peak(
        &samples
            .iter()
            .filter(|(t, _)| *t >= length - third)
            .map(|(_, s)| *s)
            .collect::<Vec<_>>(),
    );
    assert!(
        last.rss_kib <= first.rss_kib * 3 / 2 + 32 * 1024,
        "resident memory grew: {} then {}",
        describe(&first),
        describe(&last)
    );
    assert!(
        last.fds <= first.fds + 16,
        "open file descriptors grew: {} then {}",
        describe(&first),
        describe(&last)
    );
    assert!(
        last.checkpoint_files <= first.checkpoint_files * 2 + 16
            && last.checkpoint_bytes <= first.checkpoint_bytes * 2 + (1 << 20),
        "the checkpoint directory grew: {} then {}",
        describe(&first),
        describe(&last)
    );

    // Stop with a savepoint, read what is left from it (bounded), and check the output.
    let stop = run_in(
        dir.path(),
        &[
            "stop",
            "wordcount",
            "--savepoint",
            "savepoints",
            "--rest",
            &job.rest,
        ],
    );
    assert!(stop.status.success(), "weir stop: {}", text(&stop.stderr));
    let status = job.child.wait().unwrap();
    assert!(status.success(), "the stopped job exited with {status}");
    let savepoint = text(&stop.stdout)
        .trim()
        .rsplit("savepoint: ")
        .next()
        .unwrap()
        .to_string();
    let args = wordcount("ck-final", &["--from-savepoint", &savepoint, "--no-rest"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rest = run_in(dir.path(), &args);
    assert!(
        rest.status.success(),
        "the run from the savepoint failed: {}",
        text(&rest.stderr)
    );
    assert_counts_exactly_once(&totals, &dir.path().join("output"));
    let restarts: usize = (0..=kills)
        .map(|run| {
            std::fs::read_to_string(dir.path().join(format!("job-{run}.log")))
                .unwrap_or_default()
                .matches("restarting the job from its latest checkpoint")
                .count()
        })
        .sum();
    println!(
        "soak: {} min, {} input files ({} words), {kills} kills, {restarts} injected failures: exactly once",
        minutes,
        files.load(Ordering::Relaxed),
        files.load(Ordering::Relaxed) * LINES_PER_FILE as u64 * 6
    );
}
