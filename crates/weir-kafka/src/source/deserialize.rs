//! Turning a Kafka record into the source's output: raw bytes, UTF-8 text or JSON, and what
//! to do with a record that does not parse.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

/// A record as read from a partition.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    /// Milliseconds since the epoch, if the record has a timestamp.
    pub timestamp: Option<i64>,
}

/// Turns records into values of type `T`. An `Err` says what is wrong with the record; the
/// source adds where the record is.
pub trait RecordDeserializer<T>: Send + Sync + 'static {
    fn deserialize(&self, record: &RecordView<'_>) -> Result<T, String>;
}

/// The payload's bytes as they are (an empty vector for a record without a payload).
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesDeserializer;

impl RecordDeserializer<Vec<u8>> for BytesDeserializer {
    fn deserialize(&self, record: &RecordView<'_>) -> Result<Vec<u8>, String> {
        Ok(record.payload.unwrap_or_default().to_vec())
    }
}

/// The payload as UTF-8 text; a payload that is not UTF-8 is an error.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Deserializer;

impl RecordDeserializer<String> for Utf8Deserializer {
    fn deserialize(&self, record: &RecordView<'_>) -> Result<String, String> {
        let payload = record.payload.unwrap_or_default();
        std::str::from_utf8(payload)
            .map(str::to_string)
            .map_err(|e| format!("the payload is not UTF-8: {e}"))
    }
}

/// The payload as JSON (serde_json) into `T`.
pub struct JsonDeserializer<T>(PhantomData<fn() -> T>);

impl<T> Default for JsonDeserializer<T> {
    fn default() -> Self {
        JsonDeserializer(PhantomData)
    }
}

impl<T: DeserializeOwned + 'static> RecordDeserializer<T> for JsonDeserializer<T> {
    fn deserialize(&self, record: &RecordView<'_>) -> Result<T, String> {
        serde_json::from_slice(record.payload.unwrap_or_default())
            .map_err(|e| format!("the payload is not the expected JSON: {e}"))
    }
}

/// What the source does with a record its deserializer refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BadRecordPolicy {
    /// Fail the job with an error naming the topic, partition and offset (the default).
    #[default]
    Fail,
    /// Skip the record and count it (see [`KafkaSource::skipped`](crate::KafkaSource::skipped)).
    Skip,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(payload: &[u8]) -> RecordView<'_> {
        RecordView {
            topic: "t",
            partition: 0,
            offset: 0,
            key: None,
            payload: Some(payload),
            timestamp: None,
        }
    }

    #[test]
    fn each_deserializer_reads_its_format_and_refuses_others() {
        assert_eq!(
            BytesDeserializer.deserialize(&view(b"\xff")).unwrap(),
            b"\xff"
        );
        assert_eq!(
            Utf8Deserializer.deserialize(&view(b"word")).unwrap(),
            "word"
        );
        assert!(Utf8Deserializer.deserialize(&view(b"\xff")).is_err());
        let json = JsonDeserializer::<(String, i64)>::default();
        assert_eq!(
            json.deserialize(&view(br#"["a", 3]"#)).unwrap(),
            ("a".to_string(), 3)
        );
        assert!(json.deserialize(&view(b"{")).is_err());
    }
}
