//! The windowed join and the interval join of two keyed streams give exactly the pairs a
//! nested-loop join over the same records gives.

use std::time::Duration;
use weir_api::prelude::*;
use weir_runtime::watermark::BoundedOutOfOrderness;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

/// (key, event time in ms, payload)
type Rec = (u64, i64, u32);

fn records(n: usize, seed: u64) -> Vec<Rec> {
    let mut x = seed;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 20, i as i64 * 13 + (x % 300) as i64, (x >> 20) as u32)
        })
        .collect()
}

type RecWatermarks = WatermarkStrategy<BoundedOutOfOrderness<fn(&Rec) -> i64>>;

fn watermarks() -> RecWatermarks {
    WatermarkStrategy::for_bounded_out_of_orderness(
        Duration::from_millis(300),
        (|r: &Rec| r.1) as fn(&Rec) -> i64,
    )
    .with_interval(Duration::ZERO)
}

fn run(env: &StreamEnv) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutionConfig {
        start: StartMode::Fresh,
        batch_size: 16,
        ..ExecutionConfig::default()
    };
    config.checkpoint.dir = dir.path().to_path_buf();
    execute(
        &env.build().unwrap(),
        &config,
        &StopHandle::new(),
        &mut |_| {},
    )
    .unwrap();
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn a_windowed_join_pairs_the_records_of_each_key_in_the_same_window() {
    let (left, right) = (records(2_000, 1), records(2_000, 2));
    let env = StreamEnv::new("window-join");
    env.set_parallelism(2);
    let sink = CollectSink::default();
    let l = env
        .source_with_watermarks("left", VecSource::new(left.clone()), watermarks())
        .key_by(|r: &Rec| r.0);
    let r = env
        .source_with_watermarks("right", VecSource::new(right.clone()), watermarks())
        .key_by(|r: &Rec| r.0);
    l.window_join(
        r,
        TumblingEventTimeWindows::of(Duration::from_secs(1)),
        |r: &Rec| r.1,
        |r: &Rec| r.1,
    )
    .apply("join", |a: &Rec, b: &Rec| (a.0, a.2, b.2))
    .sink("out", sink.clone());
    run(&env);
    let window = |t: i64| t - t.rem_euclid(1_000);
    let mut expected = Vec::new();
    for a in &left {
        for b in &right {
            if a.0 == b.0 && window(a.1) == window(b.1) {
                expected.push((a.0, a.2, b.2));
            }
        }
    }
    assert!(!expected.is_empty());
    assert_eq!(sorted(sink.records()), sorted(expected));
}

#[test]
fn an_interval_join_pairs_each_left_record_with_the_right_records_in_its_interval() {
    let (left, right) = (records(2_000, 3), records(2_000, 4));
    let env = StreamEnv::new("interval-join");
    env.set_parallelism(2);
    let sink = CollectSink::default();
    let l = env
        .source_with_watermarks("left", VecSource::new(left.clone()), watermarks())
        .key_by(|r: &Rec| r.0);
    let r = env
        .source_with_watermarks("right", VecSource::new(right.clone()), watermarks())
        .key_by(|r: &Rec| r.0);
    l.interval_join(r, |r: &Rec| r.1, |r: &Rec| r.1, -50, 100)
        .process("join", |a: &Rec, b: &Rec| (a.0, a.1, b.1, a.2, b.2))
        .sink("out", sink.clone());
    run(&env);
    let mut expected = Vec::new();
    for a in &left {
        for b in &right {
            if a.0 == b.0 && a.1 - 50 <= b.1 && b.1 <= a.1 + 100 {
                expected.push((a.0, a.1, b.1, a.2, b.2));
            }
        }
    }
    assert!(!expected.is_empty());
    assert_eq!(sorted(sink.records()), sorted(expected));
}
