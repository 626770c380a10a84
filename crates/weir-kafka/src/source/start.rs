//! Where a fresh start begins: each partition's first offset resolved before the first record
//! is read, so that a checkpoint taken before any record records a concrete position.

use std::collections::BTreeMap;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{Config, TopicPartition, REQUEST_TIMEOUT};
use crate::error::KafkaError;
use crate::wire::WireClient;

/// Where a fresh start begins reading each partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartingOffsets {
    /// The first record still in the partition (the default).
    Earliest,
    /// The end of the partition: only records written after the start.
    Latest,
    /// The offsets committed to the consumer group ([`KafkaSource::group_id`](super::KafkaSource::group_id)), or the
    /// earliest for a partition without one.
    Committed,
    /// The first record with a timestamp at or after this many milliseconds since the epoch
    /// (the end of the partition if there is none).
    Timestamp(i64),
}

/// The end of a partition. Some brokers (tansu 0.6) answer a `ListOffsets` for the latest
/// offset with one past the last batch's first record rather than past its last record,
/// so the high watermark of a fetch is taken too when the broker at the bootstrap address
/// leads the partition, and the larger of the two wins.
fn end_offset(config: &Config, p: &TopicPartition, low: i64, listed: i64) -> i64 {
    let fetched = WireClient::bootstrap(&config.bootstrap_servers)
        .and_then(|mut c| c.fetch_raw(&p.topic, p.partition, low, 1))
        .map(|f| f.high_watermark)
        .unwrap_or(listed);
    listed.max(fetched)
}

/// The offsets the configured starting point resolves to, for partitions of a fresh start.
pub(super) fn resolve_start(
    config: &Config,
    consumer: &BaseConsumer,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>, KafkaError> {
    let mut offsets = BTreeMap::new();
    let watermarks = |p: &TopicPartition| {
        consumer
            .fetch_watermarks(&p.topic, p.partition, REQUEST_TIMEOUT)
            .map_err(|e| {
                KafkaError::client(
                    format!("reading the offsets of {}[{}]", p.topic, p.partition),
                    e,
                )
            })
    };
    match &config.starting_offsets {
        StartingOffsets::Earliest => {
            for p in partitions {
                offsets.insert(p.clone(), watermarks(p)?.0);
            }
        }
        StartingOffsets::Latest => {
            for p in partitions {
                let (low, high) = watermarks(p)?;
                offsets.insert(p.clone(), end_offset(config, p, low, high));
            }
        }
        StartingOffsets::Committed => {
            if config.group_id.is_none() {
                return Err(KafkaError::Config(
                    "starting from committed offsets needs a group id".into(),
                ));
            }
            let mut list = TopicPartitionList::new();
            for p in partitions {
                list.add_partition(&p.topic, p.partition);
            }
            let committed = consumer
                .committed_offsets(list, REQUEST_TIMEOUT)
                .map_err(|e| KafkaError::client("reading the group's committed offsets", e))?;
            for p in partitions {
                let offset = match committed
                    .find_partition(&p.topic, p.partition)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) if o >= 0 => o,
                    _ => watermarks(p)?.0,
                };
                offsets.insert(p.clone(), offset);
            }
        }
        StartingOffsets::Timestamp(ms) => {
            let mut list = TopicPartitionList::new();
            for p in partitions {
                list.add_partition_offset(&p.topic, p.partition, Offset::Offset(*ms))
                    .map_err(|e| KafkaError::client("looking offsets up by time", e))?;
            }
            let found = consumer
                .offsets_for_times(list, REQUEST_TIMEOUT)
                .map_err(|e| KafkaError::client("looking offsets up by time", e))?;
            for p in partitions {
                let offset = match found
                    .find_partition(&p.topic, p.partition)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) if o >= 0 => o,
                    _ => {
                        let (low, high) = watermarks(p)?;
                        end_offset(config, p, low, high)
                    }
                };
                offsets.insert(p.clone(), offset);
            }
        }
    }
    Ok(offsets)
}
