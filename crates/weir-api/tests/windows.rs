//! Event-time windows end to end: tumbling, sliding and session windows fire what a batch
//! computation over the same records gives; late records within the allowed lateness re-fire
//! their window, later ones go to the side output.

use std::collections::BTreeMap;
use std::time::Duration;
use weir_api::prelude::*;
use weir_runtime::operators::window::Count;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

/// A click: (user, event time in ms).
type Click = (u64, i64);

fn run(env: &StreamEnv, batch_size: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutionConfig {
        start: StartMode::Fresh,
        batch_size,
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

/// Pseudo-random clicks, a little out of order (at most 500 ms).
fn clicks(n: usize) -> Vec<Click> {
    let mut x = 12345u64;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 50, i as i64 * 37 + (x % 500) as i64)
        })
        .collect()
}

type ClickWatermarks =
    WatermarkStrategy<weir_runtime::watermark::BoundedOutOfOrderness<fn(&Click) -> i64>>;

/// Watermarks after every record, trailing the largest time seen by `bound`.
fn strategy(bound: Duration) -> ClickWatermarks {
    WatermarkStrategy::for_bounded_out_of_orderness(bound, (|c: &Click| c.1) as fn(&Click) -> i64)
        .with_interval(Duration::ZERO)
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn tumbling_and_sliding_window_counts_equal_a_batch_count_per_window() {
    let input = clicks(20_000);
    let env = StreamEnv::new("windows");
    env.set_parallelism(2);
    let source = env
        .source_with_watermarks(
            "clicks",
            VecSource::new(input.clone()),
            strategy(Duration::from_secs(1)),
        )
        .parallelism(1);
    let tumbling = CollectSink::default();
    let sliding = CollectSink::default();
    source
        .clone()
        .key_by(|c: &Click| c.0)
        .window(
            TumblingEventTimeWindows::of(Duration::from_secs(10)),
            |c: &Click| c.1,
        )
        .aggregate("tumbling", Count)
        .sink("tumbling-out", tumbling.clone());
    source
        .key_by(|c: &Click| c.0)
        .window(
            SlidingEventTimeWindows::of(Duration::from_secs(10), Duration::from_secs(4)),
            |c: &Click| c.1,
        )
        .aggregate("sliding", Count)
        .sink("sliding-out", sliding.clone());
    run(&env, 64);

    let mut expected_tumbling = BTreeMap::new();
    let mut expected_sliding = BTreeMap::new();
    for &(user, t) in &input {
        let start = t - t.rem_euclid(10_000);
        *expected_tumbling.entry((user, start)).or_insert(0u64) += 1;
        // Windows of 10 s every 4 s holding t: starts s = 4k with s <= t < s + 10 s.
        let mut s = t - t.rem_euclid(4_000);
        while s + 10_000 > t {
            *expected_sliding.entry((user, s)).or_insert(0u64) += 1;
            s -= 4_000;
        }
    }
    let got = |sink: &CollectSink<WindowResult<u64, u64>>| -> BTreeMap<(u64, i64), u64> {
        let mut m = BTreeMap::new();
        for r in sink.records() {
            assert_eq!(r.window.end - r.window.start, 10_000);
            assert!(
                m.insert((r.key, r.window.start), r.value).is_none(),
                "fired twice: {r:?}"
            );
        }
        m
    };
    assert_eq!(got(&tumbling), expected_tumbling);
    assert_eq!(got(&sliding), expected_sliding);
}

#[test]
fn session_windows_close_after_the_gap_and_merge_when_a_record_bridges_them() {
    // User 1: 0, 400, 800 (one session); 5000 (another). User 2: 0, 1500, 700 (bridges).
    let input: Vec<Click> = vec![
        (1, 0),
        (2, 0),
        (1, 400),
        (2, 1_500),
        (1, 800),
        (2, 700),
        (1, 5_000),
    ];
    let env = StreamEnv::new("sessions");
    let sink = CollectSink::default();
    env.source_with_watermarks(
        "clicks",
        VecSource::new(input),
        strategy(Duration::from_secs(2)),
    )
    .key_by(|c: &Click| c.0)
    .window(
        EventTimeSessionWindows::with_gap(Duration::from_secs(1)),
        |c: &Click| c.1,
    )
    .aggregate("sessions", Count)
    .sink("out", sink.clone());
    run(&env, 1);
    let got = sorted(
        sink.records()
            .into_iter()
            .map(|r| (r.key, r.window.start, r.window.end, r.value))
            .collect(),
    );
    assert_eq!(
        got,
        [(1, 0, 1_800, 3), (1, 5_000, 6_000, 1), (2, 0, 2_500, 3)]
    );
}

#[test]
fn late_records_refire_within_the_allowed_lateness_and_go_to_the_side_output_after() {
    // Tumbling 1 s windows, no out-of-orderness: the watermark follows each record.
    let input: Vec<Click> = vec![
        (1, 100),
        (1, 1_200), // watermark 1199: window [0, 1000) fires with 1 record
        (1, 300),   // late but within 500 ms of lateness: [0, 1000) fires again with 2
        (1, 1_600), // watermark 1599: [0, 1000) is past its lateness (999 + 500 <= 1599)
        (1, 400),   // too late: side output
        (1, 2_500), // fires [1000, 2000) with 2 records
    ];
    let env = StreamEnv::new("late");
    let late = OutputTag::<Click>::new("late");
    let results = CollectSink::default();
    let late_sink = CollectSink::default();
    let counts = env
        .source_with_watermarks("clicks", VecSource::new(input), strategy(Duration::ZERO))
        .key_by(|c: &Click| c.0)
        .window(
            TumblingEventTimeWindows::of(Duration::from_secs(1)),
            |c: &Click| c.1,
        )
        .allowed_lateness(Duration::from_millis(500))
        .side_output_late_data(&late)
        .aggregate("count", Count);
    counts
        .side_output(&late)
        .sink("late-out", late_sink.clone());
    counts.sink("out", results.clone());
    run(&env, 1);
    let got: Vec<(i64, u64)> = results
        .records()
        .into_iter()
        .map(|r| (r.window.start, r.value))
        .collect();
    assert_eq!(got, [(0, 1), (0, 2), (1_000, 2), (2_000, 1)]);
    assert_eq!(late_sink.records(), [(1, 400)]);
}

#[test]
fn a_window_process_function_sees_every_record_of_its_window() {
    let input = clicks(5_000);
    let env = StreamEnv::new("process");
    let sink = CollectSink::default();
    env.source_with_watermarks(
        "clicks",
        VecSource::new(input.clone()),
        strategy(Duration::from_secs(1)),
    )
    .key_by(|c: &Click| c.0 % 3)
    .window(
        SlidingEventTimeWindows::of(Duration::from_secs(6), Duration::from_secs(3)),
        |c: &Click| c.1,
    )
    .process(
        "max-time",
        |key: &u64,
         w: TimeWindow,
         elements: WindowElements<'_, Click>,
         out: &mut Vec<(u64, i64, usize, i64)>| {
            let n = elements.total();
            let max = elements.map(|c| c.1).max().unwrap_or(i64::MIN);
            out.push((*key, w.start, n, max));
        },
    )
    .sink("out", sink.clone());
    run(&env, 100);
    let mut expected = BTreeMap::new();
    for &(user, t) in &input {
        let mut s = t - t.rem_euclid(3_000);
        while s + 6_000 > t {
            let e = expected.entry((user % 3, s)).or_insert((0usize, i64::MIN));
            e.0 += 1;
            e.1 = e.1.max(t);
            s -= 3_000;
        }
    }
    let got: BTreeMap<(u64, i64), (usize, i64)> = sink
        .records()
        .into_iter()
        .map(|(k, s, n, m)| ((k, s), (n, m)))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn a_timestamp_assigner_in_the_middle_of_a_job_drives_the_windows_after_it() {
    let input = clicks(3_000);
    let env = StreamEnv::new("assigner");
    let sink = CollectSink::default();
    env.source("clicks", VecSource::new(input.clone()))
        .map("shift", |c: Click| (c.0, c.1 + 1_000))
        .assign_timestamps_and_watermarks("event-time", |c: &Click| c.1, Duration::from_secs(1))
        .key_by(|c: &Click| c.0 % 2)
        .window(
            TumblingEventTimeWindows::of(Duration::from_secs(5)),
            |c: &Click| c.1,
        )
        .aggregate("count", Count)
        .sink("out", sink.clone());
    run(&env, 32);
    let mut expected = BTreeMap::new();
    for &(user, t) in &input {
        let t = t + 1_000;
        *expected
            .entry((user % 2, t - t.rem_euclid(5_000)))
            .or_insert(0u64) += 1;
    }
    let got: BTreeMap<(u64, i64), u64> = sink
        .records()
        .into_iter()
        .map(|r| ((r.key, r.window.start), r.value))
        .collect();
    assert_eq!(got, expected);
}
