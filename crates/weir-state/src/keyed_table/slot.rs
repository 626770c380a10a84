//! A key group of the live table ([`Slot`]): its entries, and the copies of entries written
//! while a snapshot shared them.

use crate::group::{Base, Group};
use crate::key::Key;
use hashbrown::hash_map::RawEntryMut;
use hashbrown::HashMap;

/// A change made to a key while a snapshot shared its key group (see [`Slot`]).
pub(super) enum Change<E> {
    /// Set to this entry, last written in this epoch.
    Set(E, u64),
    /// Removed in this epoch.
    Removed(u64),
}

/// A key group of the live table: its entries, and the changes made while a snapshot shared
/// it.
///
/// While an asynchronous snapshot holds `base`, a write does not copy the whole key group: the
/// key it writes gets its entry copied into `changes` (copy-on-write by entry), and reads look
/// there first. Once no snapshot holds `base` any more, the next write to the key group — or
/// the next snapshot — moves the changes into it: work in proportion to the keys written
/// meanwhile, not to the state.
// Invariant: a key in `changes` shadows its entry in `base`; `changes` is non-empty only while
// `base` is, or was when they were made, shared with a snapshot.
pub(super) struct Slot<K, E> {
    pub(super) base: Base<K, E>,
    pub(super) changes: HashMap<K, Change<E>>,
}

impl<K, E> Default for Slot<K, E> {
    fn default() -> Self {
        Slot::new(Base::default())
    }
}

impl<K, E> Slot<K, E> {
    pub(super) fn new(base: Base<K, E>) -> Self {
        Slot {
            base,
            changes: HashMap::new(),
        }
    }
}

impl<K: Key, E: Clone> Slot<K, E> {
    #[inline]
    pub(super) fn get(&self, key: &K) -> Option<&E> {
        if !self.changes.is_empty() {
            if let Some(change) = self.changes.get(key) {
                return match change {
                    Change::Set(e, _) => Some(e),
                    Change::Removed(_) => None,
                };
            }
        }
        self.base.group().entries.get(key)
    }

    /// Whether `base` can be written in place: no snapshot shares it. Moves pending changes
    /// into it first.
    #[inline]
    pub(super) fn settle(&mut self, epoch: u64, needed_after: u64) -> bool {
        match self.base.owned() {
            Some(group) => {
                if !self.changes.is_empty() {
                    merge(group, &mut self.changes, epoch, needed_after);
                } else {
                    group.prune(epoch, needed_after);
                }
                true
            }
            None => false,
        }
    }

    /// The pending change of `key`: the one it has, or a new one copying its entry in `base`
    /// (as written in `epoch`). `None` if `key` has neither.
    #[inline]
    pub(super) fn change_of_existing(&mut self, key: &K, epoch: u64) -> Option<&mut Change<E>> {
        Some(match self.changes.raw_entry_mut().from_key(key) {
            RawEntryMut::Occupied(o) => o.into_mut(),
            RawEntryMut::Vacant(v) => {
                let e = self.base.group().entries.get(key)?;
                v.insert(key.clone(), Change::Set(e.clone(), epoch)).1
            }
        })
    }

    /// `base`, after [`settle`](Self::settle) returned true.
    #[inline]
    pub(super) fn direct(&mut self) -> &mut Group<K, E> {
        match &mut self.base {
            Base::Owned(group) => group,
            _ => unreachable!("settled: no snapshot shares the group"),
        }
    }

    /// Makes `base` hold every change: moved in place, or into a copy if a snapshot still
    /// shares it (a snapshot taken while the previous one is still being written).
    pub(super) fn consolidate(&mut self, epoch: u64, needed_after: u64) {
        if self.changes.is_empty() {
            return;
        }
        let group = self.base.make_owned(epoch, needed_after);
        merge(group, &mut self.changes, epoch, needed_after);
    }

    /// The number of keys.
    pub(super) fn len(&self) -> usize {
        let base = &self.base.group().entries;
        let added = self.changes.iter().filter(|(k, c)| match c {
            Change::Set(..) => !base.contains_key(*k),
            Change::Removed(_) => false,
        });
        let removed = self.changes.iter().filter(|(k, c)| match c {
            Change::Set(..) => false,
            Change::Removed(_) => base.contains_key(*k),
        });
        base.len() + added.count() - removed.count()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &E)> {
        let changes = &self.changes;
        self.base
            .group()
            .entries
            .iter()
            .filter(move |(k, _)| changes.is_empty() || !changes.contains_key(*k))
            .chain(changes.iter().filter_map(|(k, c)| match c {
                Change::Set(e, _) => Some((k, e)),
                Change::Removed(_) => None,
            }))
    }
}

/// Moves `changes` into `group` (which no snapshot shares), first forgetting the removals no
/// delta taken in `epoch` or later can need.
fn merge<K: Key, E>(
    group: &mut Group<K, E>,
    changes: &mut HashMap<K, Change<E>>,
    epoch: u64,
    needed_after: u64,
) {
    group.prune(epoch, needed_after);
    for (key, change) in changes.drain() {
        match change {
            Change::Set(entry, written) => {
                group.entries.insert(key, entry, written);
            }
            Change::Removed(removed_in) => {
                group.entries.remove(&key);
                group.tombstone(key, removed_in, needed_after);
            }
        }
    }
}
