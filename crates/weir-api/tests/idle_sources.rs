//! An idle source marks itself idle and does not hold back the event time of the operators it
//! feeds: the windows of an active source fire while another source has nothing to read.

use std::time::{Duration, Instant};
use weir_api::prelude::*;
use weir_runtime::operators::window::Count;
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
    let mut config = ExecutionConfig {
        start: StartMode::Fresh,
        ..ExecutionConfig::default()
    };
    config.checkpoint.dir = dir.path().to_path_buf();
    execute(&graph, &config, &stop, &mut |_| {}).unwrap();
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
