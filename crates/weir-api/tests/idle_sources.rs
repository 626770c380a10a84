//! An idle source marks itself idle and does not hold back the event time of the operators it
//! feeds: the windows of an active source fire while another source has nothing to read. And a
//! source that makes event time per split holds it back for a split that lags.

use std::path::Path;
use std::time::{Duration, Instant};
use weir_api::prelude::*;
use weir_runtime::graph::JobGraph;
use weir_runtime::operators::window::Count;
use weir_runtime::split_watermarks::{SourceEventTime, SplitEventTime, SplitWatermarks};
use weir_runtime::watermark::BoundedOutOfOrderness;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

/// (key, event time in ms)
type Click = (u64, i64);

/// A source that never has anything to read.
#[derive(Clone)]
struct Silent;

impl SourceFunction<Click> for Silent {
    fn open(&mut self, _: &OperatorContext, _: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_batch(&mut self, _: &mut Vec<Click>, _: usize) -> Result<SourceStatus, TaskError> {
        Ok(SourceStatus::Idle)
    }
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
}

fn run_with(idleness: Option<Duration>) -> Vec<(i64, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("idle");
    let clicks: Vec<Click> = (0..100).map(|i| (1, i * 100)).collect();
    let time = (|c: &Click| c.1) as fn(&Click) -> i64;
    let active = env.source_with_watermarks(
        "active",
        VecSource::new(clicks),
        WatermarkStrategy::for_monotonous_timestamps(time),
    );
    let mut silent = WatermarkStrategy::for_monotonous_timestamps(time);
    if let Some(timeout) = idleness {
        silent = silent.with_idleness(timeout);
    }
    let sink = CollectSink::default();
    active
        .union(env.source_with_watermarks("silent", Silent, silent))
        .key_by(|c: &Click| c.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)), time)
        .aggregate("count", Count)
        .sink("out", sink.clone());
    let graph = env.build().unwrap();
    let stop = StopHandle::new();
    let records = sink.clone();
    let stopper = stop.clone();
    // Stops the job once all ten windows fired, or after a generous bound (a failure below).
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(3);
        while records.records().len() < 10 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        stopper.stop();
    });
    windows_counted(&graph, dir.path(), &stop, &sink)
}

/// Runs `graph` from the start until it ends or `stop` stops it; every window's (start, count)
/// that reached `sink`, sorted.
fn windows_counted(
    graph: &JobGraph,
    dir: &Path,
    stop: &StopHandle,
    sink: &CollectSink<WindowResult<u64, u64>>,
) -> Vec<(i64, u64)> {
    let mut config = ExecutionConfig {
        start: StartMode::Fresh,
        ..ExecutionConfig::default()
    };
    config.checkpoint.dir = dir.to_path_buf();
    execute(graph, &config, stop, &mut |_| {}).unwrap();
    let mut got: Vec<(i64, u64)> = sink
        .records()
        .into_iter()
        .map(|r| (r.window.start, r.value))
        .collect();
    got.sort();
    got
}

#[test]
fn an_idle_source_does_not_hold_back_the_windows_of_an_active_one() {
    let expected: Vec<(i64, u64)> = (0..10).map(|w| (w * 1_000, 10)).collect();
    assert_eq!(run_with(Some(Duration::ZERO)), expected);
}

#[test]
fn without_idleness_a_silent_source_holds_event_time_back() {
    assert_eq!(run_with(None), []);
}

/// Two splits read one after the other, as a source reading a backlog partition by partition
/// does: all of split 0's clicks (event times 0 to 9.9 s), then all of split 1's (the same
/// times), one batch each.
#[derive(Clone)]
struct TwoSplits {
    next: usize,
    event_time: Option<PerSplit>,
}

type PerSplit = SplitWatermarks<BoundedOutOfOrderness<fn(&Click) -> i64>>;

impl SourceFunction<Click> for TwoSplits {
    fn open(&mut self, _: &OperatorContext, _: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> {
        if let Some(e) = &mut self.event_time {
            e.set_splits(2, Instant::now());
        }
        Ok(())
    }
    fn poll_batch(&mut self, batch: &mut Vec<Click>, _: usize) -> Result<SourceStatus, TaskError> {
        if self.next == 2 {
            return Ok(SourceStatus::Exhausted);
        }
        for i in 0..100 {
            let click = (1, i * 100);
            if let Some(e) = &mut self.event_time {
                e.observe(self.next, &click);
            }
            batch.push(click);
        }
        self.next += 1;
        Ok(SourceStatus::Emitted)
    }
    fn event_time(&mut self, now: Instant) -> SourceEventTime {
        match &mut self.event_time {
            Some(e) => e.poll(now),
            None => SourceEventTime::Unchanged,
        }
    }
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
}

fn windows_of_two_splits(per_split: bool) -> Vec<(i64, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("splits");
    let time = (|c: &Click| c.1) as fn(&Click) -> i64;
    let strategy = WatermarkStrategy::for_monotonous_timestamps(time).with_interval(Duration::ZERO);
    let clicks = if per_split {
        let source = TwoSplits {
            next: 0,
            event_time: Some(SplitWatermarks::new(strategy)),
        };
        env.source("clicks", source)
    } else {
        let source = TwoSplits {
            next: 0,
            event_time: None,
        };
        env.source_with_watermarks("clicks", source, strategy)
    };
    let sink = CollectSink::default();
    clicks
        .key_by(|c: &Click| c.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)), time)
        .aggregate("count", Count)
        .sink("out", sink.clone());
    let graph = env.build().unwrap();
    windows_counted(&graph, dir.path(), &StopHandle::new(), &sink)
}

#[test]
fn per_split_watermarks_wait_for_a_lagging_split_where_one_watermark_makes_it_late() {
    // One watermark over the interleaved stream passes 9.9 s after split 0: split 1's clicks
    // are late and dropped, except those of the last window.
    let mut one: Vec<(i64, u64)> = (0..9).map(|w| (w * 1_000, 10)).collect();
    one.push((9_000, 20));
    assert_eq!(windows_of_two_splits(false), one);
    // Per split, split 1 holds event time back until it has read: every click counts.
    let every: Vec<(i64, u64)> = (0..10).map(|w| (w * 1_000, 20)).collect();
    assert_eq!(windows_of_two_splits(true), every);
}
