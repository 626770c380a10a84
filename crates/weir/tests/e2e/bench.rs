//! `weir bench`: the JSON it reports, and `--alternate`, the cost of checkpointing measured
//! within one run.

use crate::common::{run_in, text};

/// Runs `weir` with `args` (ending in `--json`) in a fresh directory; the JSON it printed.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `weir bench keyed-count` with `extra` flags, alternating 500 ms phases for 5 s; its JSON.
fn alternating_keyed_count(extra: &[&str]) -> serde_json::Value {
    let args = [
        &[
            "bench",
            "keyed-count",
            "--keys",
            "1000",
            "--parallelism",
            "1",
            "--duration",
            "5s",
            "--checkpoint-interval",
            "250ms",
            "--alternate",
            "500ms",
            "--json",
        ][..],
        extra,
    ]
    .concat();
    bench_json(&args)
}

#[test]
fn alternating_phases_trigger_checkpoints_in_every_other_phase_and_report_each_pair() {
    let json = alternating_keyed_count(&[]);
    let alternation = &json["alternation"];
    // 10 phases of 500 ms: up to five to warm up, then 2 pairs.
    assert_eq!(alternation["pairs_planned"], 2, "{json}");
    assert_eq!(alternation["pairs"], 2, "{json}");
    assert_eq!(alternation["cut_short"], serde_json::Value::Null, "{json}");
    // Two checkpoints a phase with checkpoints (at its start and one interval in), one such
    // phase a pair; periodic checkpoints are off.
    assert_eq!(alternation["checkpoints_triggered"], 4, "{json}");
    let completed = json["checkpoints_completed"].as_u64().unwrap();
    // Periodic checkpoints are off: these are the triggered ones (a slow machine may still
    // have had the last queued when the job stopped), and the final one of a clean stop.
    assert!((2..=5).contains(&completed), "{json}");
    let first = alternation["first_pair_unix_ms"].as_u64().unwrap();
    assert_eq!(
        first % 2000,
        0,
        "pairs begin on four phases of the clock: {json}"
    );
    let pairs = alternation["per_core_off_on"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{json}");
    for pair in pairs {
        let (off, on) = (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap());
        assert!(off > 0.0 && on > 0.0, "{json}");
    }
    assert!(alternation["change_percent"].is_number(), "{json}");
    // Where the CPU went, by group of threads: the keyed operator's subtasks are one group.
    let by_thread = alternation["ns_per_event_by_thread_off_on"]
        .as_object()
        .unwrap();
    let keyed = &by_thread["count-and-sum"];
    assert!(keyed[0].as_f64().unwrap() > 0.0, "{json}");
    assert!(keyed[1].as_f64().unwrap() > 0.0, "{json}");
    let [low, high] = [0, 1].map(|i| alternation["change_ci95_percent"][i].as_f64().unwrap());
    let mean = alternation["change_percent"].as_f64().unwrap();
    assert!(low <= mean && mean <= high, "{json}");
}

#[test]
fn a_control_triggers_no_checkpoint_and_the_opposite_step_is_reported() {
    let json = alternating_keyed_count(&["--alternate-control", "--alternate-on-first"]);
    let alternation = &json["alternation"];
    assert_eq!(alternation["control"], true, "{json}");
    assert_eq!(alternation["on_first"], true, "{json}");
    assert_eq!(alternation["checkpoints_triggered"], 0, "{json}");
    assert_eq!(alternation["pairs"], 2, "{json}");
    // Only the final checkpoint of the clean stop.
    assert!(
        json["checkpoints_completed"].as_u64().unwrap() <= 1,
        "{json}"
    );
}

#[test]
fn a_nexmark_run_reports_the_watermark_drift_its_sources_were_aligned_within() {
    let json_of = |extra: &[&str]| {
        let q4 = [
            "bench", "nexmark", "--query", "q4", "--events", "200000", "--json",
        ];
        bench_json(&[&q4[..], extra].concat())
    };
    let default = json_of(&[]);
    // A million events of event time: 100 ms at the default 10 M events per second.
    assert_eq!(default["max_watermark_drift_ms"], 100, "{default}");
    let slow = json_of(&["--event-rate", "100000"]);
    assert_eq!(slow["max_watermark_drift_ms"], 10_000, "{slow}");
    let tight = json_of(&["--max-watermark-drift", "20ms"]);
    assert_eq!(tight["max_watermark_drift_ms"], 20, "{tight}");
    // The drift changes when sources pause, never what q4 computes from the same events.
    assert_eq!(tight["events"], 200_000, "{tight}");
    assert_eq!(tight["results"], default["results"], "{tight} {default}");
    assert!(tight["results"].as_u64().unwrap() > 0, "{tight}");
}

#[test]
fn the_kafka_bench_reports_its_ceilings_and_the_exactly_once_rate() {
    let broker = std::env::var("WEIR_TEST_KAFKA").expect(
        "WEIR_TEST_KAFKA is not set: run the tests with scripts/test.sh, which starts a broker",
    );
    let report = bench_json(&[
        "bench",
        "kafka",
        "--bootstrap-servers",
        &broker,
        "--records",
        "5000",
        "--checkpoint-interval",
        "200ms",
        "--json",
    ]);
    for rate in [
        "produce_records_per_second",
        "consume_records_per_second",
        "exactly_once_records_per_second",
    ] {
        assert!(report[rate].as_f64().unwrap() > 0.0, "{rate}: {report}");
    }
}
