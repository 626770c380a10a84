//! The source against a real broker (`WEIR_TEST_KAFKA`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_core::CheckpointId;
use weir_runtime::{SourceFunction, SourceStatus, TaskError};

use super::*;
use crate::test_broker::{broker, ctx, produce, topic, unique};
use crate::wire::WireClient;

/// Records `p{partition}-{offset}`: each names where it is.
fn fill(topic: &str, partitions: i32, per_partition: usize) -> Vec<String> {
    let mut all = Vec::new();
    for p in 0..partitions {
        let payloads: Vec<String> = (0..per_partition).map(|i| format!("p{p}-{i}")).collect();
        produce(topic, p, &payloads);
        all.extend(payloads);
    }
    all
}

fn where_from(record: &str) -> (i32, i64) {
    let (p, o) = record[1..].split_once('-').unwrap();
    (p.parse().unwrap(), o.parse().unwrap())
}

/// Polls until `count` records came or nothing more comes for a while.
fn read<W: SplitEventTime<String>>(
    source: &mut KafkaSource<String, W>,
    count: usize,
    batch: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut quiet_since = Instant::now();
    while out.len() < count && quiet_since.elapsed() < Duration::from_secs(5) {
        let mut records = Vec::new();
        let max = batch.min(count - out.len());
        match source.poll_batch(&mut records, max).unwrap() {
            SourceStatus::Emitted => quiet_since = Instant::now(),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
        out.extend(records);
    }
    out
}

#[test]
fn checkpoint_offsets_equal_what_was_emitted_before_the_barrier_and_a_restore_resumes_there() {
    let topic = topic("source-positions", 4);
    let all = fill(&topic, 4, 300);
    let source = KafkaSource::utf8(&broker(), &[&topic]);

    // Two subtasks read part of the input; then the barrier of checkpoint 1 passes.
    let mut old: Vec<KafkaSource<String>> = (0..2).map(|_| source.clone()).collect();
    let mut before_barrier = Vec::new();
    let mut list = Vec::new();
    let mut union = Vec::new();
    for (i, s) in old.iter_mut().enumerate() {
        s.open(&ctx(i as u32, 2), None).unwrap();
        let emitted = read(s, 250, 37);
        assert_eq!(emitted.len(), 250);
        s.snapshot_started(CheckpointId(1));
        let position = s.snapshot_position().unwrap();
        union.extend(s.snapshot_union().unwrap());

        // Every split's offset is one past the last record emitted from its partition.
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for record in &emitted {
            let (p, o) = where_from(record);
            let n = next.entry(p).or_insert(0);
            *n = (*n).max(o + 1);
        }
        for element in &position {
            let split = Split::decode(element).unwrap();
            assert_eq!(
                split.next_offset,
                next.get(&split.partition.partition).copied().unwrap_or(0),
                "{split:?}"
            );
        }
        list.extend(position);
        before_barrier.extend(emitted);
        // Read on past the barrier; these records are lost with the crash below.
        read(s, 40, 40);
    }
    drop(old);

    // Restore at parallelism 3: list state dealt round-robin, union state to everyone.
    let mut after = Vec::new();
    for i in 0..3u32 {
        let mut s = source.clone();
        s.restore_union(union.clone()).unwrap();
        let mine: Vec<Vec<u8>> = list
            .iter()
            .enumerate()
            .filter(|(k, _)| *k as u32 % 3 == i)
            .map(|(_, e)| e.clone())
            .collect();
        s.open(&ctx(i, 3), Some(mine)).unwrap();
        after.extend(read(&mut s, usize::MAX, 100));
    }
    let mut seen = before_barrier.clone();
    seen.extend(after);
    seen.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(seen.len(), expected.len(), "records read twice or skipped");
    assert_eq!(seen, expected);
}

#[test]
fn a_subtask_restored_with_no_split_reads_nothing_held_elsewhere() {
    let topic = topic("source-empty-restore", 1);
    fill(&topic, 1, 10);
    let source = KafkaSource::utf8(&broker(), &[&topic]);
    let mut first = source.clone();
    first.open(&ctx(0, 1), None).unwrap();
    let union = first.snapshot_union().unwrap();
    let mut second = source.clone();
    second.restore_union(union).unwrap();
    second.open(&ctx(1, 2), Some(Vec::new())).unwrap();
    assert!(read(&mut second, usize::MAX, 100).is_empty());
}

#[test]
fn a_bad_record_fails_with_its_topic_partition_and_offset_or_is_skipped_and_counted() {
    let topic = topic("source-bad", 1);
    produce(
        &topic,
        0,
        &["{\"n\": 1}".into(), "oops".into(), "{\"n\": 3}".into()],
    );
    #[derive(serde::Deserialize)]
    struct N {
        n: i64,
    }
    let mut failing = KafkaSource::<N>::json(&broker(), &[&topic]);
    failing.open(&ctx(0, 1), None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut records = Vec::new();
    let error = loop {
        match failing.poll_batch(&mut records, 10) {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => panic!("the bad record was not reported"),
        }
    };
    let TaskError::BadInput(message) = error else {
        panic!("{error:?}")
    };
    assert!(
        message.contains(&format!("offset 1 of {topic}[0]")),
        "{message}"
    );

    let mut skipping =
        KafkaSource::<N>::json(&broker(), &[&topic]).bad_records(BadRecordPolicy::Skip);
    skipping.open(&ctx(0, 1), None).unwrap();
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while values.len() < 2 && Instant::now() < deadline {
        skipping.poll_batch(&mut values, 10).unwrap();
    }
    assert_eq!(values.iter().map(|v| v.n).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(skipping.skipped(), 1);
}

#[test]
fn partitions_of_a_topic_that_appears_later_are_discovered_and_read_from_the_start() {
    let stem = unique("discover");
    let first = format!("{stem}-a");
    WireClient::connect(&broker())
        .unwrap()
        .create_topic(&first, 1)
        .unwrap();
    produce(&first, 0, &["a0".into()]);
    let mut source = KafkaSource::utf8(&broker(), &[])
        .topic_pattern(&format!("{stem}-.*"))
        .unwrap()
        .discovery_interval(Duration::from_millis(100));
    source.open(&ctx(0, 1), None).unwrap();
    assert_eq!(read(&mut source, 1, 10), ["a0"]);

    let second = format!("{stem}-b");
    WireClient::connect(&broker())
        .unwrap()
        .create_topic(&second, 2)
        .unwrap();
    produce(&second, 0, &["b0".into()]);
    produce(&second, 1, &["b1".into()]);
    let mut got = read(&mut source, 2, 10);
    got.sort();
    assert_eq!(got, ["b0", "b1"]);
    assert_eq!(source.splits().len(), 3);
}

#[test]
fn starting_offsets_latest_committed_and_timestamp_resolve_before_the_first_record() {
    let topic = topic("source-start", 1);
    fill(&topic, 1, 5);
    let group = unique("group");

    let mut latest =
        KafkaSource::utf8(&broker(), &[&topic]).starting_offsets(StartingOffsets::Latest);
    latest.open(&ctx(0, 1), None).unwrap();
    assert_eq!(latest.splits()[0].next_offset, 5);

    // A completed checkpoint's offsets go to the group; a new job can start from them.
    let mut reader = KafkaSource::utf8(&broker(), &[&topic]).group_id(&group);
    reader.open(&ctx(0, 1), None).unwrap();
    assert_eq!(read(&mut reader, 3, 3).len(), 3);
    reader.snapshot_started(CheckpointId(7));
    reader.snapshot_position().unwrap();
    reader.notify_complete(CheckpointId(7)).unwrap();
    let mut committed = KafkaSource::utf8(&broker(), &[&topic])
        .group_id(&group)
        .starting_offsets(StartingOffsets::Committed);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        committed.open(&ctx(0, 1), None).unwrap();
        if committed.splits()[0].next_offset == 3 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100)); // the commit was asynchronous
    }
    assert_eq!(committed.splits()[0].next_offset, 3);

    // The first record at or after a time: written after it.
    std::thread::sleep(Duration::from_millis(20));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    std::thread::sleep(Duration::from_millis(20));
    produce(&topic, 0, &["late".into()]);
    let mut since =
        KafkaSource::utf8(&broker(), &[&topic]).starting_offsets(StartingOffsets::Timestamp(now));
    since.open(&ctx(0, 1), None).unwrap();
    assert_eq!(since.splits()[0].next_offset, 5);
    assert_eq!(read(&mut since, 1, 1), ["late"]);
}

#[test]
fn each_partition_has_its_own_watermark_and_the_slowest_active_one_sets_the_subtasks() {
    let topic = topic("source-event-time", 2);
    // Event time is the payload: partition 0 is far ahead of partition 1.
    let ahead: Vec<String> = (100_000..100_010).map(|t: i64| t.to_string()).collect();
    let behind: Vec<String> = (5_000..5_010).map(|t: i64| t.to_string()).collect();
    produce(&topic, 0, &ahead);
    produce(&topic, 1, &behind);
    let strategy =
        WatermarkStrategy::for_monotonous_timestamps(|s: &String| s.parse::<i64>().unwrap())
            .with_interval(Duration::ZERO)
            .with_idleness(Duration::from_secs(1));
    let source = KafkaSource::utf8(&broker(), &[&topic]).watermarks(strategy);

    let mut one = source.clone();
    one.open(&ctx(0, 1), None).unwrap();
    assert_eq!(read(&mut one, 20, 7).len(), 20);
    // One watermark over both partitions would be 100,008 and make partition 1 late.
    assert_eq!(
        one.event_time(Instant::now()),
        SourceEventTime::Watermark(5_008)
    );
    // Partition 1 goes quiet for longer than the idleness timeout: partition 0 alone counts.
    produce(&topic, 0, &["100020".to_string()]);
    assert_eq!(read(&mut one, 1, 7), ["100020"]);
    assert_eq!(
        one.event_time(Instant::now() + Duration::from_secs(2)),
        SourceEventTime::Watermark(100_019)
    );

    // With more subtasks than partitions, a subtask holding none is idle.
    let mut idle = (0..3)
        .map(|i| {
            let mut s = source.clone();
            s.open(&ctx(i, 3), None).unwrap();
            s
        })
        .find(|s| s.splits().is_empty())
        .expect("three subtasks share two partitions");
    assert_eq!(idle.event_time(Instant::now()), SourceEventTime::Idle);
}
