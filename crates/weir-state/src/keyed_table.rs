//! Copy-on-write storage behind every keyed state table: one hash map per key group, each behind an `Arc`.
//!
//! The synchronous snapshot phase clones the `Arc`s (one per key group, however many keys there
//! are) into a [`FrozenKeyGroups`]; the asynchronous worker serialises from those while the task
//! keeps writing. A write goes through `Arc::make_mut`, which copies a key group's map only if a
//! snapshot still shares it, so each key group is copied at most once per snapshot, and only if
//! it is written while its snapshot is in flight.
//!
//! Invariant: `groups.len() == last_modified.len() == range.len()` once initialised, and
//! `groups[i]` holds exactly the keys whose key group is `range.start + i`.

use crate::entry_codec::{append, take, take_len, EntryCodec};
use crate::error::StateError;
use crate::frozen_table::{FrozenTable, TableKind};
use crate::key::{CurrentKey, Key};
use crate::key_group::key_group_of;
use crate::snapshot_reader::KeyedSnapshotReader;
use hashbrown::hash_map::RawEntryMut;
use hashbrown::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// The per-key-group maps of one keyed state table, with copy-on-write snapshots.
///
/// `E` is the stored entry type, `C` the codec that (de)serialises it (`C::Entry == E`). They are
/// separate parameters so that the state types need no trait bounds in their definitions.
pub(crate) struct KeyGroupedMap<K, E, C> {
    name: Arc<str>,
    /// 0 until `init`.
    max_parallelism: u32,
    range: KeyGroupRange,
    groups: Vec<Arc<HashMap<K, E>>>,
    /// Per key group, the epoch of its last write (see [`FrozenTable`]).
    last_modified: Vec<u64>,
    /// The number of snapshots taken so far.
    epoch: u64,
    codec: PhantomData<fn() -> C>,
}

impl<K: Key, E: Clone + Send + Sync + 'static, C: EntryCodec<Entry = E>> KeyGroupedMap<K, E, C> {
    pub(crate) fn new(name: &str) -> Self {
        KeyGroupedMap {
            name: Arc::from(name),
            max_parallelism: 0,
            range: KeyGroupRange::new(0, 0),
            groups: Vec::new(),
            last_modified: Vec::new(),
            epoch: 0,
            codec: PhantomData,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    /// Makes the table own `range` out of `max_parallelism` key groups, empty and all dirty.
    pub(crate) fn init(&mut self, max_parallelism: u32, range: KeyGroupRange) {
        debug_assert!(max_parallelism > 0, "max_parallelism must be at least 1");
        debug_assert!(
            range.end <= max_parallelism,
            "key-group range {range} exceeds max parallelism {max_parallelism}"
        );
        self.max_parallelism = max_parallelism;
        self.range = range;
        self.groups = range.iter().map(|_| Arc::default()).collect();
        self.last_modified = vec![self.epoch; range.len() as usize];
    }

    /// The index of `key_group` in `groups`. Out of range it is past the end (the subtraction
    /// wraps), so the following index panics in release builds too, instead of misplacing state.
    #[inline]
    fn index(&self, key_group: u32) -> usize {
        debug_assert!(
            self.range.contains(key_group),
            "state table '{}': key group {key_group} is outside this subtask's range {} (or the table was not initialised)",
            self.name,
            self.range
        );
        key_group.wrapping_sub(self.range.start) as usize
    }

    #[inline]
    pub(crate) fn get(&self, key: &CurrentKey<'_, K>) -> Option<&E> {
        self.groups[self.index(key.key_group)].get(key.key)
    }

    /// The key group's map for writing: marks it modified and copies it if a snapshot shares it.
    #[inline]
    pub(crate) fn group_for_write(&mut self, key_group: u32) -> &mut HashMap<K, E> {
        let i = self.index(key_group);
        self.last_modified[i] = self.epoch;
        Arc::make_mut(&mut self.groups[i])
    }

    /// Mutable access to an existing entry; a missing key neither copies nor dirties the group.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &CurrentKey<'_, K>) -> Option<&mut E> {
        let i = self.index(key.key_group);
        let slot = &mut self.groups[i];
        if Arc::get_mut(slot).is_none() && !slot.contains_key(key.key) {
            return None;
        }
        let entry = Arc::make_mut(slot).get_mut(key.key)?;
        self.last_modified[i] = self.epoch;
        Some(entry)
    }

    /// Sets the entry of `key`, cloning the key only if it is new; returns the old entry.
    #[inline]
    pub(crate) fn insert(&mut self, key: &CurrentKey<'_, K>, entry: E) -> Option<E> {
        match self
            .group_for_write(key.key_group)
            .raw_entry_mut()
            .from_key(key.key)
        {
            RawEntryMut::Occupied(mut o) => Some(o.insert(entry)),
            RawEntryMut::Vacant(v) => {
                v.insert(key.key.clone(), entry);
                None
            }
        }
    }

    /// The entry of `key`, inserting `default()` (and a clone of the key) if there is none.
    #[inline]
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> E,
    ) -> &mut E {
        match self
            .group_for_write(key.key_group)
            .raw_entry_mut()
            .from_key(key.key)
        {
            RawEntryMut::Occupied(o) => o.into_mut(),
            RawEntryMut::Vacant(v) => v.insert(key.key.clone(), default()).1,
        }
    }

    /// Replaces the entry of `key` by `f(old)`: `None` in or out means absent.
    #[inline]
    pub(crate) fn update(
        &mut self,
        key: &CurrentKey<'_, K>,
        f: impl FnOnce(Option<E>) -> Option<E>,
    ) {
        match self
            .group_for_write(key.key_group)
            .raw_entry_mut()
            .from_key(key.key)
        {
            RawEntryMut::Occupied(o) => {
                o.replace_entry_with(|_, old| f(Some(old)));
            }
            RawEntryMut::Vacant(v) => {
                if let Some(new) = f(None) {
                    v.insert(key.key.clone(), new);
                }
            }
        }
    }

    /// Removes `key`; a missing key neither copies nor dirties the group.
    pub(crate) fn remove(&mut self, key: &CurrentKey<'_, K>) -> Option<E> {
        self.get(key)?;
        self.group_for_write(key.key_group).remove(key.key)
    }

    /// Applies `f` to the entry of `key` if it exists and `applies(entry)`, then drops the key if
    /// its entry became empty. Otherwise the group is neither copied nor dirtied.
    pub(crate) fn modify_existing<R>(
        &mut self,
        key: &CurrentKey<'_, K>,
        applies: impl FnOnce(&E) -> bool,
        f: impl FnOnce(&mut E) -> R,
    ) -> Option<R> {
        if !self.get(key).is_some_and(applies) {
            return None;
        }
        match self
            .group_for_write(key.key_group)
            .raw_entry_mut()
            .from_key(key.key)
        {
            RawEntryMut::Occupied(mut o) => {
                let result = f(o.get_mut());
                if C::is_empty(o.get()) {
                    o.remove();
                }
                Some(result)
            }
            RawEntryMut::Vacant(_) => None,
        }
    }

    /// The number of keys, summed over key groups: O(number of key groups).
    pub(crate) fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &E)> {
        self.groups.iter().flat_map(|g| g.iter())
    }

    /// The number of key groups whose map a snapshot still shares.
    #[cfg(test)]
    pub(crate) fn groups_shared_count(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| Arc::strong_count(g) > 1)
            .count()
    }

    /// The synchronous snapshot: clones one `Arc` per key group, then starts a new epoch.
    pub(crate) fn freeze(&mut self) -> FrozenKeyGroups<K, E, C> {
        let frozen = FrozenKeyGroups {
            name: self.name.clone(),
            max_parallelism: self.max_parallelism,
            range: self.range,
            groups: self.groups.clone(),
            last_modified: self.last_modified.clone(),
            epoch: self.epoch,
            codec: PhantomData,
        };
        self.epoch += 1;
        frozen
    }

    /// Replaces the contents with the key groups of this table in `reader` that lie in the
    /// range given to `init`. All-or-nothing: on error the table is unchanged.
    pub(crate) fn restore(&mut self, reader: &KeyedSnapshotReader) -> Result<(), StateError> {
        if self.max_parallelism == 0 {
            return Err(StateError::NotInitialised {
                table: self.name.to_string(),
            });
        }
        let mut restored: Vec<Arc<HashMap<K, E>>> =
            self.range.iter().map(|_| Arc::default()).collect();
        if let Some(snapshot) = reader.max_parallelism() {
            if snapshot != self.max_parallelism {
                return Err(StateError::MaxParallelismMismatch {
                    snapshot,
                    expected: self.max_parallelism,
                });
            }
        }
        if let Some(found) = reader.table_kind(&self.name) {
            if found != C::KIND {
                return Err(StateError::KindMismatch {
                    table: self.name.to_string(),
                    expected: C::KIND,
                    found,
                });
            }
            for (slot, key_group) in restored.iter_mut().zip(self.range.iter()) {
                if let Some(bytes) = reader.key_group_bytes(&self.name, key_group) {
                    *slot = Arc::new(self.decode_group(key_group, bytes)?);
                }
            }
        }
        self.groups = restored;
        self.last_modified.fill(self.epoch);
        Ok(())
    }

    fn decode_group(&self, key_group: u32, bytes: &[u8]) -> Result<HashMap<K, E>, StateError> {
        let error = |reason: String| StateError::Decode {
            table: self.name.to_string(),
            key_group,
            reason,
        };
        let (count, mut rest) = take_len(bytes).map_err(|e| error(e.to_string()))?;
        let mut map = HashMap::with_capacity(count.min(rest.len()));
        for _ in 0..count {
            let (key, r) = take::<K>(rest).map_err(|e| error(format!("key: {e}")))?;
            let (entry, r) = C::decode(r).map_err(|e| error(format!("value: {e}")))?;
            rest = r;
            let actual = key_group_of(&key, self.max_parallelism);
            if actual != key_group {
                return Err(error(format!(
                    "a key hashes to key group {actual}, so its stable hash changed since the snapshot was taken"
                )));
            }
            if C::is_empty(&entry) {
                continue;
            }
            if map.insert(key, entry).is_some() {
                return Err(error("a key appears twice".to_string()));
            }
        }
        if !rest.is_empty() {
            return Err(error(format!("{} unexpected trailing bytes", rest.len())));
        }
        Ok(map)
    }
}

/// The frozen view of a [`KeyGroupedMap`]: shares its key groups' maps as of the snapshot.
pub(crate) struct FrozenKeyGroups<K, E, C> {
    name: Arc<str>,
    max_parallelism: u32,
    range: KeyGroupRange,
    groups: Vec<Arc<HashMap<K, E>>>,
    last_modified: Vec<u64>,
    epoch: u64,
    codec: PhantomData<fn() -> C>,
}

impl<K, E, C> FrozenKeyGroups<K, E, C> {
    fn slot(&self, key_group: u32) -> Option<usize> {
        self.range
            .contains(key_group)
            .then(|| (key_group - self.range.start) as usize)
    }

    #[cfg(test)]
    pub(crate) fn shares_groups_with(&self, live: &KeyGroupedMap<K, E, C>) -> bool {
        self.groups.len() == live.groups.len()
            && self
                .groups
                .iter()
                .zip(&live.groups)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

impl<K: Key, E: Clone + Send + Sync + 'static, C: EntryCodec<Entry = E>> FrozenTable
    for FrozenKeyGroups<K, E, C>
{
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> TableKind {
        C::KIND
    }

    fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn is_dirty(&self, key_group: u32) -> bool {
        self.last_modified_epoch(key_group) == Some(self.epoch)
    }

    fn snapshot_epoch(&self) -> u64 {
        self.epoch
    }

    fn last_modified_epoch(&self, key_group: u32) -> Option<u64> {
        self.slot(key_group).map(|i| self.last_modified[i])
    }

    fn encode_key_group(&self, key_group: u32, out: &mut Vec<u8>) -> Result<(), StateError> {
        let error = |reason: String| {
            StateError::Encode(format!(
                "state table '{}', key group {key_group}: {reason}",
                self.name
            ))
        };
        let i = self
            .slot(key_group)
            .ok_or_else(|| error(format!("outside the table's key groups {}", self.range)))?;
        let map = &self.groups[i];
        append(&(map.len() as u64), out).map_err(|e| error(e.to_string()))?;
        for (key, entry) in map.iter() {
            append(key, out).map_err(|e| error(format!("key: {e}")))?;
            C::encode(entry, out).map_err(|e| error(format!("value: {e}")))?;
        }
        Ok(())
    }

    fn num_entries(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum()
    }
}
