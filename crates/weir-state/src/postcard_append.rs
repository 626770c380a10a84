//! A serde serializer that appends postcard's wire format straight to a `Vec<u8>`: the encoder
//! of every key and value a snapshot writes.
//!
//! The bytes are exactly postcard's (version 1 of its wire format: varints for integers of 16
//! bits and more, zigzag for signed ones, a varint length before sequences, maps, strings and
//! bytes, a varint index before enum variants, nothing for structs and tuples), so everything
//! is read back with `postcard` itself. What differs is the path to them: postcard's own
//! serializer builds each varint in a buffer on the stack and copies it through its output
//! flavor, and the result is too large for the compiler to inline into a value's `Serialize`;
//! in a profile of Nexmark q4's snapshots that copy-and-call made up half of the snapshot
//! threads' time. Here a varint is pushed byte by byte into the vector, after one check of its
//! capacity, and the whole of it inlines. The tests hold the two serializers to the same bytes.

use postcard::{Error, Result};
use serde::ser::{self, Serialize};

/// Appends the postcard encoding of `value` to `out`.
#[inline]
pub fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<()> {
    value.serialize(&mut Appender(out))
}

/// Appends `v` as a postcard varint (LEB128: seven bits a byte, least significant first, the
/// high bit set on every byte but the last).
#[inline(always)]
pub(crate) fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    // At most ten bytes: one capacity check, and the pushes below find room.
    out.reserve(10);
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn push_varint_u128(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

struct Appender<'a>(&'a mut Vec<u8>);

impl Appender<'_> {
    #[inline(always)]
    fn varint(&mut self, v: u64) -> Result<()> {
        push_varint(self.0, v);
        Ok(())
    }

    #[inline(always)]
    fn len(&mut self, len: Option<usize>) -> Result<()> {
        let len = len.ok_or(Error::SerializeSeqLengthUnknown)?;
        self.varint(len as u64)
    }

    #[inline(always)]
    fn bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.varint(bytes.len() as u64)?;
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

impl<'a> ser::Serializer for &mut Appender<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn is_human_readable(&self) -> bool {
        false
    }

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<()> {
        self.0.push(u8::from(v));
        Ok(())
    }

    #[inline]
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.0.push(v as u8);
        Ok(())
    }

    #[inline]
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.varint(zigzag(v.into()))
    }

    #[inline]
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.varint(zigzag(v.into()))
    }

    #[inline]
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.varint(zigzag(v))
    }

    fn serialize_i128(self, v: i128) -> Result<()> {
        push_varint_u128(self.0, ((v << 1) ^ (v >> 127)) as u128);
        Ok(())
    }

    #[inline]
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.0.push(v);
        Ok(())
    }

    #[inline]
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.varint(v.into())
    }

    #[inline]
    fn serialize_u32(self, v: u32) -> Result<()> {
        self.varint(v.into())
    }

    #[inline]
    fn serialize_u64(self, v: u64) -> Result<()> {
        self.varint(v)
    }

    fn serialize_u128(self, v: u128) -> Result<()> {
        push_varint_u128(self.0, v);
        Ok(())
    }

    #[inline]
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    #[inline]
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<()> {
        self.bytes(v.encode_utf8(&mut [0; 4]).as_bytes())
    }

    #[inline]
    fn serialize_str(self, v: &str) -> Result<()> {
        self.bytes(v.as_bytes())
    }

    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.bytes(v)
    }

    #[inline]
    fn serialize_none(self) -> Result<()> {
        self.0.push(0);
        Ok(())
    }

    #[inline]
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<()> {
        self.0.push(1);
        value.serialize(self)
    }

    #[inline]
    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        Ok(())
    }

    #[inline]
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        index: u32,
        _: &'static str,
    ) -> Result<()> {
        self.varint(index.into())
    }

    #[inline]
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }

    #[inline]
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<()> {
        self.varint(index.into())?;
        value.serialize(self)
    }

    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self> {
        self.len(len)?;
        Ok(self)
    }

    #[inline]
    fn serialize_tuple(self, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self> {
        self.varint(index.into())?;
        Ok(self)
    }

    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Self> {
        self.len(len)?;
        Ok(self)
    }

    #[inline]
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    #[inline]
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self> {
        self.varint(index.into())?;
        Ok(self)
    }

    fn collect_str<T: ?Sized + std::fmt::Display>(self, value: &T) -> Result<()> {
        // The length goes first, so the text is formatted once, aside.
        self.bytes(value.to_string().as_bytes())
    }
}

/// Elements, fields and entries follow each other with nothing in between.
macro_rules! compound {
    ($($trait:ident :: $method:ident ($($name:ident : $ty:ty),*)),* $(,)?) => {$(
        impl<'a> ser::$trait for &mut Appender<'a> {
            type Ok = ();
            type Error = Error;

            #[inline]
            fn $method<T: ?Sized + Serialize>(&mut self, $($name: $ty,)* value: &T) -> Result<()> {
                value.serialize(&mut **self)
            }

            #[inline]
            fn end(self) -> Result<()> {
                Ok(())
            }
        }
    )*};
}

compound! {
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(_key: &'static str),
    SerializeStructVariant::serialize_field(_key: &'static str),
}

impl<'a> ser::SerializeMap for &mut Appender<'a> {
    type Ok = ();
    type Error = Error;

    #[inline]
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<()> {
        key.serialize(&mut **self)
    }

    #[inline]
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        value.serialize(&mut **self)
    }

    #[inline]
    fn end(self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Empty,
        Point(i32, i32),
        Named { name: String, sides: u16 },
        Boxed(Box<Shape>),
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Unit;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Wrapper(u64);

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Everything {
        flag: bool,
        small: (i8, u8),
        ints: (i16, u16, i32, u32),
        wide: (i64, u64),
        huge: (i128, u128),
        floats: (f32, f64),
        letter: char,
        text: String,
        #[serde(with = "serde_bytes_compat")]
        raw: Vec<u8>,
        maybe: Option<Option<u32>>,
        unit: (),
        unit_struct: Unit,
        newtype: Wrapper,
        shapes: Vec<Shape>,
        map: BTreeMap<String, Vec<i64>>,
    }

    /// `serialize_bytes` (rather than a sequence of `u8`) for a `Vec<u8>`.
    mod serde_bytes_compat {
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(bytes)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            <&[u8]>::deserialize(d).map(<[u8]>::to_vec)
        }
    }

    fn shape() -> impl Strategy<Value = Shape> {
        let leaf = prop_oneof![
            Just(Shape::Empty),
            (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Shape::Point(x, y)),
            (".{0,12}", any::<u16>()).prop_map(|(name, sides)| Shape::Named { name, sides }),
        ];
        leaf.prop_recursive(3, 8, 1, |inner| {
            inner.prop_map(|s| Shape::Boxed(Box::new(s)))
        })
    }

    fn everything() -> impl Strategy<Value = Everything> {
        (
            (
                any::<bool>(),
                any::<(i8, u8)>(),
                any::<(i16, u16, i32, u32)>(),
            ),
            (
                any::<(i64, u64)>(),
                any::<(i128, u128)>(),
                any::<(f32, f64)>(),
            ),
            (
                any::<char>(),
                ".{0,40}",
                prop::collection::vec(any::<u8>(), 0..300),
            ),
            (any::<Option<Option<u32>>>(), any::<u64>()),
            prop::collection::vec(shape(), 0..6),
            prop::collection::btree_map(".{0,6}", prop::collection::vec(any::<i64>(), 0..4), 0..5),
        )
            .prop_map(
                |(
                    (flag, small, ints),
                    (wide, huge, floats),
                    (letter, text, raw),
                    (maybe, n),
                    shapes,
                    map,
                )| {
                    Everything {
                        flag,
                        small,
                        ints,
                        wide,
                        huge,
                        floats,
                        letter,
                        text,
                        raw,
                        maybe,
                        unit: (),
                        unit_struct: Unit,
                        newtype: Wrapper(n),
                        shapes,
                        map,
                    }
                },
            )
    }

    fn appended<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
        let mut out = vec![0xAB];
        append(value, &mut out).expect("serialises");
        assert_eq!(out[0], 0xAB, "appends after what is there");
        out.split_off(1)
    }

    proptest! {
        #[test]
        fn writes_the_bytes_postcard_writes(value in everything()) {
            let bytes = appended(&value);
            prop_assert_eq!(&bytes, &postcard::to_allocvec(&value).expect("serialises"));
            prop_assert_eq!(postcard::from_bytes::<Everything>(&bytes).expect("reads back"), value);
        }

        #[test]
        fn writes_every_integer_as_postcard_does(u in any::<u64>(), i in any::<i64>(), shift in 0u32..64) {
            for v in [u, u >> shift, 1u64 << shift, (1u64 << shift) - 1] {
                prop_assert_eq!(appended(&v), postcard::to_allocvec(&v).expect("serialises"));
            }
            for v in [i, i >> shift, -(1i64 << shift.min(62))] {
                prop_assert_eq!(appended(&v), postcard::to_allocvec(&v).expect("serialises"));
            }
        }
    }

    #[test]
    fn varints_at_the_edges_of_their_lengths() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            assert_eq!(appended(&v), postcard::to_allocvec(&v).unwrap(), "{v}");
        }
        for v in [0i64, -1, 63, -64, 64, -65, i64::MIN, i64::MAX] {
            assert_eq!(appended(&v), postcard::to_allocvec(&v).unwrap(), "{v}");
        }
        assert_eq!(appended(&u64::MAX).len(), 10);
    }

    #[test]
    fn collected_text_is_written_as_a_string() {
        let addr = std::net::Ipv4Addr::new(10, 0, 0, 1);
        assert_eq!(appended(&addr), postcard::to_allocvec(&addr).unwrap());
        let s = format_args!("{}-{}", 1, "two");
        let mut out = Vec::new();
        ser::Serializer::collect_str(&mut Appender(&mut out), &s).unwrap();
        assert_eq!(out, postcard::to_allocvec("1-two").unwrap());
    }

    #[test]
    fn a_sequence_of_unknown_length_is_an_error_as_in_postcard() {
        struct Unsized;
        impl Serialize for Unsized {
            fn serialize<S: ser::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(std::iter::from_fn(|| None::<u8>).filter(|_| true))
            }
        }
        let mut out = Vec::new();
        assert_eq!(
            append(&Unsized, &mut out),
            Err(Error::SerializeSeqLengthUnknown)
        );
    }
}
