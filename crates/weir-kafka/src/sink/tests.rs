//! The sink against a real broker (`WEIR_TEST_KAFKA`); what is committed is read from the raw
//! batches and their markers ([`crate::committed`]).

use std::time::Duration;

use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;

use super::*;
use crate::committed::read_committed;
use crate::test_broker::{broker, ctx, topic, unique};

fn payloads(topic: &str) -> Vec<String> {
    read_committed(&broker(), topic)
        .unwrap()
        .records
        .iter()
        .map(|r| String::from_utf8(r.payload.clone().unwrap_or_default().to_vec()).unwrap())
        .collect()
}

fn words(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("w{i}")).collect()
}

fn exactly_once(topic: &str, prefix: &str) -> KafkaSink<String> {
    KafkaSink::new(&broker(), topic, Utf8Serializer)
        .guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix(prefix)
}

#[test]
fn exactly_once_records_stay_invisible_until_their_checkpoint_completes() {
    let topic = topic("sink-visible", 2);
    let mut sink = exactly_once(&topic, &unique("visible"));
    sink.open(&ctx(0, 1), None).unwrap();
    sink.write_batch(words(0..100)).unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    let read = read_committed(&broker(), &topic).unwrap();
    assert_eq!((read.records.len(), read.open), (0, 100));

    // Records after the barrier belong to the next transaction.
    sink.write_batch(words(100..150)).unwrap();
    sink.notify_complete(CheckpointId(1)).unwrap();
    let mut got = payloads(&topic);
    got.sort();
    let mut expected = words(0..100);
    expected.sort();
    assert_eq!(got, expected);
    // A repeated notice changes nothing.
    sink.notify_complete(CheckpointId(1)).unwrap();
    assert_eq!(payloads(&topic).len(), 100);
}

#[test]
fn an_aborted_checkpoint_commits_with_the_next_completed_one() {
    let topic = topic("sink-aborted", 1);
    let mut sink = exactly_once(&topic, &unique("aborted"));
    sink.open(&ctx(0, 1), None).unwrap();
    sink.write_batch(words(0..10)).unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    sink.notify_aborted(CheckpointId(1)).unwrap();
    sink.write_batch(words(10..20)).unwrap();
    let state = sink.snapshot(CheckpointId(2)).unwrap();
    assert_eq!(
        SubtaskTransactions::decode(&state[0])
            .unwrap()
            .prepared
            .len(),
        2
    );
    sink.notify_complete(CheckpointId(2)).unwrap();
    assert_eq!(payloads(&topic), words(0..20));
}

#[test]
fn a_restore_commits_what_a_completed_checkpoint_recorded_and_aborts_the_rest() {
    let topic = topic("sink-restore", 2);
    let prefix = unique("restore");
    let mut sink = exactly_once(&topic, &prefix);
    sink.open(&ctx(0, 1), None).unwrap();
    sink.write_batch(words(0..50)).unwrap();
    let state = sink.snapshot(CheckpointId(1)).unwrap();
    // Checkpoint 1 completes, but the job dies before its notice, in the middle of the next
    // transaction.
    sink.write_batch(words(50..80)).unwrap();
    let current = sink.open.as_mut().unwrap().transactional.as_mut().unwrap();
    current.current.as_ref().unwrap().producer.flush().unwrap();
    drop(sink);
    let read = read_committed(&broker(), &topic).unwrap();
    assert_eq!((read.records.len(), read.open), (0, 80));

    let mut restored = exactly_once(&topic, &prefix);
    restored.open(&ctx(0, 1), Some(state.clone())).unwrap();
    let read = read_committed(&broker(), &topic).unwrap();
    assert_eq!((read.records.len(), read.aborted, read.open), (50, 30, 0));

    // The restored sink writes on; a second restore from the same checkpoint commits nothing
    // twice.
    restored.write_batch(words(80..90)).unwrap();
    restored.snapshot(CheckpointId(2)).unwrap();
    restored.notify_complete(CheckpointId(2)).unwrap();
    drop(restored);
    let mut again = exactly_once(&topic, &prefix);
    again.open(&ctx(0, 1), Some(state)).unwrap();
    let mut got = payloads(&topic);
    got.sort();
    let mut expected = words(0..50);
    expected.extend(words(80..90));
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn rescaling_hands_every_old_subtasks_transactions_to_one_new_subtask() {
    let topic = topic("sink-rescale", 3);
    let prefix = unique("rescale");
    let mut union = Vec::new();
    for i in 0..3u32 {
        let mut sink = exactly_once(&topic, &prefix);
        sink.open(&ctx(i, 3), None).unwrap();
        sink.write_batch(words(i * 10..i * 10 + 10)).unwrap();
        union.extend(sink.snapshot(CheckpointId(4)).unwrap());
        sink.write_batch(words(100 + i..101 + i)).unwrap(); // never checkpointed
        let current = sink.open.as_mut().unwrap().transactional.as_mut().unwrap();
        current.current.as_ref().unwrap().producer.flush().unwrap();
    }
    for i in 0..2u32 {
        let mut sink = exactly_once(&topic, &prefix);
        sink.open(&ctx(i, 2), Some(union.clone())).unwrap();
    }
    let read = read_committed(&broker(), &topic).unwrap();
    assert_eq!((read.records.len(), read.aborted, read.open), (30, 3, 0));
}

#[test]
fn at_least_once_flushes_on_the_barrier() {
    let topic = topic("sink-alo", 1);
    let mut sink = KafkaSink::new(&broker(), &topic, Utf8Serializer).property("linger.ms", "10000");
    sink.open(&ctx(0, 1), None).unwrap();
    sink.write_batch(words(0..5)).unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    assert_eq!(payloads(&topic), words(0..5));
}

#[test]
fn a_transaction_timeout_under_three_checkpoint_intervals_is_refused() {
    let sink = exactly_once("t", "p")
        .checkpoint_interval(Duration::from_secs(10))
        .transaction_timeout(Duration::from_secs(29));
    let error = sink.validate().unwrap_err().to_string();
    assert!(
        error.contains("transaction.timeout.ms = 29000 ms"),
        "{error}"
    );
    assert!(exactly_once("t", "p")
        .transactional_id_prefix("a b")
        .validate()
        .is_err());
    assert!(KafkaSink::new("b", "t", Utf8Serializer)
        .guarantee(DeliveryGuarantee::ExactlyOnce)
        .validate()
        .is_err());
}
