//! Kafka connectors for Weir.
//!
//! - [`KafkaSource`] reads the partitions of a set of topics (or of every topic matching a
//!   pattern) as splits: each subtask holds some partitions and their next offsets, which are
//!   its checkpointed list state, dealt round-robin over the subtasks on rescale. New partitions
//!   are discovered while the job runs; completed checkpoints' offsets go to the consumer group
//!   for monitoring. Records are read `read_committed` and deserialised as bytes, UTF-8 or JSON.
//! - [`KafkaSink`] writes into a topic with Flink's three delivery guarantees; exactly-once
//!   writes one Kafka transaction per subtask and checkpoint, flushed on the barrier and
//!   committed when the checkpoint completes. The checkpoint records each transaction's
//!   producer id and epoch, so that a restore commits a transaction whose checkpoint completed
//!   even when the job died before committing it.
//!
//! librdkafka (through `rdkafka`) does the reading and writing; [`wire`] speaks the protocol
//! directly for what it cannot do, and [`committed`] reads a topic the way a `read_committed`
//! consumer must see it, from the raw batches and transaction markers.

pub mod committed;
mod error;
mod sink;
mod source;
pub mod wire;

#[cfg(test)]
mod test_broker;

pub use error::KafkaError;
pub use sink::{
    BytesSerializer, JsonSerializer, KafkaSink, KeyedUtf8Serializer, ProducerRecord,
    RecordSerializer, Utf8Serializer, DEFAULT_TRANSACTION_TIMEOUT,
};
pub use source::{
    owner, BadRecordPolicy, BytesDeserializer, JsonDeserializer, KafkaSource, RecordDeserializer,
    RecordView, Split, StartingOffsets, TopicPartition, Utf8Deserializer,
};
pub use weir_core::DeliveryGuarantee;
