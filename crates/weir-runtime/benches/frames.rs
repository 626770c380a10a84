//! Encoding and decoding the data plane's frames: a batch of 1,024 records, as a producer
//! sends it to a task manager and the consumer's task manager decodes it, in the data plane's
//! fixed-width format (`wire_format`) and in postcard (its varints, as the state and the
//! checkpoints use). `events` are keyed-count's records (three `u64`: a key below 100,000, an
//! amount below 100, a sequence number near 50 M); `words` are wordcount's (a word and a
//! count). Throughput is in records.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::hint::black_box;
use weir_core::Element;
use weir_runtime::wire_format;

const BATCH: usize = 1024;

#[derive(Clone, Serialize, Deserialize)]
struct Event {
    user: u64,
    amount: u64,
    seq: u64,
}

fn events() -> Element<Event> {
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    Element::Records(
        (0..BATCH as u64)
            .map(|i| Event {
                user: next() % 100_000,
                amount: next() % 100,
                seq: 50_000_000 + i,
            })
            .collect(),
    )
}

fn words() -> Element<(String, u64)> {
    const WORDS: [&str; 8] = [
        "the",
        "river",
        "weir",
        "holds",
        "water",
        "back",
        "and",
        "overflows",
    ];
    Element::Records(
        (0..BATCH)
            .map(|i| (WORDS[i % WORDS.len()].to_string(), (i % 7) as u64 + 1))
            .collect(),
    )
}

fn bench_batch<T: Serialize + DeserializeOwned>(c: &mut Criterion, name: &str, batch: Element<T>) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut out = Vec::new();
    group.bench_function("encode/wire_format", |b| {
        b.iter(|| {
            out.clear();
            wire_format::encode_into(black_box(&batch), &mut out).expect("encodes");
            black_box(out.len())
        })
    });
    group.bench_function("encode/postcard", |b| {
        b.iter(|| {
            out.clear();
            out =
                postcard::to_extend(black_box(&batch), std::mem::take(&mut out)).expect("encodes");
            black_box(out.len())
        })
    });
    let mut wire = Vec::new();
    wire_format::encode_into(&batch, &mut wire).expect("encodes");
    let varint = postcard::to_allocvec(&batch).expect("encodes");
    println!(
        "{name}: a batch of {BATCH} is {} bytes in wire_format, {} in postcard",
        wire.len(),
        varint.len()
    );
    group.bench_function("decode/wire_format", |b| {
        b.iter(|| black_box(wire_format::decode::<Element<T>>(black_box(&wire)).expect("decodes")))
    });
    group.bench_function("decode/postcard", |b| {
        b.iter(|| {
            black_box(postcard::from_bytes::<Element<T>>(black_box(&varint)).expect("decodes"))
        })
    });
    group.finish();
}

fn bench_frames(c: &mut Criterion) {
    bench_batch(c, "events", events());
    bench_batch(c, "words", words());
}

criterion_group!(benches, bench_frames);
criterion_main!(benches);
