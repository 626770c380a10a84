//! A librdkafka producer that remembers the first failed delivery: `flush` only waits for the
//! deliveries, so the sink asks this record whether all of them succeeded before it lets a
//! checkpoint count them as written.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::serialize::ProducerRecord;
use crate::error::KafkaError;

/// Remembers the first delivery that failed.
#[derive(Default)]
pub(crate) struct DeliveryRecord {
    first_failure: Mutex<Option<String>>,
}

impl ClientContext for DeliveryRecord {}

impl ProducerContext for DeliveryRecord {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, message)) = result {
            let mut first = self.first_failure.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                use rdkafka::message::Message;
                *first = Some(format!(
                    "delivering a record to {}[{}]: {e}",
                    message.topic(),
                    message.partition()
                ));
            }
        }
    }
}

pub(crate) struct SinkProducer {
    pub(crate) producer: BaseProducer<DeliveryRecord>,
    topic: String,
}

pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

impl SinkProducer {
    pub(crate) fn new(config: &ClientConfig, topic: &str) -> Result<SinkProducer, KafkaError> {
        let producer = config
            .create_with_context(DeliveryRecord::default())
            .map_err(|e| KafkaError::client("creating a producer", e))?;
        Ok(SinkProducer {
            producer,
            topic: topic.to_string(),
        })
    }

    /// Queues a record, waiting for room when librdkafka's queue is full.
    pub(crate) fn send(&self, record: &ProducerRecord) -> Result<(), KafkaError> {
        loop {
            let mut base = BaseRecord::<[u8], [u8]>::to(&self.topic).payload(record.payload());
            if let Some(key) = record.key() {
                base = base.key(key);
            }
            match self.producer.send(base) {
                Ok(()) => return Ok(()),
                Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    return Err(KafkaError::client(
                        format!("writing to topic {}", self.topic),
                        e,
                    ))
                }
            }
        }
    }

    /// Serves delivery reports without waiting.
    pub(crate) fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until every queued record was delivered, and fails if any delivery failed.
    pub(crate) fn flush(&self) -> Result<(), KafkaError> {
        self.producer.flush(FLUSH_TIMEOUT).map_err(|e| {
            KafkaError::client(format!("flushing records to topic {}", self.topic), e)
        })?;
        self.check_deliveries()
    }

    pub(crate) fn check_deliveries(&self) -> Result<(), KafkaError> {
        let first = self
            .producer
            .context()
            .first_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match first {
            None => Ok(()),
            Some(message) => Err(KafkaError::Broker {
                what: format!("writing to topic {}", self.topic),
                message,
            }),
        }
    }
}
