//! The kinds of keyed state table ([`TableKind`]) and how one key's entry of each kind is
//! written to and read from snapshot bytes.
//!
//! Every value goes through `postcard` (compact varint encoding, no field names). A key group's
//! bytes are `count` then `count` times `key, entry`, where an entry is a value (value state), a
//! length-prefixed sequence of values (list state) or of `(user key, user value)` pairs (map
//! state). Readers never trust a length: collections grow as elements actually decode.

use hashbrown::HashMap;
use postcard::ser_flavors::Flavor;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

/// The kind of a keyed state table; a table must be restored as the kind it was written as.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum TableKind {
    /// [`ValueState`](crate::ValueState): one value per key.
    Value,
    /// [`MapState`](crate::MapState): a map per key.
    Map,
    /// [`ListState`](crate::ListState): a list per key.
    List,
    /// [`TtlValueState`](crate::TtlValueState): one value per key, with its time to live.
    TtlValue,
    /// [`TtlMapState`](crate::TtlMapState): a map per key, each user key with its time to live.
    TtlMap,
    /// [`TtlListState`](crate::TtlListState): a list per key, each element with its time to
    /// live.
    TtlList,
}

impl fmt::Display for TableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TableKind::Value => "value",
            TableKind::Map => "map",
            TableKind::List => "list",
            TableKind::TtlValue => "value (with time-to-live)",
            TableKind::TtlMap => "map (with time-to-live)",
            TableKind::TtlList => "list (with time-to-live)",
        })
    }
}

/// The stored entry type of a table kind and how it is (de)serialised.
pub(crate) trait EntryCodec: 'static {
    type Entry: Clone + Send + Sync + 'static;
    const KIND: TableKind;
    fn encode(entry: &Self::Entry, out: &mut Vec<u8>) -> postcard::Result<()>;
    fn decode(input: &[u8]) -> postcard::Result<(Self::Entry, &[u8])>;
    /// An empty entry is equivalent to an absent key and is not kept on restore.
    fn is_empty(_entry: &Self::Entry) -> bool {
        false
    }
}

/// [`ValueState`](crate::ValueState): the entry is the value.
pub(crate) struct ValueCodec<V>(PhantomData<fn() -> V>);

impl<V: crate::Value> EntryCodec for ValueCodec<V> {
    type Entry = V;
    const KIND: TableKind = TableKind::Value;
    fn encode(entry: &V, out: &mut Vec<u8>) -> postcard::Result<()> {
        append(entry, out)
    }
    fn decode(input: &[u8]) -> postcard::Result<(V, &[u8])> {
        postcard::take_from_bytes(input)
    }
}

/// [`ListState`](crate::ListState): the entry is the list.
pub(crate) struct ListCodec<V>(PhantomData<fn() -> V>);

impl<V: crate::Value> EntryCodec for ListCodec<V> {
    type Entry = Vec<V>;
    const KIND: TableKind = TableKind::List;
    fn encode(entry: &Vec<V>, out: &mut Vec<u8>) -> postcard::Result<()> {
        append(&(entry.len() as u64), out)?;
        entry.iter().try_for_each(|v| append(v, out))
    }
    fn decode(input: &[u8]) -> postcard::Result<(Vec<V>, &[u8])> {
        let (len, mut rest) = take_len(input)?;
        let mut list = Vec::with_capacity(len.min(rest.len()));
        for _ in 0..len {
            let (v, r) = postcard::take_from_bytes(rest)?;
            list.push(v);
            rest = r;
        }
        Ok((list, rest))
    }
    fn is_empty(entry: &Vec<V>) -> bool {
        entry.is_empty()
    }
}

/// [`MapState`](crate::MapState): the entry is the user map.
pub(crate) struct MapCodec<UK, UV>(PhantomData<fn() -> (UK, UV)>);

impl<UK, UV> EntryCodec for MapCodec<UK, UV>
where
    UK: crate::Value + Eq + Hash,
    UV: crate::Value,
{
    type Entry = HashMap<UK, UV>;
    const KIND: TableKind = TableKind::Map;
    fn encode(entry: &HashMap<UK, UV>, out: &mut Vec<u8>) -> postcard::Result<()> {
        append(&(entry.len() as u64), out)?;
        entry.iter().try_for_each(|(k, v)| {
            append(k, out)?;
            append(v, out)
        })
    }
    fn decode(input: &[u8]) -> postcard::Result<(HashMap<UK, UV>, &[u8])> {
        let (len, mut rest) = take_len(input)?;
        let mut map = HashMap::with_capacity(len.min(rest.len()));
        for _ in 0..len {
            let (k, r) = postcard::take_from_bytes(rest)?;
            let (v, r) = postcard::take_from_bytes(r)?;
            if map.insert(k, v).is_some() {
                // A duplicate user key would silently lose a value: the bytes are not ours.
                return Err(postcard::Error::DeserializeBadEncoding);
            }
            rest = r;
        }
        Ok((map, rest))
    }
    fn is_empty(entry: &HashMap<UK, UV>) -> bool {
        entry.is_empty()
    }
}

/// Appends the postcard encoding of `value` to `out`, without an intermediate buffer (bytes
/// go in with `push` and `extend_from_slice`, not one `Extend` call per byte).
pub fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, AppendToVec(out))
}

/// Reads a postcard varint length.
pub(crate) fn take_len(input: &[u8]) -> postcard::Result<(usize, &[u8])> {
    let (len, rest): (u64, &[u8]) = postcard::take_from_bytes(input)?;
    let len = usize::try_from(len).map_err(|_| postcard::Error::DeserializeBadVarint)?;
    Ok((len, rest))
}

/// Reads one postcard value.
pub(crate) fn take<T: DeserializeOwned>(input: &[u8]) -> postcard::Result<(T, &[u8])> {
    postcard::take_from_bytes(input)
}

struct AppendToVec<'a>(&'a mut Vec<u8>);

impl Flavor for AppendToVec<'_> {
    type Output = ();

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        // Most slices are varints, 1 to 10 bytes: with the length a constant in each arm, the
        // copy is a few moves instead of a call to `memcpy`.
        let out = &mut *self.0;
        match data.len() {
            1 => out.push(data[0]),
            2 => out.extend_from_slice(&data[..2]),
            3 => out.extend_from_slice(&data[..3]),
            4 => out.extend_from_slice(&data[..4]),
            5 => out.extend_from_slice(&data[..5]),
            6 => out.extend_from_slice(&data[..6]),
            7 => out.extend_from_slice(&data[..7]),
            8 => out.extend_from_slice(&data[..8]),
            9 => out.extend_from_slice(&data[..9]),
            10 => out.extend_from_slice(&data[..10]),
            _ => out.extend_from_slice(data),
        }
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}
