//! Copy-on-write storage behind every keyed state table: one table of entries per key group
//! (see [`crate::group`]), owned by the live table or shared with snapshots.
//!
//! The synchronous snapshot phase shares the key groups (an `Arc` each, however many keys there
//! are) with a [`FrozenKeyGroups`]; the asynchronous worker serialises from those while the task
//! keeps writing. While a snapshot shares a key group, a write copies only the entry it writes,
//! into the group's pending changes (copy-on-write by entry, see [`Slot`]); the first write
//! after the snapshot let go takes the group back and moves them into it. A snapshot's cost to
//! the running task is thus in proportion to the keys written while it is being written, not to
//! the state.
//!
//! For incremental checkpoints every entry carries the epoch of its last write, and a key group
//! remembers the keys removed since the last completed checkpoint's snapshot (at most
//! [`TOMBSTONE_EPOCHS`](crate::TOMBSTONE_EPOCHS) epochs back): the changes of a key group since an earlier snapshot are
//! then the entries written, and the keys removed, after its epoch (see
//! [`encode_key_group_delta`]). A key added and removed between two snapshots leaves no removal
//! behind: no snapshot held it.
//!
//! [`encode_key_group_delta`]: crate::frozen_table::FrozenTable::encode_key_group_delta
//!
//! Invariant: `groups.len() == last_modified.len() == range.len()` once initialised, and
//! `groups[i]` (its entries and its pending changes) holds exactly the keys whose key group is
//! `range.start + i`.

use crate::entry_codec::{take, take_len, EntryCodec};
use crate::entry_table::{EntryTable, Found};
use crate::error::StateError;
use crate::expiry::{Expiry, Verdict};
use crate::group::{Base, Group};
use crate::key::{CurrentKey, Key};
use crate::snapshot_reader::KeyedSnapshotReader;
use crate::stable_hash::key_group_of;
use hashbrown::hash_map::RawEntryMut;
use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::KeyGroupRange;

mod frozen_key_groups;
mod slot;

pub(crate) use frozen_key_groups::FrozenKeyGroups;
use slot::{Change, Slot};

/// The per-key-group entries of one keyed state table, with copy-on-write snapshots.
///
/// `E` is the stored entry type, `C` the codec that (de)serialises it (`C::Entry == E`). They are
/// separate parameters so that the state types need no trait bounds in their definitions.
pub(crate) struct KeyGroupedMap<K, E, C> {
    name: Arc<str>,
    /// 0 until `init`.
    max_parallelism: u32,
    range: KeyGroupRange,
    groups: Vec<Slot<K, E>>,
    /// Per key group, the epoch of its last write (see [`crate::frozen_table::FrozenTable`]).
    last_modified: Vec<u64>,
    /// The number of snapshots taken so far (plus one after a restore).
    epoch: u64,
    /// Removals in this epoch or before are needed by no future delta.
    // Invariant: every delta taken from now on is taken since a snapshot of an epoch at least
    // this one (the last completed checkpoint's, or a later one).
    removals_needed_after: u64,
    /// With the RocksDB backend, the table's entries live there and every access goes to
    /// this tier instead of `groups` (which stay empty).
    #[cfg(feature = "rocksdb")]
    lsm: Option<Box<crate::lsm::tier::LsmTier<K, E, C>>>,
    codec: PhantomData<fn() -> C>,
}

/// Where incremental cleanup ([`KeyGroupedMap::purge`]) goes on from: a key group's index and a
/// position in its entries (positions move as entries are removed: an entry may be passed over
/// until the next round).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PurgeCursor {
    group: usize,
    position: usize,
}

/// Sends a method of the table to its RocksDB tier, if it has one.
macro_rules! to_lsm {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        // Borrowed inside the branch: a reference it returns must not outlive the test.
        #[cfg(feature = "rocksdb")]
        if $self.lsm.is_some() {
            let tier = $self.lsm.as_deref_mut().expect("tested just above");
            return tier.$method($($arg),*);
        }
    };
    (ref $self:ident . $method:ident ( $($arg:expr),* )) => {
        #[cfg(feature = "rocksdb")]
        if let Some(tier) = $self.lsm.as_deref() {
            return tier.$method($($arg),*);
        }
    };
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
            removals_needed_after: 0,
            #[cfg(feature = "rocksdb")]
            lsm: None,
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
        self.groups = range.iter().map(|_| Slot::default()).collect();
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
        to_lsm!(ref self.get(key));
        self.groups[self.index(key.key_group)].get(key.key)
    }

    /// The key group for writing: marks it modified and moves pending changes into its entries
    /// if no snapshot shares it any more. Returns the slot and whether its entries can be
    /// written in place.
    #[inline]
    fn slot_for_write(&mut self, key_group: u32) -> (&mut Slot<K, E>, bool) {
        let (i, direct) = self.settled(key_group);
        self.last_modified[i] = self.epoch;
        (&mut self.groups[i], direct)
    }

    /// The index of the key group, with pending changes moved into its entries if no snapshot
    /// shares it any more, and whether they can be written in place. Unlike
    /// [`slot_for_write`](Self::slot_for_write) it does not mark the group modified: for a
    /// write that may find nothing to change.
    #[inline]
    fn settled(&mut self, key_group: u32) -> (usize, bool) {
        let i = self.index(key_group);
        let direct = self.groups[i].settle(self.epoch, self.removals_needed_after);
        (i, direct)
    }

    /// The checkpoint whose snapshot of this table was taken in `epoch` completed: every delta
    /// from now on is taken since that snapshot or a later one, so removals up to `epoch` are
    /// forgotten (at the next write to their key group, or its next copy).
    pub(crate) fn forget_removals_through(&mut self, epoch: u64) {
        self.removals_needed_after = self.removals_needed_after.max(epoch);
    }

    /// [`KeyedStateSet::forget_removals`](crate::KeyedStateSet::forget_removals) for this
    /// table.
    pub(crate) fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
        if let Some(epoch) = confirmed_epoch(&self.name) {
            self.forget_removals_through(epoch);
        }
    }

    /// Mutable access to an existing entry; a missing key neither copies nor dirties the group.
    #[inline]
    pub(crate) fn get_mut(&mut self, key: &CurrentKey<'_, K>) -> Option<&mut E> {
        to_lsm!(self.get_mut(key));
        self.get(key)?;
        let epoch = self.epoch;
        let (slot, direct) = self.slot_for_write(key.key_group);
        if direct {
            let entries = &mut slot.direct().entries;
            return match entries.find(key.key) {
                Found::At(i) => Some(entries.write_at(i, epoch)),
                Found::Missing(_) => None,
            };
        }
        match slot.change_of_existing(key.key, epoch)? {
            Change::Set(e, written) => {
                *written = epoch;
                Some(e)
            }
            Change::Removed(_) => None,
        }
    }

    /// Sets the entry of `key`, cloning the key only if it is new.
    #[inline]
    pub(crate) fn insert(&mut self, key: &CurrentKey<'_, K>, entry: E) {
        to_lsm!(self.insert(key, entry));
        let epoch = self.epoch;
        let (slot, direct) = self.slot_for_write(key.key_group);
        if direct {
            let entries = &mut slot.direct().entries;
            match entries.find(key.key) {
                Found::At(i) => *entries.write_at(i, epoch) = entry,
                Found::Missing(hash) => {
                    entries.push_new(hash, key.key.clone(), entry, epoch);
                }
            }
            return;
        }
        match slot.changes.raw_entry_mut().from_key(key.key) {
            RawEntryMut::Occupied(mut o) => {
                o.insert(Change::Set(entry, epoch));
            }
            RawEntryMut::Vacant(v) => {
                v.insert(key.key.clone(), Change::Set(entry, epoch));
            }
        }
    }

    /// Sets the entry of `key` if it has none, in one lookup; returns whether it did. A key that
    /// has an entry keeps it, and its group is neither copied nor dirtied.
    #[inline]
    pub(crate) fn insert_absent(&mut self, key: &CurrentKey<'_, K>, entry: E) -> bool {
        to_lsm!(self.insert_absent(key, entry));
        let epoch = self.epoch;
        let (i, direct) = self.settled(key.key_group);
        let slot = &mut self.groups[i];
        if direct {
            let entries = &mut slot.direct().entries;
            let Found::Missing(hash) = entries.find(key.key) else {
                return false;
            };
            entries.push_new(hash, key.key.clone(), entry, epoch);
        } else {
            // While a snapshot shares the group (briefly, once a checkpoint): as `get` and
            // `insert` would.
            if slot.get(key.key).is_some() {
                return false;
            }
            slot.changes
                .insert(key.key.clone(), Change::Set(entry, epoch));
        }
        self.last_modified[i] = epoch;
        true
    }

    /// The entry of `key`, inserting `default()` (and a clone of the key) if there is none.
    #[inline]
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> E,
    ) -> &mut E {
        to_lsm!(self.get_or_insert_with(key, default));
        let epoch = self.epoch;
        let (slot, direct) = self.slot_for_write(key.key_group);
        if direct {
            let entries = &mut slot.direct().entries;
            let i = match entries.find(key.key) {
                Found::At(i) => i,
                Found::Missing(hash) => entries.push_new(hash, key.key.clone(), default(), epoch),
            };
            return entries.write_at(i, epoch);
        }
        let Slot { base, changes } = slot;
        let mut default = Some(default);
        let change = match changes.raw_entry_mut().from_key(key.key) {
            RawEntryMut::Occupied(o) => o.into_mut(),
            RawEntryMut::Vacant(v) => {
                let entry = match base.group().entries.get(key.key) {
                    Some(e) => e.clone(),
                    None => (default.take().expect("not used before"))(),
                };
                v.insert(key.key.clone(), Change::Set(entry, epoch)).1
            }
        };
        if let Change::Removed(_) = change {
            let d = default.take().expect("not used when the key had no change");
            *change = Change::Set(d(), epoch);
        }
        let Change::Set(e, written) = change else {
            unreachable!("the change was just set")
        };
        *written = epoch;
        e
    }

    /// Replaces the entry of `key` by `f(old)`: `None` in or out means absent.
    #[inline]
    pub(crate) fn update(
        &mut self,
        key: &CurrentKey<'_, K>,
        f: impl FnOnce(Option<E>) -> Option<E>,
    ) {
        to_lsm!(self.update(key, f));
        let (epoch, needed_after) = (self.epoch, self.removals_needed_after);
        let (slot, direct) = self.slot_for_write(key.key_group);
        if direct {
            let group = slot.direct();
            match group.entries.find(key.key) {
                Found::At(i) => group.replace_at(i, epoch, needed_after, |old| f(Some(old))),
                Found::Missing(hash) => {
                    if let Some(new) = f(None) {
                        group.entries.push_new(hash, key.key.clone(), new, epoch);
                    }
                }
            }
            return;
        }
        let Slot { base, changes } = slot;
        let (current, removed_before) = match changes.remove(key.key) {
            Some(Change::Set(e, _)) => (Some(e), None),
            Some(Change::Removed(removed_in)) => (None, Some(removed_in)),
            None => (base.group().entries.get(key.key).cloned(), None),
        };
        let existed = current.is_some();
        let change = match (f(current), removed_before) {
            (Some(new), _) => Change::Set(new, epoch),
            (None, _) if existed => Change::Removed(epoch),
            (None, Some(removed_in)) => Change::Removed(removed_in),
            (None, None) => return,
        };
        changes.insert(key.key.clone(), change);
    }

    /// Removes `key`; a missing key neither copies nor dirties the group.
    pub(crate) fn remove(&mut self, key: &CurrentKey<'_, K>) -> Option<E> {
        to_lsm!(self.remove(key));
        let (epoch, needed_after) = (self.epoch, self.removals_needed_after);
        let (i, direct) = self.settled(key.key_group);
        let slot = &mut self.groups[i];
        if direct {
            // In place: one lookup, the group marked modified only if the key was there.
            let group = slot.direct();
            let Found::At(position) = group.entries.find(key.key) else {
                return None;
            };
            let entry = group.remove_at(position, epoch, needed_after);
            self.last_modified[i] = epoch;
            return Some(entry);
        }
        slot.get(key.key)?;
        self.last_modified[i] = epoch;
        let Slot { base, changes } = slot;
        match changes.raw_entry_mut().from_key(key.key) {
            RawEntryMut::Occupied(mut o) => {
                match std::mem::replace(o.get_mut(), Change::Removed(epoch)) {
                    Change::Set(e, _) => Some(e),
                    // Not reached: `get` found the key.
                    Change::Removed(removed_in) => {
                        *o.get_mut() = Change::Removed(removed_in);
                        None
                    }
                }
            }
            RawEntryMut::Vacant(v) => {
                let entry = base.group().entries.get(key.key)?.clone();
                v.insert(key.key.clone(), Change::Removed(epoch));
                Some(entry)
            }
        }
    }

    /// Applies `f` to the entry of `key` if it exists and `applies(entry)`, then drops the key if
    /// its entry became empty. Otherwise the group is neither copied nor dirtied.
    pub(crate) fn modify_existing<R>(
        &mut self,
        key: &CurrentKey<'_, K>,
        applies: impl FnOnce(&E) -> bool,
        f: impl FnOnce(&mut E) -> R,
    ) -> Option<R> {
        to_lsm!(self.modify_existing(key, applies, f));
        if !self.get(key).is_some_and(applies) {
            return None;
        }
        let (epoch, needed_after) = (self.epoch, self.removals_needed_after);
        let (slot, direct) = self.slot_for_write(key.key_group);
        if direct {
            let group = slot.direct();
            let Found::At(i) = group.entries.find(key.key) else {
                return None;
            };
            let result = f(group.entries.write_at(i, epoch));
            if C::is_empty(group.entries.at(i)) {
                group.remove_at(i, epoch, needed_after);
            }
            return Some(result);
        }
        let change = slot.change_of_existing(key.key, epoch)?;
        let Change::Set(e, written) = change else {
            return None;
        };
        *written = epoch;
        let result = f(e);
        if C::is_empty(e) {
            *change = Change::Removed(epoch);
        }
        Some(result)
    }

    /// The number of keys, summed over key groups: O(number of key groups), plus the keys
    /// written while a snapshot was being written.
    pub(crate) fn len(&self) -> usize {
        to_lsm!(ref self.len());
        self.groups.iter().map(Slot::len).sum()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &E)> {
        // With the RocksDB backend `groups` are empty and the entries come from the tier.
        #[cfg(feature = "rocksdb")]
        let stored = self.lsm.as_deref().map(|tier| tier.iter());
        #[cfg(not(feature = "rocksdb"))]
        let stored: Option<std::iter::Empty<(&K, &E)>> = None;
        stored
            .into_iter()
            .flatten()
            .chain(self.groups.iter().flat_map(Slot::iter))
    }

    /// Brings the entries of `keys` from RocksDB into memory in one batched read, ahead of
    /// their records (see [`KeyedStateSet::prefetch`](crate::KeyedStateSet::prefetch)).
    #[cfg(feature = "rocksdb")]
    pub(crate) fn prefetch(&self, keys: &[CurrentKey<'_, K>]) {
        if let Some(tier) = self.lsm.as_deref() {
            tier.prefetch(keys);
        }
    }

    /// Moves the table's entries to RocksDB: from now on every access goes to `store`.
    /// Called once, after `init` and before anything is written or restored.
    #[cfg(feature = "rocksdb")]
    pub(crate) fn use_lsm(
        &mut self,
        store: &std::sync::Arc<crate::lsm::LsmStore>,
    ) -> Result<(), StateError> {
        let tier = crate::lsm::tier::LsmTier::new(
            store.clone(),
            self.name.clone(),
            self.max_parallelism,
            self.range,
        )?;
        self.lsm = Some(Box::new(tier));
        Ok(())
    }

    /// Between batches: with the RocksDB backend, spills the in-memory tier if it is over its
    /// budget and returns a RocksDB failure seen since the last call.
    pub(crate) fn maintain(&mut self) -> Result<(), StateError> {
        #[cfg(feature = "rocksdb")]
        if let Some(tier) = self.lsm.as_deref_mut() {
            return tier.maintain();
        }
        Ok(())
    }

    /// The synchronous snapshot of whichever backend holds the entries.
    pub(crate) fn snapshot_into(&mut self, out: &mut Vec<Box<dyn crate::FrozenTable>>) {
        self.snapshot_with_expiry(out, None)
    }

    /// [`snapshot_into`](Self::snapshot_into), whose full encodes leave out the entries
    /// `expiry` finds expired (a table with a time to live).
    pub(crate) fn snapshot_with_expiry(
        &mut self,
        out: &mut Vec<Box<dyn crate::FrozenTable>>,
        expiry: Option<Expiry>,
    ) {
        #[cfg(feature = "rocksdb")]
        if let Some(tier) = self.lsm.as_deref_mut() {
            out.push(Box::new(tier.freeze(expiry)));
            return;
        }
        let mut frozen = self.freeze();
        frozen.expiry = expiry;
        out.push(Box::new(frozen));
    }

    /// Incremental cleanup of the heap backend: examines up to `budget` entries from `cursor`
    /// on, key group after key group (round and round), removing those `verdict` says to
    /// remove and trimming with `trim` those it says to trim. A key group a snapshot still
    /// shares is passed over until the next round. With the RocksDB backend (whose compactions
    /// clean up instead) it does nothing.
    pub(crate) fn purge(
        &mut self,
        cursor: &mut PurgeCursor,
        mut budget: usize,
        verdict: impl Fn(&E) -> Verdict,
        trim: impl Fn(&mut E),
    ) {
        #[cfg(feature = "rocksdb")]
        if self.lsm.is_some() {
            return;
        }
        let (epoch, needed_after) = (self.epoch, self.removals_needed_after);
        let groups = self.groups.len();
        // Each key group at most once per call: an empty table costs one pass of the groups.
        for _ in 0..groups {
            if budget == 0 {
                return;
            }
            let i = cursor.group % groups;
            let slot = &mut self.groups[i];
            if slot.settle(epoch, needed_after) {
                let group = slot.direct();
                let mut position = cursor.position;
                let mut modified = false;
                while budget > 0 && position < group.entries.len() {
                    budget -= 1;
                    match verdict(group.entries.at(position)) {
                        Verdict::Keep => position += 1,
                        Verdict::Trim => {
                            trim(group.entries.write_at(position, epoch));
                            modified = true;
                            position += 1;
                        }
                        // The last entry moves into `position`: examined next.
                        Verdict::Remove => {
                            group.remove_at(position, epoch, needed_after);
                            modified = true;
                        }
                    }
                }
                if modified {
                    self.last_modified[i] = epoch;
                }
                if position < group.entries.len() {
                    cursor.position = position;
                    return;
                }
            }
            cursor.group = (i + 1) % groups;
            cursor.position = 0;
        }
    }

    /// The number of removed keys remembered for deltas, summed over key groups.
    #[cfg(test)]
    pub(crate) fn tombstones_len(&self) -> usize {
        self.groups
            .iter()
            .map(|s| s.base.group().removed.len())
            .sum()
    }

    /// Whether the removals of any key group were ever compacted.
    #[cfg(test)]
    pub(crate) fn removals_compacted(&self) -> bool {
        self.groups.iter().any(|s| s.base.group().compact_above > 0)
    }

    /// The number of key groups a snapshot still shares.
    #[cfg(test)]
    pub(crate) fn groups_shared_count(&self) -> usize {
        self.groups.iter().filter(|s| s.base.is_shared()).count()
    }

    /// The number of keys written while a snapshot shared their key group, not yet moved into
    /// its entries.
    #[cfg(test)]
    pub(crate) fn pending_changes(&self) -> usize {
        self.groups.iter().map(|s| s.changes.len()).sum()
    }

    /// The synchronous snapshot: shares each key group (one `Arc` each), then starts a new
    /// epoch.
    ///
    /// A key group still holding changes made while the previous snapshot was being written
    /// first takes them into its entries: in place once that snapshot let go of it (what it
    /// usually has), else into a copy.
    pub(crate) fn freeze(&mut self) -> FrozenKeyGroups<K, E, C> {
        for slot in &mut self.groups {
            slot.consolidate(self.epoch, self.removals_needed_after);
        }
        let frozen = FrozenKeyGroups {
            name: self.name.clone(),
            max_parallelism: self.max_parallelism,
            range: self.range,
            groups: self
                .groups
                .iter_mut()
                .map(|s| Some(s.base.share()))
                .collect(),
            last_modified: self.last_modified.clone(),
            epoch: self.epoch,
            expiry: None,
            codec: PhantomData,
        };
        self.epoch += 1;
        frozen
    }

    /// Replaces the contents with the key groups of this table in `reader` that lie in the
    /// range given to `init`. All-or-nothing: on error the table is unchanged.
    ///
    /// The restored entries belong to the current epoch, which then ends: a restore right after
    /// `init` puts them in epoch 0, the epoch an incremental base restored alongside them
    /// (`IncrementalBase::restored`) refers to, so unchanged key groups are not written again.
    pub(crate) fn restore(&mut self, reader: &KeyedSnapshotReader) -> Result<(), StateError> {
        if self.max_parallelism == 0 {
            return Err(StateError::NotInitialised {
                table: self.name.to_string(),
            });
        }
        let mut restored: Vec<Group<K, E>> = self.range.iter().map(|_| Group::default()).collect();
        if let Some(snapshot) = reader.max_parallelism() {
            if snapshot != self.max_parallelism {
                return Err(StateError::MaxParallelismMismatch {
                    snapshot,
                    expected: self.max_parallelism,
                });
            }
        }
        let found = reader.table_kind(&self.name);
        if let Some(found) = found {
            if found != C::KIND {
                return Err(StateError::KindMismatch {
                    table: self.name.to_string(),
                    expected: C::KIND,
                    found,
                });
            }
        }
        #[cfg(feature = "rocksdb")]
        if let Some(mut tier) = self.lsm.take() {
            // One key group in memory at a time, straight into RocksDB.
            let groups = self
                .range
                .iter()
                .filter(|_| found.is_some())
                .map(|key_group| Ok((key_group, self.restored_entries(reader, key_group)?)));
            let restored = tier.restore(groups);
            self.lsm = Some(tier);
            return restored;
        }
        if found.is_some() {
            for (group, key_group) in restored.iter_mut().zip(self.range.iter()) {
                group.entries = self.restored_entries(reader, key_group)?;
            }
        }
        self.groups = restored
            .into_iter()
            .map(|group| Slot::new(Base::Owned(group)))
            .collect();
        self.last_modified.fill(self.epoch);
        self.epoch += 1;
        Ok(())
    }

    /// The entries of `key_group` in `reader`: its full contents, then its deltas applied.
    fn restored_entries(
        &self,
        reader: &KeyedSnapshotReader,
        key_group: u32,
    ) -> Result<EntryTable<K, E>, StateError> {
        let mut entries = EntryTable::default();
        let mut first = true;
        for blob in reader.key_group_blobs(&self.name, key_group) {
            if first == blob.delta {
                return Err(StateError::Decode {
                    table: self.name.to_string(),
                    key_group,
                    reason: "a key group's chain of blobs must start with its full contents and continue with deltas".into(),
                });
            }
            first = false;
            if blob.delta {
                self.apply_delta(key_group, blob.bytes, &mut entries)?;
            } else {
                entries = self.decode_group(key_group, blob.bytes)?;
            }
        }
        Ok(entries)
    }

    fn decode_error(&self, key_group: u32) -> impl Fn(String) -> StateError + '_ {
        move |reason| StateError::Decode {
            table: self.name.to_string(),
            key_group,
            reason,
        }
    }

    /// Decodes `count` then `count` times `key, entry`, checking every key's key group.
    fn decode_entries<'b>(
        &self,
        key_group: u32,
        bytes: &'b [u8],
        mut each: impl FnMut(K, E) -> Result<(), StateError>,
    ) -> Result<&'b [u8], StateError> {
        let error = self.decode_error(key_group);
        let (count, mut rest) = take_len(bytes).map_err(|e| error(e.to_string()))?;
        for _ in 0..count {
            let (key, r) = take::<K>(rest).map_err(|e| error(format!("key: {e}")))?;
            let (entry, r) = C::decode(r).map_err(|e| error(format!("value: {e}")))?;
            rest = r;
            self.check_key_group(&key, key_group)?;
            each(key, entry)?;
        }
        Ok(rest)
    }

    fn check_key_group(&self, key: &K, key_group: u32) -> Result<(), StateError> {
        let actual = key_group_of(key, self.max_parallelism);
        if actual != key_group {
            return Err(self.decode_error(key_group)(format!(
                "a key hashes to key group {actual}, so its stable hash changed since the snapshot was taken"
            )));
        }
        Ok(())
    }

    fn decode_group(&self, key_group: u32, bytes: &[u8]) -> Result<EntryTable<K, E>, StateError> {
        let error = self.decode_error(key_group);
        let epoch = self.epoch;
        let (count, _) = take_len(bytes).map_err(|e| error(e.to_string()))?;
        let mut map = EntryTable::with_capacity(count.min(bytes.len()));
        let rest = self.decode_entries(key_group, bytes, |key, entry| {
            if C::is_empty(&entry) {
                return Ok(());
            }
            match map.find(&key) {
                Found::At(_) => Err(error("a key appears twice".to_string())),
                Found::Missing(hash) => {
                    map.push(hash, key, entry, epoch);
                    Ok(())
                }
            }
        })?;
        if !rest.is_empty() {
            return Err(error(format!("{} unexpected trailing bytes", rest.len())));
        }
        Ok(map)
    }

    /// Applies a delta (see [`encode_key_group_delta`]): removals, then upserts.
    ///
    /// [`encode_key_group_delta`]: crate::frozen_table::FrozenTable::encode_key_group_delta
    fn apply_delta(
        &self,
        key_group: u32,
        bytes: &[u8],
        map: &mut EntryTable<K, E>,
    ) -> Result<(), StateError> {
        let error = self.decode_error(key_group);
        let epoch = self.epoch;
        let (removed, mut rest) = take_len(bytes).map_err(|e| error(e.to_string()))?;
        for _ in 0..removed {
            let (key, r) = take::<K>(rest).map_err(|e| error(format!("removed key: {e}")))?;
            rest = r;
            self.check_key_group(&key, key_group)?;
            map.remove(&key);
        }
        let rest = self.decode_entries(key_group, rest, |key, entry| {
            if C::is_empty(&entry) {
                map.remove(&key);
            } else {
                map.insert(key, entry, epoch);
            }
            Ok(())
        })?;
        if !rest.is_empty() {
            return Err(error(format!("{} unexpected trailing bytes", rest.len())));
        }
        Ok(())
    }
}
