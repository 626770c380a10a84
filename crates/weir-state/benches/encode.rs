//! Encoding keyed state for a checkpoint: the work of a snapshot's asynchronous phase.
//!
//! Two tables of 1,000,000 keys: `inline` holds a count per key (nothing to chase, like a
//! window's pane counts), `heap` a small record with a string per key (a pointer to chase per
//! entry, like a window join's buffered people). `full/*` encodes every key group in full;
//! `delta/*` encodes the changes since a completed checkpoint after 1 % of the keys were
//! written (the scan for changed entries included). Throughput is in entries of the table.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use weir_state::{
    encode_incremental, encode_keyed_snapshot, CurrentKey, FrozenTable, IncrementalBase,
    KeyGroupRange, KeyedStateSet, SharedStateFile, ValueState,
};

const KEYS: u64 = 1_000_000;
const MAX_PARALLELISM: u32 = 128;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Person {
    id: u64,
    name: String,
    date_time: i64,
}

fn range() -> KeyGroupRange {
    KeyGroupRange::new(0, MAX_PARALLELISM)
}

/// A table of `KEYS` entries made by `value`, keys inserted in order (as a stream's would be).
fn table<V: weir_state::Value>(value: impl Fn(u64) -> V) -> ValueState<u64, V> {
    let mut state = ValueState::new("bench");
    state.init(MAX_PARALLELISM, range());
    for k in 0..KEYS {
        state.set(&CurrentKey::new(&k, MAX_PARALLELISM), value(k));
    }
    state
}

fn frozen<V: weir_state::Value>(state: &mut ValueState<u64, V>) -> Vec<Box<dyn FrozenTable>> {
    let mut out = Vec::new();
    state.snapshot(&mut out);
    out
}

fn bench_full(c: &mut Criterion) {
    let mut group = c.benchmark_group("full");
    group.throughput(Throughput::Elements(KEYS));
    group.sample_size(10);
    let mut inline = table(|k| k);
    let tables = frozen(&mut inline);
    group.bench_function("inline", |b| {
        b.iter(|| black_box(encode_keyed_snapshot(&tables, range()).expect("encodes")))
    });
    let mut heap = table(person);
    let tables = frozen(&mut heap);
    group.bench_function("heap", |b| {
        b.iter(|| black_box(encode_keyed_snapshot(&tables, range()).expect("encodes")))
    });
    group.finish();
}

fn person(k: u64) -> Person {
    Person {
        id: k,
        name: format!("person {}", k % 10_000),
        date_time: 1_700_000_000_000 + k as i64,
    }
}

/// Checkpoint 1 in full and completed, then 1 % of the keys written: the delta of checkpoint 2.
fn bench_delta_of<V: weir_state::Value>(
    c: &mut Criterion,
    name: &str,
    value: impl Fn(u64) -> V + Copy,
) {
    let mut state = table(value);
    let base = IncrementalBase::new();
    let first = frozen(&mut state);
    let plan = base.plan(1, &first);
    let encoding = encode_incremental(&first, range(), &plan).expect("encodes");
    let size = encoding
        .data
        .as_ref()
        .map_or(0, |chunks| chunks.iter().map(|c| c.len() as u64).sum());
    let file = Arc::new(SharedStateFile {
        path: "shared/1".into(),
        size,
        checksum: 0,
    });
    let (chains, _) = encoding.finish(&plan, Some(file)).expect("finishes");
    base.record_written(&plan, chains);
    base.complete(1);
    for k in (0..KEYS).step_by(100) {
        state.set(&CurrentKey::new(&k, MAX_PARALLELISM), value(k + 1));
    }
    let second = frozen(&mut state);
    let plan = base.plan(2, &second);
    let mut group = c.benchmark_group("delta");
    group.throughput(Throughput::Elements(KEYS));
    group.sample_size(10);
    group.bench_function(name, |b| {
        b.iter(|| black_box(encode_incremental(&second, range(), &plan).expect("encodes")))
    });
    group.finish();
}

fn bench_delta(c: &mut Criterion) {
    bench_delta_of(c, "inline", |k| k);
    bench_delta_of(c, "heap", person);
}

criterion_group!(benches, bench_full, bench_delta);
criterion_main!(benches);
