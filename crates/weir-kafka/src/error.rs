//! The connectors' errors, and how each becomes a task failure: trouble with the broker is
//! retried by the job's restart strategy; bad configuration and records that cannot be read
//! fail the job at once.

use weir_runtime::TaskError;

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// A bad option or combination of options.
    #[error("{0}")]
    Config(String),
    /// A request failed or the broker could not be reached; a retry may pass.
    #[error("Kafka: {what}: {message}")]
    Broker { what: String, message: String },
    /// A record the source cannot deserialise, or state it cannot read: the same input
    /// would fail again.
    #[error("{0}")]
    Data(String),
}

impl KafkaError {
    /// A failure of librdkafka while doing `what`.
    pub(crate) fn client(what: impl Into<String>, e: rdkafka::error::KafkaError) -> KafkaError {
        KafkaError::Broker {
            what: what.into(),
            message: e.to_string(),
        }
    }
}

impl From<KafkaError> for TaskError {
    fn from(e: KafkaError) -> TaskError {
        match e {
            KafkaError::Config(_) | KafkaError::Data(_) => TaskError::BadInput(e.to_string()),
            KafkaError::Broker { .. } => TaskError::User(e.to_string()),
        }
    }
}
