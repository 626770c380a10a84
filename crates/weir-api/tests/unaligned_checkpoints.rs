//! Unaligned checkpoints in one process: under back-pressure a barrier overtakes the records
//! queued ahead of it, which are stored with the checkpoint (channel state) and handed to the
//! operator again on restore — and the committed output stays exactly-once through failures.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::{CommittingFileSink, SinkMode};
use weir_core::config::CheckpointConfig;
use weir_core::HandleKind;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::FailureInjection;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};
use weir_storage::CheckpointStorage;

const WORDS: u64 = 40;
const RECORDS: u64 = 30_000;

/// Counts words into a two-phase-commit file sink behind an operator that takes 40 µs per
/// record, so that the channels ahead of it stay full; returns the committed counts and the
/// number of restarts.
fn run(dir: &Path, unaligned: bool, inject: Option<&str>) -> (BTreeMap<String, Vec<u64>>, u64) {
    let exec = config(dir, unaligned, inject);
    let summary =
        execute(&job(dir, 2), &exec, &StopHandle::new(), &mut |_| {}).expect("the job ends");
    (committed(&dir.join("out")), u64::from(summary.restarts))
}

/// The job at `parallelism`, writing its output under `dir`.
fn job(dir: &Path, parallelism: u32) -> weir_runtime::graph::JobGraph {
    let env = StreamEnv::new("unaligned");
    env.set_parallelism(parallelism);
    let words: Vec<String> = (0..RECORDS).map(|i| format!("w{}", i % WORDS)).collect();
    let format = Arc::new(|(word, count): &(String, u64), line: &mut Vec<u8>| {
        let _ = write!(line, "{word}\t{count}");
    });
    env.source("words", VecSource::new(words))
        .key_by(|w: &String| w.clone())
        .process("counts", Counter)
        .map("slow", |r: (String, u64)| {
            std::thread::sleep(Duration::from_micros(40));
            r
        })
        .sink(
            "output",
            CommittingFileSink::new(dir.join("out"), format, SinkMode::ExactlyOnce),
        );
    env.build().unwrap()
}

fn config(dir: &Path, unaligned: bool, inject: Option<&str>) -> ExecutionConfig {
    ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.join("ck"),
            interval: Some(Duration::from_millis(50)),
            unaligned,
            tolerable_failed: 1000,
            ..CheckpointConfig::default()
        },
        start: StartMode::Fresh,
        restart: RestartStrategy::FixedDelay {
            attempts: 1000,
            delay: Duration::ZERO,
        },
        channel_capacity: 4,
        batch_size: 64,
        failure_injection: inject.map(|spec| FailureInjection::parse(spec).unwrap()),
        ..ExecutionConfig::default()
    }
}

#[derive(Clone)]
struct Counter;

impl KeyedProcessFunction<String, String, (String, u64)> for Counter {
    type State = ValueState<String, u64>;
    fn state(&self) -> Self::State {
        ValueState::new("count")
    }
    fn process(
        &mut self,
        key: &CurrentKey<'_, String>,
        word: String,
        counts: &mut Self::State,
        out: &mut Output<(String, u64)>,
    ) -> Result<(), TaskError> {
        let count = counts.get_or_insert_with(key, || 0);
        *count += 1;
        out.emit((word, *count));
        Ok(())
    }
}

fn committed(out: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let (word, count) = line.split_once('\t').unwrap();
            counts
                .entry(word.to_string())
                .or_default()
                .push(count.parse().unwrap());
        }
    }
    counts.values_mut().for_each(|v| v.sort());
    counts
}

fn assert_exactly_once(counts: &BTreeMap<String, Vec<u64>>) {
    assert_eq!(counts.len(), WORDS as usize);
    let want: Vec<u64> = (1..=RECORDS / WORDS).collect();
    for (word, got) in counts {
        assert!(
            got == &want,
            "{word}: {} counts, not 1..={}",
            got.len(),
            want.len()
        );
    }
}

/// Bytes of channel state in the retained checkpoints of the job in `dir`.
fn channel_state_bytes(dir: &Path) -> u64 {
    let storage = CheckpointStorage::open(&dir.join("ck"), "unaligned").unwrap();
    let mut bytes = 0;
    for id in storage.list_completed().unwrap() {
        let metadata = storage.read_metadata(id).unwrap();
        for state in metadata.checkpoint.subtask_states.values() {
            bytes += state
                .handles
                .iter()
                .filter(|h| h.kind == HandleKind::Channels)
                .map(|h| h.size)
                .sum::<u64>();
        }
    }
    bytes
}

#[test]
fn unaligned_checkpoints_store_the_queued_records_and_commit_every_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let (counts, _) = run(dir.path(), true, None);
    assert_exactly_once(&counts);
    assert!(
        channel_state_bytes(dir.path()) > 0,
        "no retained checkpoint holds channel state"
    );
}

#[test]
fn with_injected_failures_unaligned_checkpoints_restore_their_channel_state_exactly_once() {
    let mut restarts = 0;
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (counts, r) = run(dir.path(), true, Some("counts,slow,output:0.01"));
        assert_exactly_once(&counts);
        restarts += r;
    }
    assert!(restarts >= 3, "only {restarts} injected failures");
}

#[test]
fn channel_state_restores_only_at_its_parallelism_and_the_error_says_to_use_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    // Cancelled while back-pressured: the latest checkpoint is an unaligned one.
    let stop = StopHandle::new();
    let canceller = stop.clone();
    let ck = dir.path().join("ck");
    let watcher = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            let storage = CheckpointStorage::open(&ck, "unaligned").unwrap();
            let ids = storage.list_completed().unwrap();
            if ids.len() >= 3 {
                break;
            }
        }
        canceller.cancel();
    });
    let exec = config(dir.path(), true, None);
    let _ = execute(&job(dir.path(), 2), &exec, &stop, &mut |_| {});
    watcher.join().unwrap();
    let storage = CheckpointStorage::open(&dir.path().join("ck"), "unaligned").unwrap();
    let latest = *storage
        .list_completed()
        .unwrap()
        .last()
        .expect("a checkpoint");
    let holds_channels = storage
        .read_metadata(latest)
        .unwrap()
        .checkpoint
        .subtask_states
        .values()
        .any(|s| s.handles.iter().any(|h| h.kind == HandleKind::Channels));
    assert!(
        holds_channels,
        "the latest checkpoint holds no channel state"
    );

    let mut resume = config(dir.path(), true, None);
    resume.start = StartMode::Resume;
    resume.restart = RestartStrategy::None;
    let refused = execute(
        &job(dir.path(), 3),
        &resume,
        &StopHandle::new(),
        &mut |_| {},
    );
    let Err(err) = refused else {
        panic!("a restore at parallelism 3 was not refused");
    };
    let err = err.to_string();
    assert!(
        err.contains("parallelism") && err.contains("savepoint"),
        "{err}"
    );
    // At its own parallelism it restores, and the output is exactly-once.
    let (counts, _) = {
        let summary = execute(
            &job(dir.path(), 2),
            &resume,
            &StopHandle::new(),
            &mut |_| {},
        )
        .expect("the resumed job ends");
        (committed(&dir.path().join("out")), summary.restarts)
    };
    assert_exactly_once(&counts);
}
