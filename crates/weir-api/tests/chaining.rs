//! Operator chaining: which edges chain (forward, equal parallelism, one input, unless an
//! operator asks otherwise), that chained operators really run on their producer's thread and
//! unchained ones on their own, and that a chained operator's partly filled batches still leave
//! within the buffer timeout. Exactly-once through failures and across a change of chaining is
//! pinned with unaligned checkpoints (`unaligned_checkpoints.rs`) and by the restore matrix.

use std::time::{Duration, Instant};
use weir_api::prelude::*;
use weir_core::config::CheckpointConfig;
use weir_runtime::graph::JobGraph;
use weir_runtime::{execute, ExecutionConfig, StopHandle};

/// How the jobs here run: checkpoints under `dir`.
fn exec(dir: &std::path::Path) -> ExecutionConfig {
    ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.to_path_buf(),
            ..CheckpointConfig::default()
        },
        buffer_timeout: Duration::from_millis(50),
        ..ExecutionConfig::default()
    }
}

/// The name of the thread the calling operator runs on.
fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

/// numbers → tag (with its thread) → keep (drops nothing) → sink, all at parallelism 2.
fn tagging_job(chaining: bool, sink: CollectSink<(String, u64)>) -> JobGraph {
    let env = StreamEnv::new("tagging");
    env.set_parallelism(2);
    env.set_operator_chaining(chaining);
    env.source("numbers", VecSource::new((0..10_000u64).collect()))
        .map("tag", |n: u64| (thread_name(), n))
        .filter("keep", |_: &(String, u64)| true)
        .sink("out", sink);
    env.build().unwrap()
}

#[test]
fn chained_operators_run_on_their_producers_thread_and_unchained_ones_on_their_own() {
    for chaining in [true, false] {
        let sink = CollectSink::default();
        let graph = tagging_job(chaining, sink.clone());
        assert_eq!(graph.chained_edges(), vec![chaining; 3]);
        let dir = tempfile::tempdir().unwrap();
        execute(&graph, &exec(dir.path()), &StopHandle::new(), &mut |_| {}).expect("the job ends");
        let mut records = sink.records();
        let threads: std::collections::BTreeSet<String> =
            records.iter().map(|(t, _)| t.clone()).collect();
        let want: Vec<String> = if chaining {
            vec!["numbers#0".into(), "numbers#1".into()]
        } else {
            vec!["tag#0".into(), "tag#1".into()]
        };
        assert_eq!(threads.into_iter().collect::<Vec<_>>(), want);
        records.sort_by_key(|(_, n)| *n);
        let numbers: Vec<u64> = records.into_iter().map(|(_, n)| n).collect();
        assert_eq!(
            numbers,
            (0..10_000).collect::<Vec<_>>(),
            "every record once"
        );
    }
}

#[test]
fn chains_break_at_other_partitionings_parallelisms_two_inputs_and_where_an_operator_asks() {
    let env = StreamEnv::new("chains");
    env.set_parallelism(2);
    let numbers = env.source("numbers", VecSource::new(vec![1u64, 2, 3]));
    let a = numbers.map("a", |n: u64| n); // 0: numbers → a, chained
    let b = a.map("b", |n: u64| n).start_new_chain(); // 1: a → b, b starts a chain
    let c = b.map("c", |n: u64| n); // 2: b → c, chained behind the head b
    let d = c.map("d", |n: u64| n).disable_chaining(); // 3: c → d, d never chains
    let e = d.map("e", |n: u64| n); // 4: d → e, not behind d either
    let f = e.rebalance().map("f", |n: u64| n); // 5: rebalance
    let g = f.map("g", |n: u64| n).parallelism(1); // 6: another parallelism
    let other = env
        .source("other", VecSource::new(vec![4u64]))
        .parallelism(1);
    let h = g.union(other).map("h", |n: u64| n).parallelism(1); // 7, 8: two inputs
    h.key_by(|n: &u64| *n)
        .sum("sum", |n: &u64| *n) // 9: hash
        .sink("out", CollectSink::default()) // 10: forward behind the keyed sum
        .parallelism(2);
    let graph = env.build().unwrap();
    let chained = graph.chained_edges();
    let expected = [
        true, false, true, false, false, false, false, false, false, false, true,
    ];
    assert_eq!(chained, expected);

    env.set_operator_chaining(false);
    let unchained = env.build().unwrap();
    assert!(unchained.chained_edges().iter().all(|c| !c));
}

/// Emits `count` records once, then stays idle without ending.
#[derive(Clone)]
struct FewThenIdle {
    count: u64,
    emitted: bool,
}

impl SourceFunction<u64> for FewThenIdle {
    fn open(&mut self, _: &OperatorContext, _: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_batch(&mut self, batch: &mut Vec<u64>, _max: usize) -> Result<SourceStatus, TaskError> {
        if self.emitted {
            return Ok(SourceStatus::Idle);
        }
        self.emitted = true;
        batch.extend(0..self.count);
        Ok(SourceStatus::Emitted)
    }
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
}

#[test]
fn a_chained_operators_partly_filled_batch_leaves_within_the_buffer_timeout() {
    // source → (rebalance) head → chained → (rebalance, parallelism 2) sink: the chained
    // operator's ten records fill no batch, and nothing more arrives to push them out.
    let env = StreamEnv::new("buffered");
    let sink = CollectSink::default();
    env.source(
        "few",
        FewThenIdle {
            count: 10,
            emitted: false,
        },
    )
    .rebalance()
    .map("head", |n: u64| n)
    .map("chained", |n: u64| n * 2)
    .rebalance()
    .sink("out", sink.clone())
    .parallelism(2);
    let graph = env.build().unwrap();
    assert_eq!(graph.chained_edges(), vec![false, true, false]);
    let dir = tempfile::tempdir().unwrap();
    let exec = exec(dir.path());
    let stop = StopHandle::new();
    let job = {
        let stop = stop.clone();
        std::thread::spawn(move || execute(&graph, &exec, &stop, &mut |_| {}))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink.records().len() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.stop();
    job.join().unwrap().expect("the job stops");
    let mut got = sink.records();
    got.sort();
    assert_eq!(got, (0..10).map(|n| n * 2).collect::<Vec<_>>());
}

/// Refuses every batch as malformed.
#[derive(Clone)]
struct Refusing;

impl SinkFunction<u64> for Refusing {
    fn write_batch(&mut self, _batch: Vec<u64>) -> Result<(), TaskError> {
        Err(TaskError::BadInput("record 7 is malformed".into()))
    }
}

#[test]
fn a_chained_operators_error_names_it_and_keeps_its_kind() {
    let env = StreamEnv::new("refusing");
    env.source("numbers", VecSource::new(vec![7u64]))
        .sink("strict-out", Refusing);
    let graph = env.build().unwrap();
    assert_eq!(graph.chained_edges(), vec![true]);
    let dir = tempfile::tempdir().unwrap();
    let error = execute(&graph, &exec(dir.path()), &StopHandle::new(), &mut |_| {})
        .expect_err("the sink refuses its input");
    let message = error.to_string();
    assert!(
        message.contains(
            "'strict-out' subtask 0 (chained behind its producer): record 7 is malformed"
        ),
        "{message}"
    );
    // Bad input is not retried, chained or not.
    assert_eq!(error.exit_code(), 2, "{error:?}");
}
