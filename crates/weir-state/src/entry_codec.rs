//! How one key's entry of each kind of keyed state is written to and read from snapshot bytes.
//!
//! Every value is in `postcard`'s format (compact varint encoding, no field names), written by
//! [`crate::postcard_append`] and read by `postcard`. A key group's
//! bytes are `count` then `count` times `key, entry`, where an entry is a value (value state), a
//! length-prefixed sequence of values (list state) or of `(user key, user value)` pairs (map
//! state). Readers never trust a length: collections grow as elements actually decode.

use crate::frozen_table::TableKind;
use crate::postcard_append::push_varint;
use hashbrown::HashMap;
use serde::de::DeserializeOwned;
use std::hash::Hash;
use std::marker::PhantomData;

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
        push_varint(out, entry.len() as u64);
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
        push_varint(out, entry.len() as u64);
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

pub use crate::postcard_append::append;

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
