//! Turning the sink's input into Kafka records: an optional key (which picks the partition)
//! and a payload.

use std::marker::PhantomData;

use serde::Serialize;

/// A record to write: the key decides the partition (records with equal keys go to the same
/// partition); without a key librdkafka spreads records over the partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerRecord {
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// Turns values of type `T` into records.
pub trait RecordSerializer<T>: Send + Sync + 'static {
    fn serialize(&self, value: &T) -> Result<ProducerRecord, String>;
}

/// Writes strings as UTF-8 payloads without a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Serializer;

impl RecordSerializer<String> for Utf8Serializer {
    fn serialize(&self, value: &String) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            key: None,
            payload: value.as_bytes().to_vec(),
        })
    }
}

/// Writes `(key, payload)` pairs of strings as UTF-8, keyed.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedUtf8Serializer;

impl RecordSerializer<(String, String)> for KeyedUtf8Serializer {
    fn serialize(&self, (key, payload): &(String, String)) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            key: Some(key.as_bytes().to_vec()),
            payload: payload.as_bytes().to_vec(),
        })
    }
}

/// Writes bytes as payloads without a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerializer;

impl RecordSerializer<Vec<u8>> for BytesSerializer {
    fn serialize(&self, value: &Vec<u8>) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            key: None,
            payload: value.clone(),
        })
    }
}

/// Writes values as JSON payloads (serde_json) without a key.
pub struct JsonSerializer<T>(PhantomData<fn(&T)>);

impl<T> Default for JsonSerializer<T> {
    fn default() -> Self {
        JsonSerializer(PhantomData)
    }
}

impl<T: Serialize + 'static> RecordSerializer<T> for JsonSerializer<T> {
    fn serialize(&self, value: &T) -> Result<ProducerRecord, String> {
        Ok(ProducerRecord {
            key: None,
            payload: serde_json::to_vec(value).map_err(|e| e.to_string())?,
        })
    }
}
