//! A key group's entries: kept dense, in a vector, with the epoch of each one's last write in a
//! column beside them and a hash index from key to position.
//!
//! An incremental checkpoint encodes the entries of a key group written since an earlier
//! snapshot. In a hash map that means reading every slot of the map, changed or not, a cache
//! miss each, to find the few that changed; here it is a sequential read of one `u64` per
//! entry ([`EntryTable::written_after`]), and then only the changed entries are touched, in the
//! order they lie in memory. Full encodes walk the entries sequentially too.
//!
//! A removal moves the last entry into the freed position (with its epoch: its contents did not
//! change), so the vector stays dense and positions are not stable across removals.
//!
//! A key added in the current epoch is marked so in its epoch ([`NEW`]) until the next
//! snapshot: no snapshot holds it, so its removal needs no tombstone
//! ([`is_new`](EntryTable::is_new)). Jobs whose keys live shorter than a checkpoint interval —
//! Nexmark's auctions, timers that fire within the interval — would otherwise record (and
//! write into every delta) a removal for almost every key they ever had.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::{BuildHasher, Hash};

/// Where a key is: its position, or the hash to insert it under (see [`EntryTable::find`]).
pub(crate) enum Found {
    At(usize),
    Missing(u64),
}

/// Marks an epoch in `EntryTable::written`: the key was added in that epoch, after the last
/// snapshot was taken. Epochs count snapshots and stay far below this bit.
const NEW: u64 = 1 << 63;

/// The entries of one key group, each with the epoch of its last write.
// Invariant: `entries.len() == written.len() == index.len()`, and `index` holds each position
// `0..entries.len()` exactly once, under the hash of the key at that position. An entry written
// `e | NEW` was absent from the table at some moment of epoch `e` after which it was only
// written in place: removing it in epoch `e` restores a state the recorded removals already
// describe.
#[derive(Clone)]
pub(crate) struct EntryTable<K, E> {
    index: HashTable<u32>,
    entries: Vec<(K, E)>,
    written: Vec<u64>,
    hasher: DefaultHashBuilder,
}

impl<K, E> Default for EntryTable<K, E> {
    fn default() -> Self {
        EntryTable {
            index: HashTable::new(),
            entries: Vec::new(),
            written: Vec::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

/// A position as stored in the index. A key group holding more than 2^32 keys is a capacity
/// overflow, like a vector's.
#[inline]
fn position(i: usize) -> u32 {
    u32::try_from(i).expect("a key group holds at most 2^32 keys")
}

impl<K: Hash + Eq, E> EntryTable<K, E> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        EntryTable {
            index: HashTable::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
            written: Vec::with_capacity(capacity),
            hasher: DefaultHashBuilder::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The most keys the table can hold without growing: it never shrinks, so this stays at the
    /// most keys it held.
    pub(crate) fn capacity(&self) -> usize {
        self.index.capacity()
    }

    #[inline]
    fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of `key`, or the hash to [`push`](Self::push) it with.
    #[inline]
    pub(crate) fn find(&self, key: &K) -> Found {
        let hash = self.hash(key);
        let entries = &self.entries;
        match self.index.find(hash, |&i| entries[i as usize].0 == *key) {
            Some(&i) => Found::At(i as usize),
            None => Found::Missing(hash),
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: &K) -> Option<&E> {
        match self.find(key) {
            Found::At(i) => Some(&self.entries[i].1),
            Found::Missing(_) => None,
        }
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        matches!(self.find(key), Found::At(_))
    }

    /// The entry at `position` (from [`find`](Self::find)), marked written in `epoch` (still
    /// new if it was added in `epoch`).
    #[inline]
    pub(crate) fn write_at(&mut self, position: usize, epoch: u64) -> &mut E {
        let written = &mut self.written[position];
        if *written != epoch | NEW {
            *written = epoch;
        }
        &mut self.entries[position].1
    }

    /// Whether the entry at `position` was added in `epoch`, the current one: no snapshot taken
    /// so far holds it, and removing it needs no tombstone.
    #[inline]
    pub(crate) fn is_new(&self, position: usize, epoch: u64) -> bool {
        self.written[position] == epoch | NEW
    }

    /// The entry at `position`, not marked written.
    #[inline]
    pub(crate) fn at(&self, position: usize) -> &E {
        &self.entries[position].1
    }

    /// Adds `key`, which [`find`](Self::find) found missing with `hash`, as written in `epoch`
    /// (restored, or moved in from changes made while a snapshot shared the table); returns its
    /// position.
    #[inline]
    pub(crate) fn push(&mut self, hash: u64, key: K, entry: E, epoch: u64) -> usize {
        self.push_written(hash, key, entry, epoch)
    }

    /// [`push`](Self::push) for a key added in `epoch`, the current one: it is
    /// [new](Self::is_new) until the next snapshot.
    #[inline]
    pub(crate) fn push_new(&mut self, hash: u64, key: K, entry: E, epoch: u64) -> usize {
        self.push_written(hash, key, entry, epoch | NEW)
    }

    #[inline]
    fn push_written(&mut self, hash: u64, key: K, entry: E, written: u64) -> usize {
        let i = self.entries.len();
        let EntryTable {
            index,
            entries,
            hasher,
            ..
        } = self;
        index.insert_unique(hash, position(i), |&j| {
            hasher.hash_one(&entries[j as usize].0)
        });
        entries.push((key, entry));
        self.written.push(written);
        i
    }

    /// Sets the entry of `key`, written in `epoch`.
    pub(crate) fn insert(&mut self, key: K, entry: E, epoch: u64) {
        match self.find(&key) {
            Found::At(i) => {
                *self.write_at(i, epoch) = entry;
            }
            Found::Missing(hash) => {
                self.push(hash, key, entry, epoch);
            }
        }
    }

    /// Removes the entry at `position` (from [`find`](Self::find)), moving the last entry into
    /// its place.
    pub(crate) fn remove_at(&mut self, position: usize) -> (K, E) {
        self.take_at(position).1
    }

    /// [`remove_at`](Self::remove_at), also returning the hash of the removed key.
    fn take_at(&mut self, position: usize) -> (u64, (K, E)) {
        let hash = self.hash(&self.entries[position].0);
        match self.index.find_entry(hash, |&i| i as usize == position) {
            Ok(found) => {
                found.remove();
            }
            Err(_) => unreachable!("every position is in the index"),
        }
        let last = self.entries.len() - 1;
        if position != last {
            let moved_hash = self.hash(&self.entries[last].0);
            let moved = self
                .index
                .find_mut(moved_hash, |&i| i as usize == last)
                .expect("every position is in the index");
            *moved = self::position(position);
        }
        self.written.swap_remove(position);
        (hash, self.entries.swap_remove(position))
    }

    /// Removes `key`, returning it and its entry.
    #[inline]
    pub(crate) fn remove(&mut self, key: &K) -> Option<(K, E)> {
        match self.find(key) {
            Found::At(i) => Some(self.remove_at(i)),
            Found::Missing(_) => None,
        }
    }

    /// Replaces the entry at `position` by `f(entry)`, written in `epoch` (still new if it was
    /// added in `epoch`), or removes it if `f` returns `None` (then returns the key, for the
    /// caller to remember the removal unless the entry [was new](Self::is_new)).
    pub(crate) fn replace_at(
        &mut self,
        position: usize,
        epoch: u64,
        f: impl FnOnce(E) -> Option<E>,
    ) -> Option<K> {
        let written = if self.is_new(position, epoch) {
            epoch | NEW
        } else {
            epoch
        };
        let (hash, (key, old)) = self.take_at(position);
        match f(old) {
            Some(new) => {
                self.push_written(hash, key, new, written);
                None
            }
            None => Some(key),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &E)> {
        self.entries.iter().map(|(k, e)| (k, e))
    }

    /// The entries last written after `epoch`, found by reading the epochs alone.
    #[inline]
    pub(crate) fn written_after(&self, epoch: u64) -> impl Iterator<Item = (&K, &E)> {
        self.written
            .iter()
            .zip(&self.entries)
            .filter(move |(written, _)| **written & !NEW > epoch)
            .map(|(_, (k, e))| (k, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        /// As a restore or a merge of changes does: never new.
        Insert(u8, u32),
        /// As a task's write does: new if the key is missing.
        Write(u8, u32),
        Remove(u8),
        Replace(u8, Option<u32>),
        NextEpoch,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Op::Write(k, v)),
            3 => any::<u8>().prop_map(Op::Remove),
            2 => (any::<u8>(), any::<Option<u32>>()).prop_map(|(k, v)| Op::Replace(k, v)),
            1 => Just(Op::NextEpoch),
        ]
    }

    /// Checks the table against `model` (key → entry, epoch of its last write), and every
    /// position of the index against the key it holds; and which keys are new against `added`
    /// (key → the epoch it was added in by a write of a missing key).
    fn check(
        table: &EntryTable<u8, u32>,
        model: &HashMap<u8, (u32, u64)>,
        added: &HashMap<u8, u64>,
        epoch: u64,
    ) {
        assert_eq!(table.len(), model.len());
        assert_eq!(table.index.len(), table.entries.len());
        assert_eq!(table.written.len(), table.entries.len());
        for (key, (entry, _)) in model {
            assert_eq!(table.get(key), Some(entry), "key {key}");
        }
        for (i, (key, _)) in table.entries.iter().enumerate() {
            assert!(
                matches!(table.find(key), Found::At(at) if at == i),
                "position {i}"
            );
            assert_eq!(
                table.is_new(i, epoch),
                added.get(key) == Some(&epoch),
                "key {key} new in epoch {epoch}"
            );
        }
        let mut sinces = [0, epoch / 2, epoch - 1];
        sinces.sort();
        for since in sinces {
            let mut changed: Vec<_> = table.written_after(since).map(|(k, e)| (*k, *e)).collect();
            changed.sort();
            let mut expected: Vec<_> = model
                .iter()
                .filter(|(_, (_, written))| *written > since)
                .map(|(k, (e, _))| (*k, *e))
                .collect();
            expected.sort();
            assert_eq!(changed, expected, "written after epoch {since}");
        }
    }

    proptest! {
        /// Whatever the writes and removals, the table holds what a map would, each entry with
        /// the epoch of its last write, the index finds every key where it lies, and a key is
        /// new exactly in the epoch a write added it in.
        #[test]
        fn the_table_holds_what_a_map_would_with_the_epoch_of_each_last_write(
            ops in proptest::collection::vec(op(), 0..400)
        ) {
            let mut table = EntryTable::default();
            let mut model = HashMap::new();
            let mut added = HashMap::new();
            let mut epoch = 1;
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        table.insert(k, v, epoch);
                        model.insert(k, (v, epoch));
                    }
                    Op::Write(k, v) => {
                        match table.find(&k) {
                            Found::At(i) => *table.write_at(i, epoch) = v,
                            Found::Missing(hash) => {
                                table.push_new(hash, k, v, epoch);
                                added.insert(k, epoch);
                            }
                        }
                        model.insert(k, (v, epoch));
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(table.remove(&k), model.remove(&k).map(|(v, _)| (k, v)));
                        added.remove(&k);
                    }
                    Op::Replace(k, v) => {
                        if let Found::At(i) = table.find(&k) {
                            let removed = table.replace_at(i, epoch, |_| v);
                            prop_assert_eq!(removed, v.is_none().then_some(k));
                            match v {
                                Some(v) => model.insert(k, (v, epoch)),
                                None => {
                                    added.remove(&k);
                                    model.remove(&k)
                                }
                            };
                        }
                    }
                    Op::NextEpoch => epoch += 1,
                }
                check(&table, &model, &added, epoch);
            }
            let copy = table.clone();
            check(&copy, &model, &added, epoch);
        }
    }

    #[test]
    fn removing_an_entry_moves_the_last_one_into_its_place_with_its_epoch() {
        let mut table = EntryTable::default();
        for (key, epoch) in [(1u8, 1), (2, 2), (3, 3)] {
            table.insert(key, u32::from(key) * 10, epoch);
        }
        assert_eq!(table.remove(&1), Some((1, 10)));
        assert!(matches!(table.find(&3), Found::At(0)));
        let since_2: Vec<_> = table.written_after(2).collect();
        assert_eq!(since_2, vec![(&3, &30)]);
        assert_eq!(table.remove(&9), None);
        assert_eq!(table.len(), 2);
    }
}
