//! One state table over RocksDB: the in-memory tier in front of the table's column family (see
//! the [module](super) documentation for the tiers, snapshots and errors).

use super::frozen::{LsmFrozen, Source};
use super::materialize::{FrozenWrites, Materialization};
use super::store::{backend_error, LsmStore};
use crate::entry_codec::{append, take, EntryCodec};
use crate::entry_table::EntryTable;
use crate::error::StateError;
use crate::expiry::Expiry;
use crate::key::{CurrentKey, Key};
use elsa::{FrozenMap, FrozenVec};
use hashbrown::HashMap;
use rocksdb::{IteratorMode, WriteBatch};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// A write batch is written to RocksDB once it holds this many bytes.
const BATCH_BYTES: usize = 8 << 20;

/// The most key groups a RocksDB table takes (Flink's limit too): every key group and the end
/// of every range fit the two bytes a key starts with.
pub(crate) const MAX_PARALLELISM: u32 = 32_768;

/// Keys written and not yet in RocksDB: `None` is a removal.
type Writes<K, E> = HashMap<K, Option<E>>;

/// A snapshot's frozen writes, with the snapshot that writes them into RocksDB.
type Pending<K, E> = (Arc<Writes<K, E>>, Arc<Materialization>);

/// A state table whose entries live in RocksDB, with the in-memory tier in front.
// Invariants: the tiers are searched newest first — `dirty`, then `frozen` from the newest
// snapshot back, then `cache`, then RocksDB — and a key in `dirty` or `frozen` is never in
// `cache` (a write takes it out), so dropping a materialized frozen set never uncovers a stale
// cached entry. Nothing is written to RocksDB while a frozen set's snapshot is not
// materialized: a spill materializes them all first.
pub(crate) struct LsmTier<K, E, C> {
    store: Arc<LsmStore>,
    name: Arc<str>,
    max_parallelism: u32,
    range: KeyGroupRange,
    dirty: Writes<K, E>,
    frozen: Vec<Pending<K, E>>,
    /// Entries read from RocksDB (`None`: RocksDB has no entry); filled behind `&self`, its
    /// entries boxed so that references to them survive later insertions.
    cache: FrozenMap<K, Box<Option<E>>>,
    /// Entries read from RocksDB by [`iter`](Self::iter), kept until the next spill.
    listed: FrozenVec<Box<(K, E)>>,
    /// A RocksDB failure seen behind `&self`, returned by the next [`maintain`](Self::maintain).
    failure: RefCell<Option<String>>,
    key_bytes: RefCell<Vec<u8>>,
    /// Estimated bytes of one entry in memory, refined from the encoded sizes at each spill.
    entry_bytes: u64,
    epoch: u64,
    codec: PhantomData<fn() -> C>,
}

impl<K: Key, E: Clone + Send + Sync + 'static, C: EntryCodec<Entry = E>> LsmTier<K, E, C> {
    pub(crate) fn new(
        store: Arc<LsmStore>,
        name: Arc<str>,
        max_parallelism: u32,
        range: KeyGroupRange,
    ) -> Result<Self, StateError> {
        if max_parallelism > MAX_PARALLELISM {
            return Err(backend_error(format!(
                "state table '{name}': the RocksDB backend takes at most {MAX_PARALLELISM} key groups (pipeline.max-parallelism), not {max_parallelism}"
            )));
        }
        store.family(&name)?;
        if let Some(found) = store.restored_kind(&name) {
            if found != C::KIND {
                return Err(StateError::KindMismatch {
                    table: name.to_string(),
                    expected: C::KIND,
                    found,
                });
            }
        }
        Ok(LsmTier {
            store,
            name,
            max_parallelism,
            range,
            dirty: HashMap::new(),
            frozen: Vec::new(),
            cache: FrozenMap::new(),
            listed: FrozenVec::new(),
            failure: RefCell::new(None),
            key_bytes: RefCell::new(Vec::new()),
            entry_bytes: (std::mem::size_of::<K>() + std::mem::size_of::<Option<E>>() + 32) as u64,
            epoch: 0,
            codec: PhantomData,
        })
    }

    pub(crate) fn get(&self, key: &CurrentKey<'_, K>) -> Option<&E> {
        if let Some(entry) = self.dirty.get(key.key) {
            return entry.as_ref();
        }
        for (writes, _) in self.frozen.iter().rev() {
            if let Some(entry) = writes.get(key.key) {
                return entry.as_ref();
            }
        }
        if let Some(entry) = self.cache.get(key.key) {
            return entry.as_ref();
        }
        let loaded = self.load(key);
        self.cache
            .insert(key.key.clone(), Box::new(loaded))
            .as_ref()
    }

    /// The entry of `key` in the dirty tier (`None`: absent), brought there from wherever it is.
    fn slot(&mut self, key: &CurrentKey<'_, K>) -> &mut Option<E> {
        if !self.dirty.contains_key(key.key) {
            let current = self.take_current(key);
            self.dirty.insert(key.key.clone(), current);
        }
        self.dirty
            .get_mut(key.key)
            .expect("the key was just put in the dirty tier")
    }

    /// The entry of a key not in the dirty tier, out of the cache (which must not keep it).
    fn take_current(&mut self, key: &CurrentKey<'_, K>) -> Option<E> {
        for (writes, _) in self.frozen.iter().rev() {
            if let Some(entry) = writes.get(key.key) {
                return entry.clone();
            }
        }
        match self.cache.as_mut().remove(key.key) {
            Some(entry) => *entry,
            None => self.load(key),
        }
    }

    pub(crate) fn get_mut(&mut self, key: &CurrentKey<'_, K>) -> Option<&mut E> {
        self.get(key)?;
        self.slot(key).as_mut()
    }

    pub(crate) fn insert(&mut self, key: &CurrentKey<'_, K>, entry: E) {
        match self.dirty.get_mut(key.key) {
            Some(slot) => *slot = Some(entry),
            None => {
                self.cache.as_mut().remove(key.key);
                self.dirty.insert(key.key.clone(), Some(entry));
            }
        }
    }

    pub(crate) fn insert_absent(&mut self, key: &CurrentKey<'_, K>, entry: E) -> bool {
        if self.get(key).is_some() {
            return false;
        }
        self.insert(key, entry);
        true
    }

    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> E,
    ) -> &mut E {
        self.slot(key).get_or_insert_with(default)
    }

    pub(crate) fn update(
        &mut self,
        key: &CurrentKey<'_, K>,
        f: impl FnOnce(Option<E>) -> Option<E>,
    ) {
        let slot = self.slot(key);
        *slot = f(slot.take());
    }

    pub(crate) fn remove(&mut self, key: &CurrentKey<'_, K>) -> Option<E> {
        self.get(key)?;
        self.slot(key).take()
    }

    pub(crate) fn modify_existing<R>(
        &mut self,
        key: &CurrentKey<'_, K>,
        applies: impl FnOnce(&E) -> bool,
        f: impl FnOnce(&mut E) -> R,
    ) -> Option<R> {
        if !self.get(key).is_some_and(applies) {
            return None;
        }
        let slot = self.slot(key);
        let entry = slot.as_mut()?;
        let result = f(entry);
        if C::is_empty(entry) {
            *slot = None;
        }
        Some(result)
    }

    /// Every entry of the table: reads the whole column family, keeping what it read in memory
    /// until the next spill. For tests and tools, not for processing.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &E)> {
        let mut out: Vec<(&K, &E)> = Vec::new();
        let shadowed = |k: &K| {
            self.dirty.contains_key(k) || self.frozen.iter().any(|(w, _)| w.contains_key(k))
        };
        if let Err(e) = self.list_stored(&shadowed, &mut out) {
            self.fail(e.to_string());
        }
        let mut seen = hashbrown::HashSet::new();
        let newest_first =
            std::iter::once(&self.dirty).chain(self.frozen.iter().rev().map(|(w, _)| &**w));
        for writes in newest_first {
            for (k, e) in writes {
                if seen.insert(k) {
                    if let Some(e) = e {
                        out.push((k, e));
                    }
                }
            }
        }
        out.into_iter()
    }

    /// The entries in RocksDB that no newer tier shadows, appended to `out`.
    fn list_stored<'a>(
        &'a self,
        shadowed: &dyn Fn(&K) -> bool,
        out: &mut Vec<(&'a K, &'a E)>,
    ) -> Result<(), StateError> {
        let family = self.store.family(&self.name)?;
        let db = self.store.db();
        for item in db.iterator_cf(family, IteratorMode::Start) {
            let (key_bytes, value) =
                item.map_err(|e| backend_error(format!("RocksDB read failed: {e}")))?;
            let key_group = key_group_of_bytes(&key_bytes);
            let decode = |reason: String| StateError::Decode {
                table: self.name.to_string(),
                key_group,
                reason,
            };
            let (key, _) = take::<K>(&key_bytes[2..]).map_err(|e| decode(format!("key: {e}")))?;
            if shadowed(&key) {
                continue;
            }
            let entry = decode_entry::<E, C>(&value).map_err(decode)?;
            let listed = self.listed.push_get(Box::new((key, entry)));
            out.push((&listed.0, &listed.1));
        }
        Ok(())
    }

    /// The number of keys: reads the whole column family.
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    /// The synchronous snapshot: the dirty keys become the snapshot's frozen set.
    pub(crate) fn freeze(&mut self, expiry: Option<Expiry>) -> LsmFrozen {
        let round = self
            .store
            .current_snapshot()
            .unwrap_or_else(|| self.store.solo_snapshot());
        let writes = Arc::new(std::mem::take(&mut self.dirty));
        round.add(Box::new(FrozenSet::<K, E, C> {
            name: self.name.clone(),
            max_parallelism: self.max_parallelism,
            writes: writes.clone(),
            codec: PhantomData,
        }));
        self.frozen.push((writes, round.clone()));
        let frozen = LsmFrozen::new(
            self.name.clone(),
            C::KIND,
            self.max_parallelism,
            self.range,
            self.epoch,
            Source::Snapshot(round),
        )
        .with_expiry(expiry);
        self.epoch += 1;
        frozen
    }

    /// Between batches: returns a failure seen since the last call, lets go of frozen sets now
    /// in RocksDB, and spills if the tier is over its budget.
    pub(crate) fn maintain(&mut self) -> Result<(), StateError> {
        if let Some(reason) = self.failure.borrow_mut().take() {
            return Err(backend_error(reason));
        }
        let mut i = 0;
        while i < self.frozen.len() {
            if self.frozen[i].1.is_done() {
                self.frozen[i].1.materialize()?;
                self.frozen.remove(i);
            } else {
                i += 1;
            }
        }
        let held = self.dirty.len()
            + self.cache.len()
            + self.listed.len()
            + self.frozen.iter().map(|(w, _)| w.len()).sum::<usize>();
        if held as u64 * self.entry_bytes > self.store.tier_budget() {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the dirty keys to RocksDB (after every snapshot still pending) and empties the
    /// tier.
    pub(crate) fn spill(&mut self) -> Result<(), StateError> {
        for (_, round) in &self.frozen {
            round.materialize()?;
        }
        self.frozen.clear();
        let family = self.store.family(&self.name)?;
        // Encoded into one buffer and written in key order: RocksDB inserts sorted keys into
        // its memtable several times faster than keys in hash order.
        let count = self.dirty.len();
        let mut bytes = Vec::new();
        let mut entries: Vec<(Range<usize>, Option<Range<usize>>)> = Vec::with_capacity(count);
        let mut key_bytes = Vec::new();
        for (key, entry) in self.dirty.drain() {
            db_key(&mut key_bytes, &self.name, &key, self.max_parallelism)?;
            let key_range = bytes.len()..bytes.len() + key_bytes.len();
            bytes.extend_from_slice(&key_bytes);
            let value_range = match entry {
                Some(entry) => {
                    let start = bytes.len();
                    C::encode(&entry, &mut bytes)
                        .map_err(|e| encode_error(&self.name, format!("value: {e}")))?;
                    Some(start..bytes.len())
                }
                None => None,
            };
            entries.push((key_range, value_range));
        }
        entries.sort_unstable_by(|a, b| bytes[a.0.clone()].cmp(&bytes[b.0.clone()]));
        let mut batch = WriteBatch::default();
        for (key, value) in entries {
            match value {
                Some(value) => batch.put_cf(family, &bytes[key], &bytes[value]),
                None => batch.delete_cf(family, &bytes[key]),
            }
            if batch.size_in_bytes() >= BATCH_BYTES {
                self.store.write(std::mem::take(&mut batch))?;
            }
        }
        let encoded = bytes.len();
        self.store.write(batch)?;
        if let Some(average) = encoded.checked_div(count) {
            // Keys and entries own heap memory the size of their encoding, roughly.
            let fixed = (std::mem::size_of::<K>() + std::mem::size_of::<Option<E>>() + 32) as u64;
            self.entry_bytes = fixed + average as u64;
        }
        self.cache.as_mut().clear();
        self.listed = FrozenVec::new();
        Ok(())
    }

    /// Replaces the table's contents in RocksDB by the key groups `groups` yields (each with
    /// the key group it holds).
    pub(crate) fn restore(
        &mut self,
        groups: impl Iterator<Item = Result<(u32, EntryTable<K, E>), StateError>>,
    ) -> Result<(), StateError> {
        self.dirty.clear();
        self.frozen.clear();
        self.cache.as_mut().clear();
        self.listed = FrozenVec::new();
        let family = self.store.family(&self.name)?;
        let mut batch = WriteBatch::default();
        // A database restored in place holds its key groups already, and `groups` the others
        // (of the other old subtasks); a fresh one starts empty.
        if !self.store.restored_in_place() {
            batch.delete_range_cf(
                family,
                key_group_prefix(self.range.start),
                key_group_prefix(self.range.end),
            );
        }
        let mut key_bytes = Vec::new();
        let mut value = Vec::new();
        for group in groups {
            let (_, entries) = group?;
            for (key, entry) in entries.iter() {
                db_key(&mut key_bytes, &self.name, key, self.max_parallelism)?;
                value.clear();
                C::encode(entry, &mut value)
                    .map_err(|e| encode_error(&self.name, format!("value: {e}")))?;
                batch.put_cf(family, &key_bytes, &value);
                if batch.size_in_bytes() >= BATCH_BYTES {
                    self.store.write(std::mem::take(&mut batch))?;
                }
            }
        }
        self.store.write(batch)?;
        self.epoch += 1;
        Ok(())
    }

    /// The entry of `key` in RocksDB; a failure is remembered and reads as no entry.
    fn load(&self, key: &CurrentKey<'_, K>) -> Option<E> {
        match self.try_load(key) {
            Ok(entry) => entry,
            Err(e) => {
                self.fail(e.to_string());
                None
            }
        }
    }

    fn try_load(&self, key: &CurrentKey<'_, K>) -> Result<Option<E>, StateError> {
        let mut key_bytes = self.key_bytes.borrow_mut();
        db_key(&mut key_bytes, &self.name, key.key, self.max_parallelism)?;
        let family = self.store.family(&self.name)?;
        let Some(value) = self
            .store
            .db()
            .get_pinned_cf(family, &*key_bytes)
            .map_err(|e| backend_error(format!("RocksDB read failed: {e}")))?
        else {
            return Ok(None);
        };
        decode_entry::<E, C>(&value)
            .map(Some)
            .map_err(|reason| StateError::Decode {
                table: self.name.to_string(),
                key_group: key.key_group,
                reason,
            })
    }

    /// Reads the entries of `keys` that no tier holds from RocksDB in one batched lookup
    /// (RocksDB's `MultiGet`: the keys sorted, each table file's index and filter searched once
    /// for all of them) into the cache, where the reads of the batch's records then find them.
    /// A failure is remembered as a failed read is.
    pub(crate) fn prefetch(&self, keys: &[CurrentKey<'_, K>]) {
        if let Err(e) = self.try_prefetch(keys) {
            self.fail(e.to_string());
        }
    }

    fn try_prefetch(&self, keys: &[CurrentKey<'_, K>]) -> Result<(), StateError> {
        let mut encoded = Vec::new();
        // The byte range of each wanted key in `encoded`, and its index in `keys`.
        let mut wanted: Vec<(Range<usize>, usize)> = Vec::new();
        let mut one = self.key_bytes.borrow_mut();
        for (i, key) in keys.iter().enumerate() {
            let held = self.dirty.contains_key(key.key)
                || self.frozen.iter().any(|(w, _)| w.contains_key(key.key))
                || self.cache.get(key.key).is_some();
            if held {
                continue;
            }
            db_key(&mut one, &self.name, key.key, self.max_parallelism)?;
            let start = encoded.len();
            encoded.extend_from_slice(&one);
            wanted.push((start..encoded.len(), i));
        }
        if wanted.len() < 2 {
            return Ok(()); // one read is as cheap on its own
        }
        wanted.sort_unstable_by(|a, b| encoded[a.0.clone()].cmp(&encoded[b.0.clone()]));
        wanted.dedup_by(|a, b| encoded[a.0.clone()] == encoded[b.0.clone()]);
        let family = self.store.family(&self.name)?;
        let found = self.store.db().batched_multi_get_cf(
            family,
            wanted.iter().map(|(range, _)| &encoded[range.clone()]),
            true,
        );
        for ((_, i), value) in wanted.iter().zip(found) {
            let value = value.map_err(|e| backend_error(format!("RocksDB read failed: {e}")))?;
            let key = &keys[*i];
            let entry = match value {
                Some(bytes) => {
                    Some(
                        decode_entry::<E, C>(&bytes).map_err(|reason| StateError::Decode {
                            table: self.name.to_string(),
                            key_group: key.key_group,
                            reason,
                        })?,
                    )
                }
                None => None,
            };
            self.cache.insert(key.key.clone(), Box::new(entry));
        }
        Ok(())
    }

    fn fail(&self, reason: String) {
        self.failure.borrow_mut().get_or_insert(reason);
    }
}

/// A table's frozen keys, as a snapshot writes them into RocksDB.
struct FrozenSet<K, E, C> {
    name: Arc<str>,
    max_parallelism: u32,
    writes: Arc<Writes<K, E>>,
    codec: PhantomData<fn() -> C>,
}

impl<K: Key, E: Clone + Send + Sync + 'static, C: EntryCodec<Entry = E>> FrozenWrites
    for FrozenSet<K, E, C>
{
    fn write(&self, store: &LsmStore) -> Result<(), StateError> {
        let family = store.family(&self.name)?;
        let mut batch = WriteBatch::default();
        let mut key_bytes = Vec::new();
        let mut value = Vec::new();
        for (key, entry) in self.writes.iter() {
            db_key(&mut key_bytes, &self.name, key, self.max_parallelism)?;
            match entry {
                Some(entry) => {
                    value.clear();
                    C::encode(entry, &mut value)
                        .map_err(|e| encode_error(&self.name, format!("value: {e}")))?;
                    batch.put_cf(family, &key_bytes, &value);
                }
                None => batch.delete_cf(family, &key_bytes),
            }
            if batch.size_in_bytes() >= BATCH_BYTES {
                store.write(std::mem::take(&mut batch))?;
            }
        }
        store.write(batch)
    }
}

/// The first two bytes of every key of `key_group`.
pub(crate) fn key_group_prefix(key_group: u32) -> [u8; 2] {
    // At most MAX_PARALLELISM (checked when a table opens): fits in two bytes.
    (key_group as u16).to_be_bytes()
}

fn key_group_of_bytes(key: &[u8]) -> u32 {
    match key {
        [a, b, ..] => u32::from(u16::from_be_bytes([*a, *b])),
        _ => u32::MAX,
    }
}

/// The RocksDB key of `key`: its key group (computed again: the tiers keep keys, not their
/// groups), then its postcard bytes.
fn db_key<K: Key>(
    out: &mut Vec<u8>,
    table: &str,
    key: &K,
    max_parallelism: u32,
) -> Result<(), StateError> {
    out.clear();
    out.extend_from_slice(&key_group_prefix(crate::key_group_of(key, max_parallelism)));
    append(key, out).map_err(|e| encode_error(table, format!("key: {e}")))
}

fn decode_entry<E, C: EntryCodec<Entry = E>>(bytes: &[u8]) -> Result<E, String> {
    let (entry, rest) = C::decode(bytes).map_err(|e| format!("value: {e}"))?;
    if !rest.is_empty() {
        return Err(format!(
            "{} unexpected trailing bytes after a value",
            rest.len()
        ));
    }
    Ok(entry)
}

fn encode_error(table: &str, reason: String) -> StateError {
    StateError::Encode(format!("state table '{table}': {reason}"))
}
