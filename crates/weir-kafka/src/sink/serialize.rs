//! Turning the sink's input into Kafka records: an optional key (which picks the partition)
//! and a payload, written into buffers the sink reuses from one record to the next.

use std::marker::PhantomData;

use serde::Serialize;

/// A record to write: the key decides the partition (records with equal keys go to the same
/// partition); without a key librdkafka spreads records over the partitions. The sink hands
/// the same one to the serializer for every record, cleared, so that once its buffers have
/// grown serialising allocates nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    key: Vec<u8>,
    keyed: bool,
    payload: Vec<u8>,
}

impl ProducerRecord {
    /// A record with `payload` and no key.
    pub fn new(payload: &[u8]) -> ProducerRecord {
        let mut record = ProducerRecord::default();
        record.payload_buffer().extend_from_slice(payload);
        record
    }

    /// Empties the key (the record has none) and the payload, keeping their capacity.
    pub fn clear(&mut self) {
        self.key.clear();
        self.keyed = false;
        self.payload.clear();
    }

    /// The key buffer to write into; the record now has a key.
    pub fn key_buffer(&mut self) -> &mut Vec<u8> {
        self.keyed = true;
        &mut self.key
    }

    /// The payload buffer to write into.
    pub fn payload_buffer(&mut self) -> &mut Vec<u8> {
        &mut self.payload
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.keyed.then_some(self.key.as_slice())
    }

    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}

/// Turns values of type `T` into records.
pub trait RecordSerializer<T>: Send + Sync + 'static {
    /// Writes `value` into `record`, which arrives cleared.
    fn serialize(&self, value: &T, record: &mut ProducerRecord) -> Result<(), String>;
}

/// Writes strings as UTF-8 payloads without a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Serializer;

impl RecordSerializer<String> for Utf8Serializer {
    fn serialize(&self, value: &String, record: &mut ProducerRecord) -> Result<(), String> {
        record.payload_buffer().extend_from_slice(value.as_bytes());
        Ok(())
    }
}

/// Writes `(key, payload)` pairs of strings as UTF-8, keyed.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedUtf8Serializer;

impl RecordSerializer<(String, String)> for KeyedUtf8Serializer {
    fn serialize(
        &self,
        (key, payload): &(String, String),
        record: &mut ProducerRecord,
    ) -> Result<(), String> {
        record.key_buffer().extend_from_slice(key.as_bytes());
        record
            .payload_buffer()
            .extend_from_slice(payload.as_bytes());
        Ok(())
    }
}

/// Writes bytes as payloads without a key.
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesSerializer;

impl RecordSerializer<Vec<u8>> for BytesSerializer {
    fn serialize(&self, value: &Vec<u8>, record: &mut ProducerRecord) -> Result<(), String> {
        record.payload_buffer().extend_from_slice(value);
        Ok(())
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
    fn serialize(&self, value: &T, record: &mut ProducerRecord) -> Result<(), String> {
        serde_json::to_writer(record.payload_buffer(), value).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_record_keeps_no_key_or_bytes_of_the_one_before() {
        let mut record = ProducerRecord::default();
        KeyedUtf8Serializer
            .serialize(&("word".to_string(), "12".to_string()), &mut record)
            .unwrap();
        assert_eq!(record.key(), Some(&b"word"[..]));
        assert_eq!(record.payload(), b"12");
        record.clear();
        Utf8Serializer
            .serialize(&"x".to_string(), &mut record)
            .unwrap();
        assert_eq!(record.key(), None);
        assert_eq!(record.payload(), b"x");
        record.clear();
        JsonSerializer::<(u32, &str)>::default()
            .serialize(&(1, "a"), &mut record)
            .unwrap();
        assert_eq!(record.payload(), br#"[1,"a"]"#);
    }
}
