//! The Kafka sink: records into one topic, with Flink's three delivery guarantees.
//!
//! - **none**: records are handed to librdkafka as they arrive; nothing waits for them. A
//!   failure may lose or repeat records.
//! - **at-least-once** (the default): as `none`, and every barrier waits until every record
//!   before it was acknowledged by the broker (a failed delivery declines the checkpoint and
//!   fails the job). After a failure the records since the restored checkpoint are written
//!   again.
//! - **exactly-once**: one Kafka transaction per subtask and checkpoint. The first record after
//!   a barrier begins a transaction with a transactional id of its own (see
//!   [`transactions`](self::transactions) for the naming); the next barrier flushes it — every
//!   record acknowledged, none visible to `read_committed` readers — and records its
//!   transactional id, producer id and epoch in the checkpoint. When the checkpoint completes
//!   the transaction commits. An aborted checkpoint leaves its transaction open; it commits with
//!   the next checkpoint that completes, whose state lists it too.
//!
//! **A transaction whose checkpoint completed is committed even if the job died before
//! committing it.** On restore the sink commits every transaction the checkpoint recorded by
//! sending `EndTxn` with the recorded producer id and epoch to the transaction coordinator
//! itself (librdkafka cannot resume a transaction of another producer), before anything
//! initialises those ids; then it fences (and so aborts) every id a failed attempt may have
//! left open. A crash between a checkpoint's completion and its commit therefore loses nothing
//! and repeats nothing.
//!
//! The broker aborts a transaction that stays open longer than `transaction.timeout.ms`. A
//! transaction stays open from its first record until the checkpoint after it completes, and a
//! recorded one until a restore commits it, so the timeout must be well above the checkpoint
//! interval: [`validate`](KafkaSink::validate) requires at least three intervals and the job
//! should leave room for its restarts. The broker caps the timeout with its own
//! `transaction.max.timeout.ms` (15 minutes by default).
//!
//! Each transaction uses a producer of its own (a producer id and epoch must name one
//! transaction, for the restore above to be safe), so a subtask has at most one producer per
//! checkpoint in flight.

mod producer;
mod serialize;
mod transactions;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::Producer;
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::{OperatorContext, TaskError};

use self::producer::{SinkProducer, FLUSH_TIMEOUT};
pub use self::serialize::{
    BytesSerializer, JsonSerializer, KeyedUtf8Serializer, ProducerRecord, RecordSerializer,
    Utf8Serializer,
};
use self::transactions::{
    plan_restore, transactional_id, Coordinators, PreparedTransaction, SubtaskTransactions,
};
use crate::error::KafkaError;
use crate::wire::ProducerIdentity;
use weir_core::DeliveryGuarantee;

/// The default transaction timeout: 10 minutes, below the broker's default cap of 15.
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone, Debug)]
struct Config {
    bootstrap_servers: String,
    topic: String,
    guarantee: DeliveryGuarantee,
    prefix: Option<String>,
    transaction_timeout: Duration,
    checkpoint_interval: Option<Duration>,
    properties: Vec<(String, String)>,
}

/// Writes values of type `T` into a Kafka topic. Configure it, then hand it to the job; each
/// subtask opens its own clone.
///
/// ```
/// use std::time::Duration;
/// use weir_kafka::{DeliveryGuarantee, KafkaSink, KeyedUtf8Serializer};
///
/// let sink = KafkaSink::new("broker:9092", "counts", KeyedUtf8Serializer)
///     .guarantee(DeliveryGuarantee::ExactlyOnce)
///     .transactional_id_prefix("wordcount-v1")
///     .checkpoint_interval(Duration::from_secs(1));
/// assert!(sink.validate().is_ok());
/// let too_short = sink.clone().transaction_timeout(Duration::from_secs(2));
/// assert!(too_short.validate().is_err());
/// ```
pub struct KafkaSink<T> {
    config: Config,
    serializer: Arc<dyn RecordSerializer<T>>,
    /// The record each value is serialised into, reused.
    record: ProducerRecord,
    open: Option<OpenSink>,
}

impl<T> Clone for KafkaSink<T> {
    /// A sink with the same configuration, not opened.
    fn clone(&self) -> Self {
        KafkaSink {
            config: self.config.clone(),
            serializer: Arc::clone(&self.serializer),
            record: ProducerRecord::default(),
            open: None,
        }
    }
}

impl<T> KafkaSink<T> {
    /// A sink writing into `topic` through `serializer` (at-least-once by default).
    pub fn new(
        bootstrap_servers: &str,
        topic: &str,
        serializer: impl RecordSerializer<T>,
    ) -> KafkaSink<T> {
        KafkaSink {
            config: Config {
                bootstrap_servers: bootstrap_servers.to_string(),
                topic: topic.to_string(),
                guarantee: DeliveryGuarantee::AtLeastOnce,
                prefix: None,
                transaction_timeout: DEFAULT_TRANSACTION_TIMEOUT,
                checkpoint_interval: None,
                properties: Vec::new(),
            },
            serializer: Arc::new(serializer),
            record: ProducerRecord::default(),
            open: None,
        }
    }

    /// The delivery guarantee (default: at-least-once).
    pub fn guarantee(mut self, guarantee: DeliveryGuarantee) -> KafkaSink<T> {
        self.config.guarantee = guarantee;
        self
    }

    /// The start of the sink's transactional ids, required for exactly-once. Every sink of
    /// every job on a cluster needs its own: a restore fences the ids of its prefix.
    pub fn transactional_id_prefix(mut self, prefix: &str) -> KafkaSink<T> {
        self.config.prefix = Some(prefix.to_string());
        self
    }

    /// `transaction.timeout.ms` of the sink's transactions (default 10 minutes).
    pub fn transaction_timeout(mut self, timeout: Duration) -> KafkaSink<T> {
        self.config.transaction_timeout = timeout;
        self
    }

    /// The job's checkpoint interval, which the transaction timeout is checked against.
    pub fn checkpoint_interval(mut self, interval: Duration) -> KafkaSink<T> {
        self.config.checkpoint_interval = Some(interval);
        self
    }

    /// A librdkafka producer property (`linger.ms`, `compression.type`, …). The sink sets
    /// `bootstrap.servers`, and for exactly-once `transactional.id` and
    /// `transaction.timeout.ms`, itself.
    pub fn property(mut self, key: &str, value: &str) -> KafkaSink<T> {
        self.config
            .properties
            .push((key.to_string(), value.to_string()));
        self
    }

    /// Checks the configuration: an exactly-once sink needs a transactional id prefix (letters,
    /// digits, `.`, `_`, `-`), and its transaction timeout must be at least three checkpoint
    /// intervals.
    pub fn validate(&self) -> Result<(), KafkaError> {
        if self.config.topic.is_empty() {
            return Err(KafkaError::Config("the sink needs a topic".into()));
        }
        if self.config.guarantee != DeliveryGuarantee::ExactlyOnce {
            return Ok(());
        }
        let prefix = self.config.prefix.as_deref().ok_or_else(|| {
            KafkaError::Config("an exactly-once Kafka sink needs a transactional id prefix".into())
        })?;
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(KafkaError::Config(format!(
                "transactional id prefix `{prefix}`: use letters, digits, `.`, `_` and `-`"
            )));
        }
        let timeout = self.config.transaction_timeout;
        if timeout.as_millis() > i32::MAX as u128 {
            return Err(KafkaError::Config(format!(
                "transaction timeout {timeout:?} is too long for Kafka"
            )));
        }
        if let Some(interval) = self.config.checkpoint_interval {
            if timeout < interval * 3 {
                return Err(KafkaError::Config(format!(
                    "transaction.timeout.ms = {} ms is shorter than three checkpoint intervals \
                     ({} ms): the broker would abort transactions before their checkpoint \
                     completes. Raise the transaction timeout (it may not exceed the broker's \
                     transaction.max.timeout.ms, 15 minutes by default) or checkpoint more often",
                    timeout.as_millis(),
                    (interval * 3).as_millis()
                )));
            }
        }
        Ok(())
    }

    fn client_config(&self) -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", &self.config.bootstrap_servers);
        for (k, v) in &self.config.properties {
            client.set(k, v);
        }
        client
    }

    fn opened(&mut self) -> Result<&mut OpenSink, TaskError> {
        self.open
            .as_mut()
            .ok_or_else(|| TaskError::user("the Kafka sink was used before it was opened"))
    }
}

/// An opened subtask.
struct OpenSink {
    /// Outside exactly-once: the one producer.
    producer: Option<SinkProducer>,
    /// Exactly-once: the transactions and their producers.
    transactional: Option<Transactional>,
}

struct Transactional {
    subtask: u32,
    prefix: String,
    timeout_ms: i32,
    client: ClientConfig,
    topic: String,
    coordinators: Coordinators,
    next_sequence: u64,
    /// An initialised, never used id to take next, with its identity (epoch 0 before the
    /// producer initialises it).
    fresh: Option<(u64, ProducerIdentity)>,
    /// The transaction records are written into now.
    current: Option<OpenTransaction>,
    /// Flushed transactions waiting for their checkpoint's completion, oldest first. Those
    /// restored without a producer were committed on open and are not here.
    prepared: Vec<(PreparedTransaction, SinkProducer)>,
}

struct OpenTransaction {
    transactional_id: String,
    producer: SinkProducer,
    identity: ProducerIdentity,
}

impl Transactional {
    /// Begins a transaction with the next id.
    fn begin(&mut self) -> Result<(), KafkaError> {
        let (sequence, probed) = match self.fresh.take() {
            Some(fresh) => fresh,
            None => {
                let sequence = self.next_sequence;
                let id = transactional_id(&self.prefix, self.index(), sequence);
                (sequence, self.coordinators.init(&id, self.timeout_ms)?)
            }
        };
        self.next_sequence = sequence + 1;
        let id = transactional_id(&self.prefix, self.index(), sequence);
        let mut client = self.client.clone();
        client
            .set("transactional.id", &id)
            .set("transaction.timeout.ms", self.timeout_ms.to_string());
        let producer = SinkProducer::new(&client, &self.topic)?;
        producer
            .producer
            .init_transactions(FLUSH_TIMEOUT)
            .map_err(|e| KafkaError::client(format!("initialising transactional id {id}"), e))?;
        producer
            .producer
            .begin_transaction()
            .map_err(|e| KafkaError::client(format!("beginning a transaction of {id}"), e))?;
        self.current = Some(OpenTransaction {
            transactional_id: id,
            producer,
            // The producer's initialisation bumped the epoch of the id initialised above.
            identity: ProducerIdentity {
                id: probed.id,
                epoch: probed.epoch + 1,
            },
        });
        Ok(())
    }

    fn index(&self) -> u32 {
        self.subtask
    }

    /// Flushes the current transaction and keeps it for `checkpoint`'s completion.
    fn prepare(&mut self, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        let Some(current) = self.current.take() else {
            return Ok(());
        };
        current.producer.flush()?;
        self.prepared.push((
            PreparedTransaction {
                transactional_id: current.transactional_id,
                producer: current.identity,
                checkpoint,
            },
            current.producer,
        ));
        Ok(())
    }

    fn state(&self) -> SubtaskTransactions {
        SubtaskTransactions {
            subtask: self.subtask,
            next_sequence: self.next_sequence,
            prepared: self.prepared.iter().map(|(t, _)| t.clone()).collect(),
        }
    }

    /// Commits every prepared transaction up to `checkpoint`.
    fn commit_up_to(&mut self, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        while self
            .prepared
            .first()
            .is_some_and(|(t, _)| t.checkpoint <= checkpoint)
        {
            let (transaction, producer) = self.prepared.remove(0);
            producer
                .producer
                .commit_transaction(FLUSH_TIMEOUT)
                .map_err(|e| {
                    KafkaError::client(
                        format!("committing transaction {}", transaction.transactional_id),
                        e,
                    )
                })?;
        }
        Ok(())
    }
}

impl<T: Send + 'static> SinkFunction<T> for KafkaSink<T> {
    fn union_state(&self) -> bool {
        true
    }

    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.validate()?;
        let client = self.client_config();
        let mut open = OpenSink {
            producer: None,
            transactional: None,
        };
        if self.config.guarantee == DeliveryGuarantee::ExactlyOnce {
            let prefix = self.config.prefix.clone().expect("validated");
            let timeout_ms = self.config.transaction_timeout.as_millis() as i32;
            let states = restored
                .unwrap_or_default()
                .iter()
                .map(|e| SubtaskTransactions::decode(e))
                .collect::<Result<Vec<_>, _>>()?;
            let plan = plan_restore(ctx.index, ctx.parallelism, &states);
            let mut coordinators = Coordinators::new(&self.config.bootstrap_servers);
            let (sequence, identity) =
                transactions::restore(&mut coordinators, &prefix, ctx.index, &plan, timeout_ms)?;
            open.transactional = Some(Transactional {
                subtask: ctx.index,
                prefix,
                timeout_ms,
                client,
                topic: self.config.topic.clone(),
                coordinators,
                next_sequence: sequence,
                fresh: Some((sequence, identity)),
                current: None,
                prepared: Vec::new(),
            });
        } else {
            open.producer = Some(SinkProducer::new(&client, &self.config.topic)?);
        }
        self.open = Some(open);
        Ok(())
    }

    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        let open = self
            .open
            .as_mut()
            .ok_or_else(|| TaskError::user("the Kafka sink was used before it was opened"))?;
        let producer = match open.transactional.as_mut() {
            Some(transactional) => {
                if batch.is_empty() {
                    return Ok(());
                }
                if transactional.current.is_none() {
                    transactional.begin()?;
                }
                &transactional
                    .current
                    .as_ref()
                    .expect("begun above")
                    .producer
            }
            None => open.producer.as_ref().expect("opened with a producer"),
        };
        let record = &mut self.record;
        for value in &batch {
            record.clear();
            self.serializer.serialize(value, record).map_err(|e| {
                KafkaError::Data(format!(
                    "a record for topic {} cannot be written: {e}",
                    self.config.topic
                ))
            })?;
            producer.send(record)?;
        }
        producer.poll();
        producer.check_deliveries()?;
        Ok(())
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        let guarantee = self.config.guarantee;
        let open = self.opened()?;
        if let Some(transactional) = open.transactional.as_mut() {
            transactional.prepare(checkpoint)?;
            return Ok(vec![transactional.state().encode()]);
        }
        if guarantee == DeliveryGuarantee::AtLeastOnce {
            open.producer
                .as_ref()
                .expect("opened with a producer")
                .flush()?;
        }
        Ok(Vec::new())
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        let open = self.opened()?;
        if let Some(transactional) = open.transactional.as_mut() {
            transactional.commit_up_to(checkpoint)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        let open = self.opened()?;
        match open.producer.as_ref() {
            // The final checkpoint prepares and commits what is left.
            None => Ok(()),
            Some(producer) => Ok(producer.flush()?),
        }
    }
}
