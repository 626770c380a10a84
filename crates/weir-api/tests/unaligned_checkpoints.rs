//! Unaligned checkpoints in one process: under back-pressure a barrier overtakes the records
//! queued ahead of it, which are stored with the checkpoint (channel state) and handed to the
//! operator again on restore — and the committed output stays exactly-once through failures,
//! for a keyed count and for keyed event-time windows. The checkpoint statistics tell the
//! unaligned checkpoints, with the bytes of channel state they wrote, from the aligned ones.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use weir_api::prelude::*;
use weir_checkpoint::CheckpointStatus;
use weir_connectors::{CommittingFileSink, SinkMode};
use weir_core::config::CheckpointConfig;
use weir_core::HandleKind;
use weir_runtime::graph::JobGraph;
use weir_runtime::operators::window::Count;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::FailureInjection;
use weir_runtime::{execute, execute_job, ExecutionConfig, JobHandle, StartMode, StopHandle};
use weir_storage::CheckpointStorage;

const WORDS: u64 = 40;
const RECORDS: u64 = 30_000;
/// The name of the word count job, and of its directory in checkpoint storage.
const JOB: &str = "unaligned";

/// Counts words into a two-phase-commit file sink behind an operator that takes 40 µs per
/// record, so that the channels ahead of it stay full; returns the committed counts and the
/// number of restarts.
fn run(dir: &Path, unaligned: bool, inject: Option<&str>) -> (BTreeMap<String, Vec<u64>>, u64) {
    let restarts = run_job(&job(dir, 2), dir, unaligned, inject);
    (committed(&dir.join("out")), restarts)
}

/// Runs `graph` to its end as [`config`] says; returns the number of restarts.
fn run_job(graph: &JobGraph, dir: &Path, unaligned: bool, inject: Option<&str>) -> u64 {
    let exec = config(dir, unaligned, inject);
    let summary = execute(graph, &exec, &StopHandle::new(), &mut |_| {}).expect("the job ends");
    u64::from(summary.restarts)
}

/// The job at `parallelism`, writing its output under `dir`; `slow` and `output` are chained
/// behind `counts`.
fn job(dir: &Path, parallelism: u32) -> JobGraph {
    job_chained(dir, parallelism, true)
}

/// The job, with operator chaining on or off: off, `slow` and `output` read channels of their
/// own.
fn job_chained(dir: &Path, parallelism: u32, chaining: bool) -> JobGraph {
    let env = StreamEnv::new(JOB);
    env.set_parallelism(parallelism);
    env.set_operator_chaining(chaining);
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

/// Every line the sink committed under `out` (uncommitted files are hidden, named `.…`).
fn committed_lines(out: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

fn committed(out: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in committed_lines(out) {
        let (word, count) = line.split_once('\t').unwrap();
        counts
            .entry(word.to_string())
            .or_default()
            .push(count.parse().unwrap());
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

/// The size of every subtask's channel state in the retained checkpoints of job `name` in
/// `dir`, in bytes.
fn channel_state_sizes(dir: &Path, name: &str) -> Vec<u64> {
    let storage = CheckpointStorage::open(&dir.join("ck"), name).unwrap();
    let mut sizes = Vec::new();
    for id in storage.list_completed().unwrap() {
        let metadata = storage.read_metadata(id).unwrap();
        for state in metadata.checkpoint.subtask_states.values() {
            let channels = state
                .handles
                .iter()
                .filter(|h| h.kind == HandleKind::Channels);
            sizes.extend(channels.map(|h| h.size));
        }
    }
    sizes
}

/// Bytes of channel state in the retained checkpoints of job `name` in `dir`.
fn channel_state_bytes(dir: &Path, name: &str) -> u64 {
    channel_state_sizes(dir, name).iter().sum()
}

/// Bytes of channel state of operator `uid`'s subtasks in the latest checkpoint of job `name`.
fn latest_channel_state_of(dir: &Path, name: &str, uid: &str) -> u64 {
    let storage = CheckpointStorage::open(&dir.join("ck"), name).unwrap();
    let latest = storage
        .find_latest()
        .unwrap()
        .metadata
        .expect("a checkpoint");
    let operator = weir_core::OperatorId::from_uid(uid);
    latest
        .checkpoint
        .subtask_states
        .iter()
        .filter(|(subtask, _)| subtask.operator == operator)
        .flat_map(|(_, state)| &state.handles)
        .filter(|h| h.kind == HandleKind::Channels)
        .map(|h| h.size)
        .sum()
}

/// More than the channel state of queues holding nothing: its header and one length per
/// channel.
const EMPTY_CHANNEL_STATE: u64 = 64;

#[test]
fn unaligned_checkpoints_store_the_queued_records_and_commit_every_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let (counts, _) = run(dir.path(), true, None);
    assert_exactly_once(&counts);
    assert!(
        channel_state_bytes(dir.path(), JOB) > 0,
        "no retained checkpoint holds channel state"
    );
}

#[test]
fn statistics_mark_unaligned_checkpoints_with_the_bytes_of_their_channel_state() {
    let dir = tempfile::tempdir().unwrap();
    let graph = job(dir.path(), 2);
    let mut exec = config(dir.path(), true, None);
    exec.checkpoint.history_size = 10_000;
    let handle = JobHandle::new(&graph, &exec.checkpoint, StopHandle::new());
    execute_job(&graph, &exec, &handle, &mut |_| {}).expect("the job ends");
    let stats = handle.checkpoint_stats().expect("statistics");
    let completed: Vec<_> = stats
        .history()
        .filter(|e| e.status == CheckpointStatus::Completed)
        .collect();
    // Operators without input channels: the source, and those chained behind their producer
    // (called directly, nothing in flight to capture).
    let mut without_channels = vec![weir_core::OperatorId::from_uid("words")];
    for (edge, chained) in graph.edges.iter().zip(graph.chained_edges()) {
        if chained {
            without_channels.push(graph.nodes[edge.to].id());
        }
    }
    assert_eq!(without_channels.len(), 3, "slow and output are chained");

    let unaligned: Vec<_> = completed.iter().filter(|e| e.unaligned).collect();
    assert!(!unaligned.is_empty(), "no unaligned checkpoint completed");
    for e in &unaligned {
        assert!(e.persisted_data > 0, "checkpoint {}: {e:?}", e.id);
        assert!(e.persisted_size >= e.persisted_data, "{e:?}");
        for line in &e.subtasks {
            let ack = line.ack.expect("every subtask acknowledged");
            // Every subtask with input channels captured its own.
            let reads_channels = !without_channels.contains(&line.subtask.operator);
            assert_eq!(ack.unaligned, reads_channels, "{line:?}");
            assert_eq!(ack.persisted_data > 0, reads_channels, "{line:?}");
        }
        let sum: u64 = e
            .subtasks
            .iter()
            .filter_map(|l| l.ack)
            .map(|a| a.persisted_data)
            .sum();
        assert_eq!(sum, e.persisted_data);
    }
    assert!(stats.summary.persisted_data.snapshot().max > 0);

    // The final checkpoint is always aligned: nothing in flight went with it.
    let last = completed.last().expect("a completed checkpoint");
    assert!(!last.unaligned, "{last:?}");
    assert_eq!(last.persisted_data, 0);
    assert!(last
        .subtasks
        .iter()
        .all(|l| l.ack.is_some_and(|a| !a.unaligned && a.persisted_data == 0)));
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

/// Runs the word count with checkpoints aligned for `timeout` before they turn unaligned (and
/// failures injected as `inject` says); returns the completed checkpoints' statistics and
/// checks the output is exactly-once.
fn run_with_timeout(
    timeout: Duration,
    inject: Option<&str>,
) -> Vec<weir_checkpoint::CheckpointStatsEntry> {
    let dir = tempfile::tempdir().unwrap();
    let graph = job(dir.path(), 2);
    let mut exec = config(dir.path(), true, inject);
    exec.checkpoint.aligned_timeout = timeout;
    exec.checkpoint.history_size = 10_000;
    let handle = JobHandle::new(&graph, &exec.checkpoint, StopHandle::new());
    execute_job(&graph, &exec, &handle, &mut |_| {}).expect("the job ends");
    assert_exactly_once(&committed(&dir.path().join("out")));
    let stats = handle.checkpoint_stats().expect("statistics");
    let completed = stats
        .history()
        .filter(|e| e.status == CheckpointStatus::Completed)
        .cloned()
        .collect();
    completed
}

#[test]
fn checkpoints_aligned_with_a_timeout_turn_unaligned_only_where_alignment_outlasts_it() {
    // Back-pressure holds every barrier longer than 5 ms: subtasks go on unaligned.
    let short = run_with_timeout(Duration::from_millis(5), None);
    let unaligned = short.iter().filter(|e| e.unaligned).count();
    assert!(
        unaligned * 2 >= short.len(),
        "{unaligned} of {} checkpoints turned unaligned",
        short.len()
    );
    assert!(short
        .iter()
        .filter(|e| e.unaligned)
        .all(|e| e.persisted_data > 0));
    // A timeout never reached: every checkpoint aligns, its barrier announced ahead of the
    // data notwithstanding, and the subtasks count what they handed on while aligning.
    let long = run_with_timeout(Duration::from_secs(3600), None);
    assert!(long.len() >= 2, "{} checkpoints", long.len());
    for e in &long {
        assert!(!e.unaligned && e.persisted_data == 0, "{e:?}");
    }
    assert!(long.iter().any(|e| e.processed_records > 0));
}

#[test]
fn with_an_aligned_checkpoint_timeout_and_injected_failures_every_count_is_committed_once() {
    for _ in 0..3 {
        run_with_timeout(Duration::from_millis(5), Some("counts,slow,output:0.01"));
    }
}

/// An event of the window job: (key, event time in ms).
type Event = (u64, i64);
const KEYS: u64 = 30;
const EVENTS: usize = 24_000;
const WINDOW: Duration = Duration::from_secs(1);
/// The name of the window job, and of its directory in checkpoint storage.
const WINDOW_JOB: &str = "unaligned-windows";

/// Pseudo-random keys, 10 ms of event time apart, up to 300 ms out of order.
fn events() -> Vec<Event> {
    let mut x = 0x5745_4952_u64;
    (0..EVENTS)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % KEYS, i as i64 * 10 + (x % 300) as i64)
        })
        .collect()
}

/// Counts events per key in tumbling event-time windows into a two-phase-commit file sink
/// behind an operator that takes 150 µs per window result, so that the channels into it and
/// into the windows stay full; one line per result: key, window start, count.
fn window_job(dir: &Path) -> JobGraph {
    let env = StreamEnv::new(WINDOW_JOB);
    env.set_parallelism(2);
    let time = (|e: &Event| e.1) as fn(&Event) -> i64;
    let watermarks =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(500), time)
            .with_interval(Duration::ZERO);
    let format = Arc::new(|r: &WindowResult<u64, u64>, line: &mut Vec<u8>| {
        let _ = write!(line, "{}\t{}\t{}", r.key, r.window.start, r.value);
    });
    env.source_with_watermarks("events", VecSource::new(events()), watermarks)
        .key_by(|e: &Event| e.0)
        .window(TumblingEventTimeWindows::of(WINDOW), time)
        .aggregate("windows", Count)
        .map("slow", |r: WindowResult<u64, u64>| {
            std::thread::sleep(Duration::from_micros(150));
            r
        })
        .sink(
            "output",
            CommittingFileSink::new(dir.join("out"), format, SinkMode::ExactlyOnce),
        );
    env.build().unwrap()
}

/// Every committed window result: (key, window start) → the counts committed for it.
fn committed_windows(out: &Path) -> BTreeMap<(u64, i64), Vec<u64>> {
    let mut results: BTreeMap<(u64, i64), Vec<u64>> = BTreeMap::new();
    for line in committed_lines(out) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [key, start, count] = fields[..] else {
            panic!("not a window result: {line:?}");
        };
        results
            .entry((key.parse().unwrap(), start.parse().unwrap()))
            .or_default()
            .push(count.parse().unwrap());
    }
    results
}

#[test]
fn keyed_windows_under_back_pressure_commit_every_result_once_through_failures() {
    let window_ms = WINDOW.as_millis() as i64;
    let mut expected: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for (key, time) in events() {
        *expected
            .entry((key, time - time.rem_euclid(window_ms)))
            .or_default() += 1;
    }
    let mut restarts = 0;
    for run in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        restarts += run_job(
            &window_job(dir.path()),
            dir.path(),
            true,
            Some("windows,slow,output:0.01"),
        );
        let got = committed_windows(&dir.path().join("out"));
        for (window, counts) in &got {
            assert!(
                counts.len() == 1,
                "run {run}: window {window:?} committed {} times: {counts:?}",
                counts.len()
            );
            assert_eq!(
                Some(&counts[0]),
                expected.get(window),
                "run {run}: window {window:?}"
            );
        }
        let lost: Vec<_> = expected.keys().filter(|w| !got.contains_key(w)).collect();
        assert!(
            lost.is_empty(),
            "run {run}: results never committed: {lost:?}"
        );
        let sizes = channel_state_sizes(dir.path(), WINDOW_JOB);
        assert!(
            sizes.iter().any(|&s| s > EMPTY_CHANNEL_STATE),
            "run {run}: no retained checkpoint holds queued data as channel state: {sizes:?}"
        );
    }
    assert!(restarts >= 4, "only {restarts} injected failures");
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
            let storage = CheckpointStorage::open(&ck, JOB).unwrap();
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
    let storage = CheckpointStorage::open(&dir.path().join("ck"), JOB).unwrap();
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

#[test]
fn in_flight_data_restores_exactly_once_when_operator_chaining_changes_between_runs() {
    for chained_first in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // The first run fails for good about 250 ms in, after several unaligned checkpoints.
        let mut first = config(dir.path(), true, Some("slow:250ms"));
        first.restart = RestartStrategy::None;
        let graph = job_chained(dir.path(), 2, chained_first);
        let failed = execute(&graph, &first, &StopHandle::new(), &mut |_| {});
        assert!(
            failed.is_err(),
            "the first run ends at its injected failure"
        );
        if !chained_first {
            // Unchained, `slow` reads a full channel of its own: the checkpoint holds what was
            // in it, which the chained `slow` of the next run must take before anything new.
            assert!(
                latest_channel_state_of(dir.path(), JOB, "slow") > 2 * EMPTY_CHANNEL_STATE,
                "the checkpoint holds no in-flight data for 'slow'"
            );
        }
        let mut second = config(dir.path(), true, None);
        second.start = StartMode::Resume;
        let graph = job_chained(dir.path(), 2, !chained_first);
        execute(&graph, &second, &StopHandle::new(), &mut |_| {}).expect("the job ends");
        assert_exactly_once(&committed(&dir.path().join("out")));
    }
}
