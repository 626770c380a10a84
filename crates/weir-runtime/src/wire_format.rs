//! The encoding of the data plane's frames: any serde type, fixed-width and little-endian.
//!
//! A frame carries one element of a channel (a batch of records, a barrier, a watermark) from
//! one process to another process of the same build, which decodes it at once; it is never
//! stored. So this format is made for speed, not size or longevity: every integer and float
//! takes its full width (a `u64` is eight bytes, copied, never a loop over varint bytes —
//! postcard's varints took about a fifth of a task manager's core in keyed-count on two task
//! managers, see `benches/frames.rs` and `benchmarks/README.md`); a length (of a sequence, a map, a string, bytes) and an enum's variant index are a `u32`; an
//! `Option` and a `bool` a byte, `0` or `1`; a `char` its `u32`; structs and tuples their
//! fields in order, with no names. The format is not self-describing: like postcard's, it
//! decodes only into the type it was encoded from. State and checkpoints use postcard, whose
//! varints make them smaller on storage.
//!
//! Decoding never trusts the input: a truncated frame, a length beyond the frame, an invalid
//! tag, a string that is not UTF-8 or bytes left over are errors, never a panic.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};
use std::fmt;

/// Why a value could not be encoded or decoded. Boxed: a result carries a pointer, not a
/// string, on the way back through every field of every record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::box_collection)] // one pointer wide on purpose: see above
pub struct WireError(Box<String>);

impl WireError {
    fn new(message: impl Into<String>) -> WireError {
        WireError(Box::new(message.into()))
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

impl ser::Error for WireError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WireError::new(msg.to_string())
    }
}

impl de::Error for WireError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WireError::new(msg.to_string())
    }
}

/// Appends `value`'s encoding to `out`.
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), WireError> {
    value.serialize(&mut Encoder { out })
}

/// `value`'s encoding on its own.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Decodes a value of `T` that takes all of `bytes`.
pub fn decode<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, WireError> {
    let mut decoder = Decoder { input: bytes };
    let value = T::deserialize(&mut decoder)?;
    if !decoder.input.is_empty() {
        return Err(WireError::new(format!(
            "{} bytes left over after the value",
            decoder.input.len()
        )));
    }
    Ok(value)
}

/// A frame of records being filled batch by batch: `Element::Records`' encoding, whose record
/// count (the `u32` ending the encoding of an empty batch) is rewritten as batches are appended.
/// The bytes are exactly those of the concatenated batch encoded at once, so the consumer
/// decodes one batch and never learns the frame was filled in steps.
#[derive(Debug)]
pub(crate) struct RecordsFrame {
    /// Where the record count lies in the buffer.
    count_at: usize,
    records: u32,
}

impl RecordsFrame {
    /// Starts a frame at the end of `out` (an empty batch of `T`).
    pub(crate) fn start<T: Serialize>(out: &mut Vec<u8>) -> Result<RecordsFrame, WireError> {
        encode_into(&weir_core::Element::<T>::Records(Vec::new()), out)?;
        Ok(RecordsFrame {
            count_at: out.len() - 4,
            records: 0,
        })
    }

    /// Appends `records` to the frame that ends `out`.
    pub(crate) fn append<T: Serialize>(
        &mut self,
        out: &mut Vec<u8>,
        records: &[T],
    ) -> Result<(), WireError> {
        let records_after = u32::try_from(records.len())
            .ok()
            .and_then(|n| self.records.checked_add(n))
            .ok_or_else(|| WireError::new("a frame of more than 2^32 records"))?;
        let mut encoder = Encoder { out };
        for record in records {
            record.serialize(&mut encoder)?;
        }
        self.records = records_after;
        out[self.count_at..self.count_at + 4].copy_from_slice(&records_after.to_le_bytes());
        Ok(())
    }

    /// Records in the frame.
    pub(crate) fn records(&self) -> u32 {
        self.records
    }
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl Encoder<'_> {
    #[inline]
    fn len(&mut self, len: usize) -> Result<(), WireError> {
        let len = u32::try_from(len)
            .map_err(|_| WireError::new(format!("a length of {len} does not fit a frame")))?;
        self.out.extend_from_slice(&len.to_le_bytes());
        Ok(())
    }

    fn unknown_len() -> WireError {
        WireError::new("a sequence or map of unknown length cannot be encoded")
    }
}

macro_rules! encode_le {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            #[inline]
            fn $method(self, v: $ty) -> Result<(), WireError> {
                self.out.extend_from_slice(&v.to_le_bytes());
                Ok(())
            }
        )*
    };
}

impl<'a> ser::Serializer for &mut Encoder<'a> {
    type Ok = ();
    type Error = WireError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    encode_le!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128, serialize_f32: f32, serialize_f64: f64,
    );

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<(), WireError> {
        self.out.push(v as u8);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), WireError> {
        self.serialize_u32(v as u32)
    }
    fn serialize_str(self, v: &str) -> Result<(), WireError> {
        self.serialize_bytes(v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), WireError> {
        self.len(v.len())?;
        self.out.extend_from_slice(v);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), WireError> {
        self.out.push(0);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), WireError> {
        self.out.push(1);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), WireError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), WireError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
    ) -> Result<(), WireError> {
        self.serialize_u32(index)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), WireError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), WireError> {
        self.serialize_u32(index)?;
        value.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, WireError> {
        self.len(len.ok_or_else(Encoder::unknown_len)?)?;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, WireError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, WireError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, WireError> {
        self.serialize_u32(index)?;
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, WireError> {
        self.len(len.ok_or_else(Encoder::unknown_len)?)?;
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, WireError> {
        Ok(self)
    }
    /// As a tuple variant: its fields go out without their names.
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self, WireError> {
        self.serialize_tuple_variant(name, index, variant, len)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound {
    ($trait:ident, $method:ident) => {
        impl<'a> ser::$trait for &mut Encoder<'a> {
            type Ok = ();
            type Error = WireError;
            #[inline]
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WireError> {
                value.serialize(&mut **self)
            }
            #[inline]
            fn end(self) -> Result<(), WireError> {
                Ok(())
            }
        }
    };
}

compound!(SerializeSeq, serialize_element);
compound!(SerializeTuple, serialize_element);
compound!(SerializeTupleStruct, serialize_field);
compound!(SerializeTupleVariant, serialize_field);

impl<'a> ser::SerializeMap for &mut Encoder<'a> {
    type Ok = ();
    type Error = WireError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), WireError> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WireError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), WireError> {
        Ok(())
    }
}

/// A struct's fields go out in order, without their names.
macro_rules! named_fields {
    ($trait:ident) => {
        impl<'a> ser::$trait for &mut Encoder<'a> {
            type Ok = ();
            type Error = WireError;
            #[inline]
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                _: &'static str,
                value: &T,
            ) -> Result<(), WireError> {
                value.serialize(&mut **self)
            }
            fn end(self) -> Result<(), WireError> {
                Ok(())
            }
        }
    };
}

named_fields!(SerializeStruct);
named_fields!(SerializeStructVariant);

struct Decoder<'de> {
    input: &'de [u8],
}

impl<'de> Decoder<'de> {
    #[inline]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        match self.input.split_first_chunk::<N>() {
            Some((bytes, rest)) => {
                self.input = rest;
                Ok(*bytes)
            }
            None => Err(Decoder::truncated()),
        }
    }

    fn truncated() -> WireError {
        WireError::new("the frame ends in the middle of a value")
    }

    #[inline]
    fn len(&mut self) -> Result<usize, WireError> {
        Ok(u32::from_le_bytes(self.take()?) as usize)
    }

    fn bytes(&mut self) -> Result<&'de [u8], WireError> {
        let len = self.len()?;
        if len > self.input.len() {
            return Err(WireError::new(format!(
                "a length of {len} bytes, beyond the {} left in the frame",
                self.input.len()
            )));
        }
        let (bytes, rest) = self.input.split_at(len);
        self.input = rest;
        Ok(bytes)
    }

    fn tag(&mut self, what: &str) -> Result<bool, WireError> {
        match self.take::<1>()?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(WireError::new(format!("{other} is not a valid {what} tag"))),
        }
    }
}

macro_rules! decode_le {
    ($($method:ident: $ty:ty => $visit:ident),* $(,)?) => {
        $(
            #[inline]
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
                visitor.$visit(<$ty>::from_le_bytes(self.take()?))
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = WireError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, WireError> {
        Err(WireError::new(
            "the data plane's format does not describe itself: a type that needs it (untagged enums, flattened fields) cannot cross the network",
        ))
    }

    decode_le!(
        deserialize_i8: i8 => visit_i8, deserialize_i16: i16 => visit_i16,
        deserialize_i32: i32 => visit_i32, deserialize_i64: i64 => visit_i64,
        deserialize_i128: i128 => visit_i128, deserialize_u8: u8 => visit_u8,
        deserialize_u16: u16 => visit_u16, deserialize_u32: u32 => visit_u32,
        deserialize_u64: u64 => visit_u64, deserialize_u128: u128 => visit_u128,
        deserialize_f32: f32 => visit_f32, deserialize_f64: f64 => visit_f64,
    );

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        visitor.visit_bool(self.tag("bool")?)
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        let code = u32::from_le_bytes(self.take()?);
        let c = char::from_u32(code)
            .ok_or_else(|| WireError::new(format!("{code:#x} is not a character")))?;
        visitor.visit_char(c)
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        let s = std::str::from_utf8(self.bytes()?)
            .map_err(|e| WireError::new(format!("a string is not UTF-8: {e}")))?;
        visitor.visit_borrowed_str(s)
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        self.deserialize_str(visitor)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        self.deserialize_bytes(visitor)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        if self.tag("option")? {
            visitor.visit_some(self)
        } else {
            visitor.visit_none()
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, WireError> {
        visitor.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, WireError> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        let len = self.len()?;
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, WireError> {
        visitor.visit_seq(Elements {
            decoder: self,
            left: len,
        })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, WireError> {
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        let len = self.len()?;
        visitor.visit_map(Elements {
            decoder: self,
            left: len,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WireError> {
        self.deserialize_tuple(fields.len(), visitor)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WireError> {
        visitor.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        self.deserialize_u32(visitor)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WireError> {
        self.deserialize_any(visitor)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple or struct, or the entries of a map.
struct Elements<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
    left: usize,
}

impl<'de> Elements<'_, 'de> {
    /// The next element (or map key), if any is left.
    #[inline]
    fn next<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, WireError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.decoder).map(Some)
    }

    /// Every element takes at least a byte (or none, for units): a length beyond what the
    /// frame could hold is never trusted to size a collection.
    fn size_hint(&self) -> Option<usize> {
        Some(self.left.min(self.decoder.input.len()))
    }
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = WireError;
    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, WireError> {
        self.next(seed)
    }
    fn size_hint(&self) -> Option<usize> {
        Elements::size_hint(self)
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = WireError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, WireError> {
        self.next(seed)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, WireError> {
        seed.deserialize(&mut *self.decoder)
    }
    fn size_hint(&self) -> Option<usize> {
        Elements::size_hint(self)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = WireError;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), WireError> {
        let index = u32::from_le_bytes(self.take()?);
        let value = seed.deserialize(IntoDeserializer::<WireError>::into_deserializer(index))?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = WireError;
    fn unit_variant(self) -> Result<(), WireError> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, WireError> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, WireError> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WireError> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use std::collections::{BTreeMap, HashMap};
    use weir_core::{Barrier, BarrierAlignment, CheckpointId, CheckpointKind, Element};

    #[test]
    fn a_frame_filled_batch_by_batch_decodes_as_one_batch() {
        let mut out = vec![9u8; 3];
        let mut frame = RecordsFrame::start::<(String, u64)>(&mut out).unwrap();
        frame.append(&mut out, &[("a".to_string(), 1u64)]).unwrap();
        frame.append::<(String, u64)>(&mut out, &[]).unwrap();
        frame
            .append(&mut out, &[("b".to_string(), 2u64), ("c".to_string(), 3)])
            .unwrap();
        assert_eq!(frame.records(), 3);
        let whole = Element::Records(vec![
            ("a".to_string(), 1u64),
            ("b".to_string(), 2),
            ("c".to_string(), 3),
        ]);
        assert_eq!(&out[3..], &encode(&whole).unwrap()[..]);
        let decoded: Element<(String, u64)> = decode(&out[3..]).unwrap();
        assert!(matches!(decoded, Element::Records(b) if b.len() == 3 && b[2].0 == "c"));
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Empty,
        Circle(f64),
        Point(i32, i32),
        Named { name: String, sides: Option<u8> },
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Record {
        key: u64,
        amount: i64,
        flag: bool,
        letter: char,
        label: String,
        #[serde(with = "serde_bytes_compat")]
        raw: Vec<u8>,
        shapes: Vec<Shape>,
        by_name: BTreeMap<String, u32>,
        pair: (u16, i128),
        unit: (),
        nested: Option<Box<Record>>,
    }

    /// Bytes through `serialize_bytes` / `deserialize_byte_buf`, as `serde_bytes` does.
    mod serde_bytes_compat {
        pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }
        pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            struct Bytes;
            impl<'de> serde::de::Visitor<'de> for Bytes {
                type Value = Vec<u8>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                    Ok(v.to_vec())
                }
            }
            d.deserialize_byte_buf(Bytes)
        }
    }

    fn record(key: u64) -> Record {
        Record {
            key,
            amount: -(key as i64) * 1_000_003,
            flag: key.is_multiple_of(2),
            letter: 'ß',
            label: format!("record {key} ✓"),
            raw: vec![0, 255, key as u8],
            shapes: vec![
                Shape::Empty,
                Shape::Circle(key as f64 / 3.0),
                Shape::Point(-1, i32::MAX),
                Shape::Named {
                    name: "tri".into(),
                    sides: Some(3),
                },
                Shape::Named {
                    name: String::new(),
                    sides: None,
                },
            ],
            by_name: [("a".to_string(), 1), ("b".to_string(), u32::MAX)].into(),
            pair: (u16::MAX, i128::MIN),
            unit: (),
            nested: None,
        }
    }

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(value: &T) -> T {
        decode(&encode(value).unwrap()).unwrap()
    }

    #[test]
    fn every_kind_of_serde_value_comes_back_as_it_went() {
        let mut outer = record(7);
        outer.nested = Some(Box::new(record(u64::MAX)));
        assert_eq!(round_trip(&outer), outer);
        let map: HashMap<u32, Vec<Option<String>>> =
            [(1, vec![None, Some("x".into())]), (2, vec![])].into();
        assert_eq!(round_trip(&map), map);
        assert_eq!(round_trip(&(f32::NAN.to_bits(), -0.0f64)).1, -0.0);
    }

    #[test]
    fn elements_of_a_channel_come_back_as_they_went() {
        let barrier = Barrier {
            id: CheckpointId(42),
            timestamp_ms: 1_700_000_000_000,
            kind: CheckpointKind::Savepoint,
            alignment: BarrierAlignment::AlignedWithTimeout { timeout_ms: 250 },
        };
        let elements: Vec<Element<(String, u64)>> = vec![
            Element::Records(vec![("a".into(), 1), ("bb".into(), u64::MAX)]),
            Element::Records(vec![]),
            Element::Watermark(i64::MIN),
            Element::Barrier(barrier),
            Element::EndOfInput,
        ];
        for element in elements {
            let back = round_trip(&element);
            assert_eq!(format!("{back:?}"), format!("{element:?}"));
        }
    }

    #[test]
    fn integers_take_their_full_width_little_endian() {
        let mut out = Vec::new();
        encode_into(&(1u64, -2i32, vec![3u16]), &mut out).unwrap();
        assert_eq!(
            out,
            [1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 1, 0, 0, 0, 3, 0]
        );
    }

    #[test]
    fn every_truncation_of_a_frame_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        encode_into(&Element::Records(vec![record(3), record(4)]), &mut out).unwrap();
        for cut in 0..out.len() {
            let err = decode::<Element<Record>>(&out[..cut]).unwrap_err();
            assert!(
                err.0.contains("ends in the middle") || err.0.contains("beyond"),
                "cut at {cut}: {err}"
            );
        }
        let mut longer = out.clone();
        longer.push(0);
        let err = decode::<Element<Record>>(&longer).unwrap_err();
        assert!(err.0.contains("left over"), "{err}");
    }

    #[test]
    fn malformed_values_are_errors_that_say_what_is_wrong() {
        let err = decode::<bool>(&[2]).unwrap_err();
        assert!(err.0.contains("not a valid bool"), "{err}");
        let err = decode::<Option<u8>>(&[7, 1]).unwrap_err();
        assert!(err.0.contains("not a valid option"), "{err}");
        let err = decode::<String>(&[2, 0, 0, 0, 0xff, 0xfe]).unwrap_err();
        assert!(err.0.contains("not UTF-8"), "{err}");
        let err = decode::<char>(&0xd800u32.to_le_bytes()).unwrap_err();
        assert!(err.0.contains("not a character"), "{err}");
        // A length far beyond the frame is refused before anything is allocated for it.
        let err = decode::<Vec<u64>>(&[0xff, 0xff, 0xff, 0xff, 1]).unwrap_err();
        assert!(err.0.contains("ends in the middle"), "{err}");
        let err = decode::<String>(&[0xff, 0xff, 0xff, 0x7f]).unwrap_err();
        assert!(err.0.contains("beyond"), "{err}");
        let err = decode::<Shape>(&9u32.to_le_bytes()).unwrap_err();
        assert!(
            err.0.contains("integer `9`, expected variant index"),
            "{err}"
        );
    }

    #[test]
    fn a_type_that_needs_a_self_describing_format_is_refused_with_a_reason() {
        #[derive(Debug, Serialize, Deserialize)]
        #[serde(untagged)]
        enum Loose {
            Number(u64),
            Text(String),
        }
        let mut out = Vec::new();
        encode_into(&Loose::Number(3), &mut out).unwrap();
        let err = decode::<Loose>(&out).unwrap_err();
        assert!(err.0.contains("does not describe itself"), "{err}");
        let err = encode_into(&UnknownLength, &mut out).unwrap_err();
        assert!(err.0.contains("unknown length"), "{err}");
    }

    /// A sequence whose length is not known up front (as an iterator's `collect_seq` of a
    /// filter).
    struct UnknownLength;
    impl Serialize for UnknownLength {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq((0..3u8).filter(|x| x % 2 == 0))
        }
    }
}
