//! What a `read_committed` consumer must see of a topic, worked out from the raw record
//! batches and their transaction markers rather than trusted to the broker's filtering (some
//! brokers, tansu among them, do not tell consumers which transactions were aborted).
//!
//! For each partition every batch is read from offset 0 to the high watermark: records outside
//! transactions count at once; a producer's transactional records are held until a control
//! record of that producer says COMMIT (kept) or ABORT (dropped); those still held at the end
//! belong to open transactions and are not counted.

use std::collections::HashMap;

use bytes::{Buf, Bytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};

use crate::error::KafkaError;
use crate::wire::WireClient;

/// A record of a committed transaction, or written outside any transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub payload: Option<Bytes>,
}

/// A topic's committed records and what was left out.
#[derive(Clone, Debug, Default)]
pub struct CommittedTopic {
    /// In partition order, then offset order.
    pub records: Vec<CommittedRecord>,
    /// Records of aborted transactions.
    pub aborted: u64,
    /// Records of transactions with no marker yet (open).
    pub open: u64,
    /// COMMIT and ABORT markers seen.
    pub commits: u64,
    pub aborts: u64,
}

/// Reads every partition of `topic` through the broker at `bootstrap` (host:port, one broker
/// that leads every partition).
pub fn read_committed(bootstrap: &str, topic: &str) -> Result<CommittedTopic, KafkaError> {
    let mut client = WireClient::bootstrap(bootstrap)?;
    let partitions = client
        .partition_count(topic)?
        .ok_or_else(|| KafkaError::Config(format!("topic {topic} does not exist")))?;
    let mut result = CommittedTopic::default();
    for partition in 0..partitions {
        read_partition(&mut client, topic, partition, &mut result)?;
    }
    Ok(result)
}

fn read_partition(
    client: &mut WireClient,
    topic: &str,
    partition: i32,
    result: &mut CommittedTopic,
) -> Result<(), KafkaError> {
    let mut pending: HashMap<i64, Vec<Record>> = HashMap::new();
    let mut committed: Vec<Record> = Vec::new();
    let mut offset = 0;
    let mut stalled = 0;
    loop {
        let fetch = client.fetch_raw(topic, partition, offset, 8 << 20)?;
        if offset >= fetch.high_watermark {
            break;
        }
        let mut buf = fetch.records;
        let before = offset;
        while buf.remaining() >= 12 {
            // A batch cut off at the end of the response is fetched again next time.
            let length = i32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
            if buf.remaining() < 12 + length {
                break;
            }
            let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| KafkaError::Broker {
                what: format!(
                    "decoding a record batch of {topic}[{partition}] after offset {offset}"
                ),
                message: e.to_string(),
            })?;
            for record in set.records {
                if record.offset < offset {
                    continue;
                }
                offset = record.offset + 1;
                if record.control {
                    let commit = control_type(&record) == Some(1);
                    let held = pending.remove(&record.producer_id).unwrap_or_default();
                    if commit {
                        result.commits += 1;
                        committed.extend(held);
                    } else {
                        result.aborts += 1;
                        result.aborted += held.len() as u64;
                    }
                } else if record.transactional {
                    pending.entry(record.producer_id).or_default().push(record);
                } else {
                    committed.push(record);
                }
            }
        }
        if offset > before {
            stalled = 0;
        } else if stalled < 100 {
            // A write in flight: the high watermark can move before the batch can be read.
            stalled += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
        } else {
            return Err(KafkaError::Broker {
                what: format!("reading {topic}[{partition}]"),
                message: format!(
                    "no progress at offset {offset} (high watermark {})",
                    fetch.high_watermark
                ),
            });
        }
    }
    result.open += pending.values().map(|v| v.len() as u64).sum::<u64>();
    committed.sort_by_key(|r| r.offset);
    result
        .records
        .extend(committed.into_iter().map(|r| CommittedRecord {
            partition,
            offset: r.offset,
            key: r.key,
            payload: r.value,
        }));
    Ok(())
}

/// A control record's type from its key (version, type): 0 ABORT, 1 COMMIT.
fn control_type(record: &Record) -> Option<i16> {
    let key = record.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}
