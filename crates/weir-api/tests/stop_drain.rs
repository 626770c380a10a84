//! Stop with savepoint, with and without `--drain`, on an unbounded event-time job.
//!
//! Without drain, windows still open stay in the savepoint and fire after a restore: the two
//! runs' outputs together are one batch count per window, nothing lost and nothing twice. With
//! drain, event time ends before the savepoint: every window fires in the stopped run, and a
//! restore from the savepoint has nothing left to emit.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_api::prelude::*;
use weir_core::config::CheckpointConfig;
use weir_runtime::operators::window::Count;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::{
    execute, execute_job, Drain, ExecutionConfig, JobHandle, OperatorContext, SourceFunction,
    SourceStatus, StartMode, StopHandle, TaskError,
};

/// A click: (user, event time in ms).
type Click = (u64, i64);

const CLICKS: usize = 20_000;

fn clicks() -> Vec<Click> {
    let mut x = 99u64;
    (0..CLICKS)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 20, i as i64 * 10 + (x % 300) as i64)
        })
        .collect()
}

/// A [`VecSource`] that, with `hold_open`, stays open (idle) after its records instead of
/// ending: an unbounded source that has caught up.
#[derive(Clone)]
struct Clicks {
    inner: VecSource<Click>,
    hold_open: bool,
}

impl SourceFunction<Click> for Clicks {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.inner.open(ctx, restored)
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<Click>,
        max: usize,
    ) -> Result<SourceStatus, TaskError> {
        match self.inner.poll_batch(batch, max)? {
            SourceStatus::Exhausted if self.hold_open && batch.is_empty() => Ok(SourceStatus::Idle),
            SourceStatus::Exhausted if self.hold_open => Ok(SourceStatus::Emitted),
            status => Ok(status),
        }
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        self.inner.snapshot_position()
    }
}

/// Clicks counted per user in tumbling 10 s event-time windows, into `sink`.
fn job(
    hold_open: bool,
    sink: &CollectSink<WindowResult<u64, u64>>,
) -> weir_runtime::graph::JobGraph {
    let env = StreamEnv::new("window-counts");
    env.set_parallelism(2);
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(
        Duration::from_secs(1),
        (|c: &Click| c.1) as fn(&Click) -> i64,
    )
    .with_interval(Duration::ZERO);
    let source = Clicks {
        inner: VecSource::new(clicks()),
        hold_open,
    };
    env.source_with_watermarks("clicks", source, strategy)
        .parallelism(1)
        .key_by(|c: &Click| c.0)
        .window(
            TumblingEventTimeWindows::of(Duration::from_secs(10)),
            |c: &Click| c.1,
        )
        .aggregate("counts", Count)
        .sink("out", sink.clone());
    env.build().unwrap()
}

fn config(dir: &Path) -> ExecutionConfig {
    ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.to_path_buf(),
            interval: Some(Duration::from_millis(200)),
            ..CheckpointConfig::default()
        },
        start: StartMode::New,
        restart: RestartStrategy::None,
        ..ExecutionConfig::default()
    }
}

/// Runs the unbounded job until its source has emitted every click, then stops it with a
/// savepoint; returns the savepoint's directory.
fn run_and_stop(dir: &Path, drain: Drain, sink: &CollectSink<WindowResult<u64, u64>>) -> PathBuf {
    let graph = job(true, sink);
    let config = config(&dir.join("ckpt-a"));
    let handle = JobHandle::new(&graph, &config.checkpoint, StopHandle::new());
    let remote = handle.clone();
    let target = dir.join("savepoints");
    let stopper = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + common::PATIENCE;
        // The source is the only subtask of vertex 0.
        while remote
            .subtask_counts()
            .iter()
            .find(|c| c.vertex == 0)
            .is_none_or(|c| c.records_out < CLICKS as u64)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for the source to emit every click"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        common::stop_with_savepoint(&remote, target, drain)
    });
    execute_job(&graph, &config, &handle, &mut |_| {}).expect("the job stops with its savepoint");
    stopper.join().unwrap()
}

/// Restores the bounded job from `savepoint` and runs it to its end.
fn resume_to_end(dir: &Path, savepoint: &Path, sink: &CollectSink<WindowResult<u64, u64>>) {
    let mut config = config(&dir.join("ckpt-b"));
    config.from_savepoint = Some(savepoint.to_path_buf());
    execute(&job(false, sink), &config, &StopHandle::new(), &mut |_| {}).unwrap();
}

type Windows = BTreeMap<(u64, i64), u64>;

fn expected() -> Windows {
    let mut m = Windows::new();
    for (user, t) in clicks() {
        *m.entry((user, t - t.rem_euclid(10_000))).or_insert(0) += 1;
    }
    m
}

/// The windows a sink received, each at most once.
fn windows(sink: &CollectSink<WindowResult<u64, u64>>) -> Windows {
    let mut m = Windows::new();
    for r in sink.records() {
        let first = m.insert((r.key, r.window.start), r.value);
        assert!(first.is_none(), "window fired twice: {r:?}");
    }
    m
}

#[test]
fn without_drain_open_windows_wait_in_the_savepoint_and_fire_after_the_restore() {
    let dir = tempfile::tempdir().unwrap();
    let before = CollectSink::default();
    let savepoint = run_and_stop(dir.path(), Drain::Keep, &before);
    let before = windows(&before);
    let expected = expected();
    assert!(!before.is_empty(), "windows behind the watermark fired");
    assert!(
        before.len() < expected.len(),
        "the last windows are still open at the stop"
    );

    let after = CollectSink::default();
    resume_to_end(dir.path(), &savepoint, &after);
    let after = windows(&after);
    let mut together = before.clone();
    for (window, count) in &after {
        assert!(
            together.insert(*window, *count).is_none(),
            "window {window:?} fired before the stop and again after the restore"
        );
    }
    assert_eq!(together, expected);
}

#[test]
fn with_drain_every_window_fires_before_the_savepoint_and_a_restore_emits_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let stopped = CollectSink::default();
    let savepoint = run_and_stop(dir.path(), Drain::EndEventTime, &stopped);
    let (stopped, expected) = (windows(&stopped), expected());
    let missing: Vec<_> = expected
        .keys()
        .filter(|w| !stopped.contains_key(w))
        .collect();
    assert!(missing.is_empty(), "windows that did not fire: {missing:?}");
    assert_eq!(stopped, expected);

    let after = CollectSink::default();
    resume_to_end(dir.path(), &savepoint, &after);
    assert_eq!(
        windows(&after),
        Windows::new(),
        "a drained savepoint holds no open window"
    );
}
