//! What a `read_committed` consumer must see of a topic, worked out from the raw record
//! batches and their transaction markers rather than trusted to the broker's filtering (some
//! brokers, tansu among them, do not tell consumers which transactions were aborted).
//!
//! For each partition every batch is read from offset 0 to the high watermark: records outside
//! transactions count at once; a producer's transactional records are held until a control
//! record of that producer says COMMIT (kept) or ABORT (dropped); those still held at the end
//! belong to open transactions and are not counted. [`CommittedReader`] does it incrementally,
//! picking up where it left off; [`read_committed`] reads a topic once.

use std::collections::HashMap;

use bytes::{Buf, Bytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};

use crate::error::KafkaError;
use crate::wire::WireClient;

/// How long one fetch may take before it is sent again on a new connection: the test broker
/// (tansu 0.6) was seen leaving a fetch unanswered while transactions were being written to
/// the partition.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const FETCH_ATTEMPTS: u32 = 3;
/// How many fetches (50 ms apart) wait for a gap in the offsets to fill before it is taken to
/// be a real gap (a compacted or truncated log) and skipped.
const GAP_STALLS: u32 = 60;

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
    /// In partition order, then offset order (empty when only counted).
    pub records: Vec<CommittedRecord>,
    /// Committed records (the length of `records` when they are kept).
    pub committed: u64,
    /// Records of aborted transactions.
    pub aborted: u64,
    /// Records of transactions with no marker yet (open).
    pub open: u64,
    /// COMMIT and ABORT markers seen.
    pub commits: u64,
    pub aborts: u64,
}

/// Reads every partition of `topic` once, through the broker at `bootstrap` (host:port, one
/// broker that leads every partition).
pub fn read_committed(bootstrap: &str, topic: &str) -> Result<CommittedTopic, KafkaError> {
    let mut reader = CommittedReader::new(bootstrap, topic, true)?;
    reader.catch_up()?;
    Ok(reader.finish())
}

/// Reads a topic's committed records as they come: each [`catch_up`](Self::catch_up) reads
/// every partition up to its current high watermark.
pub struct CommittedReader {
    client: WireClient,
    topic: String,
    keep: bool,
    partitions: Vec<PartitionReader>,
    result: CommittedTopic,
}

struct PartitionReader {
    partition: i32,
    offset: i64,
    /// Each producer's records waiting for its transaction's marker.
    pending: HashMap<i64, Vec<Record>>,
    committed: Vec<Record>,
}

impl CommittedReader {
    /// A reader of `topic`'s partitions as they are now; `keep_records` keeps the committed
    /// records themselves, not only their count.
    pub fn new(bootstrap: &str, topic: &str, keep_records: bool) -> Result<Self, KafkaError> {
        let mut client = WireClient::bootstrap(bootstrap)?;
        client.set_timeout(FETCH_TIMEOUT);
        let partitions = client
            .partition_count(topic)?
            .ok_or_else(|| KafkaError::Config(format!("topic {topic} does not exist")))?;
        Ok(CommittedReader {
            client,
            topic: topic.to_string(),
            keep: keep_records,
            partitions: (0..partitions)
                .map(|partition| PartitionReader {
                    partition,
                    offset: 0,
                    pending: HashMap::new(),
                    committed: Vec::new(),
                })
                .collect(),
            result: CommittedTopic::default(),
        })
    }

    /// Reads every partition up to its high watermark.
    pub fn catch_up(&mut self) -> Result<(), KafkaError> {
        for p in &mut self.partitions {
            p.catch_up(&mut self.client, &self.topic, self.keep, &mut self.result)?;
        }
        Ok(())
    }

    /// Committed records read so far.
    pub fn committed(&self) -> u64 {
        self.result.committed
    }

    /// Where the reader is in each partition: (partition, next offset, records waiting for
    /// their transaction's marker).
    pub fn positions(&self) -> Vec<(i32, i64, usize)> {
        self.partitions
            .iter()
            .map(|p| {
                let waiting = p.pending.values().map(Vec::len).sum();
                (p.partition, p.offset, waiting)
            })
            .collect()
    }

    /// What was read, with the records of transactions still open counted as open.
    pub fn finish(mut self) -> CommittedTopic {
        for p in self.partitions {
            self.result.open += p.pending.values().map(|v| v.len() as u64).sum::<u64>();
            let mut committed = p.committed;
            committed.sort_by_key(|r| r.offset);
            self.result
                .records
                .extend(committed.into_iter().map(|r| CommittedRecord {
                    partition: p.partition,
                    offset: r.offset,
                    key: r.key,
                    payload: r.value,
                }));
        }
        self.result
    }
}

impl PartitionReader {
    fn catch_up(
        &mut self,
        client: &mut WireClient,
        topic: &str,
        keep: bool,
        result: &mut CommittedTopic,
    ) -> Result<(), KafkaError> {
        let partition = self.partition;
        let mut stalled = 0;
        loop {
            let mut attempt = 1;
            let fetch = loop {
                match client.fetch_raw(topic, partition, self.offset, 8 << 20) {
                    Ok(fetch) => break fetch,
                    Err(e) if attempt >= FETCH_ATTEMPTS => return Err(e),
                    Err(e) => {
                        tracing::warn!("{e}; fetching again");
                        attempt += 1;
                    }
                }
            };
            if self.offset >= fetch.high_watermark {
                return Ok(());
            }
            let mut buf = fetch.records;
            let before = self.offset;
            while buf.remaining() >= 12 {
                // A batch cut off at the end of the response is fetched again next time.
                let length = i32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")) as usize;
                if buf.remaining() < 12 + length {
                    break;
                }
                let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| KafkaError::Broker {
                    what: format!(
                        "decoding a record batch of {topic}[{partition}] after offset {}",
                        self.offset
                    ),
                    message: e.to_string(),
                })?;
                let mut gap = false;
                for record in set.records {
                    if record.offset < self.offset {
                        continue;
                    }
                    if record.offset > self.offset && stalled < GAP_STALLS {
                        // Offsets before this record are not readable yet: the test broker
                        // (tansu 0.6) was seen exposing a later producer's batch before an
                        // earlier one's under load. Fetch again rather than skip them.
                        gap = true;
                        break;
                    }
                    self.offset = record.offset + 1;
                    self.take(record, keep, result);
                }
                if gap {
                    break;
                }
            }
            if self.offset > before {
                stalled = 0;
            } else if stalled < 100 {
                // A write in flight: the high watermark can move before the batch can be read.
                stalled += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            } else {
                return Err(KafkaError::Broker {
                    what: format!("reading {topic}[{partition}]"),
                    message: format!(
                        "no progress at offset {} (high watermark {})",
                        self.offset, fetch.high_watermark
                    ),
                });
            }
        }
    }

    fn take(&mut self, record: Record, keep: bool, result: &mut CommittedTopic) {
        if record.control {
            let commit = control_type(&record) == Some(1);
            let held = self.pending.remove(&record.producer_id).unwrap_or_default();
            if commit {
                result.commits += 1;
                result.committed += held.len() as u64;
                if keep {
                    self.committed.extend(held);
                }
            } else {
                result.aborts += 1;
                result.aborted += held.len() as u64;
            }
        } else if record.transactional {
            self.pending
                .entry(record.producer_id)
                .or_default()
                .push(record);
        } else {
            result.committed += 1;
            if keep {
                self.committed.push(record);
            }
        }
    }
}

/// A control record's type from its key (version, type): 0 ABORT, 1 COMMIT.
fn control_type(record: &Record) -> Option<i16> {
    let key = record.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}
