//! The Kafka source: the partitions of a set of topics (or of every topic matching a pattern)
//! read in parallel, each partition's offset in the checkpoint, exactly once.
//!
//! # Splits and their owners
//!
//! A partition is a split. Each subtask holds a set of splits, each with the offset of the
//! next record to read, and reads them with one consumer assigned to exactly those partitions
//! (no consumer-group rebalancing: Weir decides who reads what). On a fresh start every subtask
//! lists the topics' partitions and takes those that [`owner`] gives it, from the configured
//! [`StartingOffsets`], resolved to concrete offsets before the first record is read, so that
//! a checkpoint taken before any record records where reading starts.
//!
//! # Checkpoints
//!
//! A subtask's held splits are its list state: the task loop takes the position between two
//! batches, right after the barrier went out, so each split's offset is one past the last
//! record emitted before the barrier. On restore the splits are dealt round-robin over the new
//! subtasks, whatever their number. Each subtask's set of held partitions is also union
//! state, so that after a restore every subtask knows every partition some subtask holds.
//!
//! # New partitions
//!
//! Every [`discovery_interval`](KafkaSource::discovery_interval) each subtask lists the topics
//! again; a partition no subtask held at the restored checkpoint nor since, and that [`owner`]
//! gives this subtask, is read from its earliest offset (a partition that appears while the
//! job runs is read in full, as Flink does).
//!
//! # Offsets in the consumer group
//!
//! With a [`group_id`](KafkaSource::group_id), the offsets of a checkpoint are committed to the
//! group when that checkpoint completes, for monitoring (lag) and for
//! [`StartingOffsets::Committed`] in a later, new job. A restore never reads them: it starts
//! from the checkpoint.
//!
//! # Event time
//!
//! With [`watermarks`](KafkaSource::watermarks) each partition a subtask reads gets a
//! watermark generator of its own (Flink's per-split watermarks): the subtask's watermark is
//! the smallest of its partitions' watermarks, so a partition that lags behind the others
//! holds event time back instead of seeing its records arrive late. A partition that read
//! nothing for longer than the strategy's idleness timeout is left out until it reads again,
//! and a subtask whose partitions are all idle (or that holds none) is idle. Event time is
//! read from the deserialised value by the strategy's timestamp function; a deserializer that
//! wants the record's Kafka timestamp puts [`RecordView::timestamp`] into its value.
//!
//! # Transactions
//!
//! The consumer reads with `isolation.level=read_committed` by default: records of open
//! transactions are held back until they commit. (Whether the records of aborted transactions
//! are dropped depends on the broker telling the consumer which ones were aborted.)

mod deserialize;
mod discovery;
mod split;
mod start;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use weir_core::CheckpointId;
use weir_runtime::split_watermarks::{
    NoSplitEventTime, SourceEventTime, SplitEventTime, SplitWatermarks,
};
use weir_runtime::watermark::{WatermarkGenerator, WatermarkStrategy};
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

pub use self::deserialize::{
    BadRecordPolicy, BytesDeserializer, JsonDeserializer, RecordDeserializer, RecordView,
    Utf8Deserializer,
};
use self::discovery::{discover, list_partitions};
pub use self::split::{owner, Split, TopicPartition};
pub use self::start::StartingOffsets;
use crate::error::KafkaError;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Which topics the source reads.
#[derive(Clone, Debug)]
enum Topics {
    Names(Vec<String>),
    Pattern(regex::Regex),
}

impl Topics {
    fn matches(&self, topic: &str) -> bool {
        match self {
            Topics::Names(names) => names.iter().any(|n| n == topic),
            Topics::Pattern(pattern) => pattern.is_match(topic),
        }
    }
}

#[derive(Clone, Debug)]
struct Config {
    bootstrap_servers: String,
    topics: Topics,
    group_id: Option<String>,
    starting_offsets: StartingOffsets,
    discovery_interval: Duration,
    read_committed: bool,
    bad_records: BadRecordPolicy,
    properties: Vec<(String, String)>,
}

/// Reads records from Kafka as values of type `T`. Configure it, then hand it to the job; each
/// subtask opens its own clone.
///
/// ```no_run
/// use std::time::Duration;
/// use weir_kafka::{KafkaSource, StartingOffsets};
///
/// let source = KafkaSource::utf8("broker:9092", &["words"])
///     .starting_offsets(StartingOffsets::Earliest)
///     .group_id("wordcount")
///     .discovery_interval(Duration::from_secs(30));
/// ```
pub struct KafkaSource<T, W = NoSplitEventTime> {
    config: Config,
    deserializer: Arc<dyn RecordDeserializer<T>>,
    event_time: W,
    skipped: Arc<AtomicU64>,
    restored_union: Option<BTreeSet<TopicPartition>>,
    open: Option<OpenSource>,
}

impl<T, W: Clone> Clone for KafkaSource<T, W> {
    /// A source with the same configuration, not opened. Clones share the count of skipped
    /// records.
    fn clone(&self) -> Self {
        KafkaSource {
            config: self.config.clone(),
            deserializer: Arc::clone(&self.deserializer),
            event_time: self.event_time.clone(),
            skipped: Arc::clone(&self.skipped),
            restored_union: None,
            open: None,
        }
    }
}

impl KafkaSource<String> {
    /// A source of the payloads of `topics` as UTF-8 text.
    pub fn utf8(bootstrap_servers: &str, topics: &[&str]) -> KafkaSource<String> {
        KafkaSource::new(bootstrap_servers, topics, Utf8Deserializer)
    }
}

impl KafkaSource<Vec<u8>> {
    /// A source of the payloads of `topics` as bytes.
    pub fn bytes(bootstrap_servers: &str, topics: &[&str]) -> KafkaSource<Vec<u8>> {
        KafkaSource::new(bootstrap_servers, topics, BytesDeserializer)
    }
}

impl<T: serde::de::DeserializeOwned + 'static> KafkaSource<T> {
    /// A source of the payloads of `topics` parsed as JSON.
    pub fn json(bootstrap_servers: &str, topics: &[&str]) -> KafkaSource<T> {
        KafkaSource::new(bootstrap_servers, topics, JsonDeserializer::<T>::default())
    }
}

impl<T> KafkaSource<T> {
    /// A source of `topics` through `deserializer`.
    pub fn new(
        bootstrap_servers: &str,
        topics: &[&str],
        deserializer: impl RecordDeserializer<T>,
    ) -> KafkaSource<T> {
        KafkaSource {
            config: Config {
                bootstrap_servers: bootstrap_servers.to_string(),
                topics: Topics::Names(topics.iter().map(|t| t.to_string()).collect()),
                group_id: None,
                starting_offsets: StartingOffsets::Earliest,
                discovery_interval: Duration::from_secs(10),
                read_committed: true,
                bad_records: BadRecordPolicy::Fail,
                properties: Vec::new(),
            },
            deserializer: Arc::new(deserializer),
            event_time: NoSplitEventTime,
            skipped: Arc::new(AtomicU64::new(0)),
            restored_union: None,
            open: None,
        }
    }
}

impl<T, W> KafkaSource<T, W> {
    /// Event time per partition, from `strategy` (see the module documentation). Add the
    /// source to the job without a watermark strategy of its own.
    pub fn watermarks<G: WatermarkGenerator<T>>(
        self,
        strategy: WatermarkStrategy<G>,
    ) -> KafkaSource<T, SplitWatermarks<G>> {
        KafkaSource {
            config: self.config,
            deserializer: self.deserializer,
            event_time: SplitWatermarks::new(strategy),
            skipped: self.skipped,
            restored_union: self.restored_union,
            open: self.open,
        }
    }

    /// Reads every topic whose whole name matches `pattern` (a regular expression) instead of
    /// the topics given; topics created later that match are found like new partitions.
    pub fn topic_pattern(mut self, pattern: &str) -> Result<Self, KafkaError> {
        let anchored = format!("^(?:{pattern})$");
        let regex = regex::Regex::new(&anchored)
            .map_err(|e| KafkaError::Config(format!("topic pattern `{pattern}`: {e}")))?;
        self.config.topics = Topics::Pattern(regex);
        Ok(self)
    }

    /// The consumer group that completed checkpoints' offsets are committed to (default:
    /// none, nothing is committed).
    pub fn group_id(mut self, group: &str) -> Self {
        self.config.group_id = Some(group.to_string());
        self
    }

    /// Where a fresh start begins (default: earliest). A restore starts from the checkpoint.
    pub fn starting_offsets(mut self, offsets: StartingOffsets) -> Self {
        self.config.starting_offsets = offsets;
        self
    }

    /// How often the topics are listed again for new partitions (default 10 s).
    pub fn discovery_interval(mut self, interval: Duration) -> Self {
        self.config.discovery_interval = interval;
        self
    }

    /// Reads records of open transactions too (`read_uncommitted`); the default is
    /// `read_committed`.
    pub fn read_uncommitted(mut self) -> Self {
        self.config.read_committed = false;
        self
    }

    /// What to do with a record the deserializer refuses (default: fail the job).
    pub fn bad_records(mut self, policy: BadRecordPolicy) -> Self {
        self.config.bad_records = policy;
        self
    }

    /// A librdkafka consumer property (`fetch.max.bytes`, `security.protocol`, …). The
    /// source sets `bootstrap.servers`, `group.id`, `isolation.level` and turns automatic
    /// offset commits off itself; it sets `queued.min.messages` to 500,000, which a property
    /// given here replaces.
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.config
            .properties
            .push((key.to_string(), value.to_string()));
        self
    }

    /// How many records were skipped as bad by this source and its clones in this process.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// The splits this subtask holds, in topic and partition order (empty before `open`).
    pub fn splits(&self) -> Vec<Split> {
        self.open.as_ref().map(|o| o.splits()).unwrap_or_default()
    }
}

/// An opened subtask.
struct OpenSource {
    consumer: BaseConsumer,
    index: u32,
    parallelism: u32,
    /// Every partition held, in partition order.
    held: BTreeMap<TopicPartition, Held>,
    /// Every partition some subtask held at the restored checkpoint, and those discovered
    /// since: partitions a discovery must leave alone.
    known: BTreeSet<TopicPartition>,
    next_discovery: Instant,
    /// The checkpoint whose position is taken next (set by `snapshot_started`).
    next_checkpoint: Option<CheckpointId>,
    /// Positions of checkpoints taken but not yet completed, oldest first.
    uncommitted: VecDeque<(CheckpointId, Vec<Split>)>,
}

/// A partition a subtask reads.
struct Held {
    /// The offset of the next record to emit.
    next: i64,
    /// The partition's number among the subtask's splits for event time, in the order the
    /// subtask took them (partitions are only ever added while it runs).
    slot: usize,
}

impl OpenSource {
    fn splits(&self) -> Vec<Split> {
        self.held
            .iter()
            .map(|(p, h)| Split {
                partition: p.clone(),
                next_offset: h.next,
            })
            .collect()
    }

    /// Takes `partition`, to be read from `next` (a partition held already stays as it is).
    fn hold(&mut self, partition: TopicPartition, next: i64) {
        let slot = self.held.len();
        self.held.entry(partition).or_insert(Held { next, slot });
    }

    /// Points the consumer at every held partition's next offset.
    fn assign(&self) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for (p, h) in &self.held {
            list.add_partition_offset(&p.topic, p.partition, Offset::Offset(h.next))
                .map_err(|e| KafkaError::client("assigning partitions", e))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| KafkaError::client("assigning partitions", e))
    }
}

impl<T: Send + 'static, W> KafkaSource<T, W> {
    fn consumer(&self) -> Result<BaseConsumer, KafkaError> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &self.config.bootstrap_servers)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("allow.auto.create.topics", "false")
            // librdkafka keeps at least this many records prefetched per partition (default
            // 100,000; memory stays capped by queued.max.messages.kbytes, 64 MB). A deeper
            // queue took topic-to-topic from 170-181 k to 262-312 k records/s on the test
            // broker (weir bench kafka, p=2): fewer, larger fetches per record.
            .set("queued.min.messages", "500000")
            .set(
                "isolation.level",
                if self.config.read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            // librdkafka wants a group for any consumer; without one configured, nothing is
            // ever committed to it.
            .set(
                "group.id",
                self.config
                    .group_id
                    .as_deref()
                    .unwrap_or("weir-uncommitted"),
            );
        for (k, v) in &self.config.properties {
            client.set(k, v);
        }
        client
            .create()
            .map_err(|e| KafkaError::client("creating a consumer", e))
    }
}

impl<T: Send + 'static, W: SplitEventTime<T>> SourceFunction<T> for KafkaSource<T, W> {
    fn restore_union(&mut self, elements: Vec<Vec<u8>>) -> Result<(), TaskError> {
        let mut known = BTreeSet::new();
        for element in elements {
            known.extend(split::decode_partitions(&element)?);
        }
        self.restored_union = Some(known);
        Ok(())
    }

    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        let consumer = self.consumer()?;
        let mut open = OpenSource {
            consumer,
            index: ctx.index,
            parallelism: ctx.parallelism,
            held: BTreeMap::new(),
            known: BTreeSet::new(),
            next_discovery: Instant::now() + self.config.discovery_interval,
            next_checkpoint: None,
            uncommitted: VecDeque::new(),
        };
        match restored {
            Some(elements) => {
                for element in elements {
                    let split = Split::decode(&element)?;
                    open.known.insert(split.partition.clone());
                    open.hold(split.partition, split.next_offset);
                }
                open.known
                    .extend(self.restored_union.take().unwrap_or_default());
                discover(&self.config, &mut open)?;
            }
            None => {
                let mine: Vec<TopicPartition> =
                    list_partitions(&open.consumer, &self.config.topics)?
                        .into_iter()
                        .inspect(|p| {
                            open.known.insert(p.clone());
                        })
                        .filter(|p| owner(p, ctx.parallelism) == ctx.index)
                        .collect();
                for (p, next) in start::resolve_start(&self.config, &open.consumer, &mine)? {
                    open.hold(p, next);
                }
            }
        }
        open.assign()?;
        self.event_time.set_splits(open.held.len(), Instant::now());
        tracing::info!(
            subtask = ctx.index,
            splits = ?open.splits(),
            "Kafka source opened"
        );
        self.open = Some(open);
        Ok(())
    }

    fn poll_batch(&mut self, batch: &mut Vec<T>, max: usize) -> Result<SourceStatus, TaskError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(SourceStatus::Idle);
        };
        if Instant::now() >= open.next_discovery {
            open.next_discovery = Instant::now() + self.config.discovery_interval;
            if discover(&self.config, open)? {
                open.assign()?;
                self.event_time.set_splits(open.held.len(), Instant::now());
            }
        }
        while batch.len() < max {
            let message = match open.consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    return Err(KafkaError::client("reading records", e).into());
                }
            };
            // A subtask holds few partitions: a scan spares an allocation per record.
            let Some(held) = open
                .held
                .iter_mut()
                .find(|(p, _)| p.partition == message.partition() && p.topic == message.topic())
                .map(|(_, held)| held)
            else {
                continue; // from an assignment replaced since
            };
            if message.offset() < held.next {
                continue; // fetched before a re-assignment; already emitted
            }
            let view = RecordView {
                topic: message.topic(),
                partition: message.partition(),
                offset: message.offset(),
                key: message.key(),
                payload: message.payload(),
                timestamp: message.timestamp().to_millis(),
            };
            match self.deserializer.deserialize(&view) {
                Ok(value) => {
                    self.event_time.observe(held.slot, &value);
                    batch.push(value);
                }
                Err(reason) => match self.config.bad_records {
                    BadRecordPolicy::Fail => {
                        return Err(KafkaError::Data(format!(
                            "record at offset {} of {}[{}]: {reason}",
                            view.offset, view.topic, view.partition
                        ))
                        .into())
                    }
                    BadRecordPolicy::Skip => {
                        self.skipped.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            "skipped the record at offset {} of {}[{}]: {reason}",
                            view.offset,
                            view.topic,
                            view.partition
                        );
                    }
                },
            }
            held.next = message.offset() + 1;
        }
        Ok(if batch.is_empty() {
            SourceStatus::Idle
        } else {
            SourceStatus::Emitted
        })
    }

    fn event_time(&mut self, now: Instant) -> SourceEventTime {
        self.event_time.poll(now)
    }

    fn snapshot_started(&mut self, checkpoint: CheckpointId) {
        if let Some(open) = self.open.as_mut() {
            open.next_checkpoint = Some(checkpoint);
        }
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(Vec::new());
        };
        let splits = open.splits();
        if let Some(checkpoint) = open.next_checkpoint.take() {
            if self.config.group_id.is_some() {
                open.uncommitted.push_back((checkpoint, splits.clone()));
                // A checkpoint that never completes must not pile positions up.
                while open.uncommitted.len() > 64 {
                    open.uncommitted.pop_front();
                }
            }
        }
        Ok(splits.iter().map(Split::encode).collect())
    }

    fn snapshot_union(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        let Some(open) = self.open.as_ref() else {
            return Ok(Vec::new());
        };
        let held: Vec<TopicPartition> = open.held.keys().cloned().collect();
        Ok(vec![split::encode_partitions(&held)])
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        let mut position = None;
        while open
            .uncommitted
            .front()
            .is_some_and(|(c, _)| *c <= checkpoint)
        {
            position = open.uncommitted.pop_front().map(|(_, s)| s);
        }
        let Some(splits) = position else {
            return Ok(());
        };
        let mut list = TopicPartitionList::new();
        for split in &splits {
            if list
                .add_partition_offset(
                    &split.partition.topic,
                    split.partition.partition,
                    Offset::Offset(split.next_offset),
                )
                .is_err()
            {
                return Ok(());
            }
        }
        // For monitoring only: a failed commit is logged, never a failure of the job.
        if let Err(e) = open.consumer.commit(&list, CommitMode::Async) {
            tracing::warn!("committing checkpoint {checkpoint}'s offsets to the group: {e}");
        }
        Ok(())
    }
}
