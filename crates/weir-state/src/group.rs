//! One key group of a keyed state table: its entries, the keys removed from it lately, and
//! whether a snapshot shares it.
//!
//! The live table owns each key group outright ([`Base::Owned`]) and writes it in place with no
//! atomic operation. A snapshot's synchronous phase moves it behind an `Arc` it shares with the
//! snapshot ([`Base::share`]); the first write after the snapshot let go takes it back
//! ([`Base::owned`]), a single atomic operation per key group and snapshot instead of one per
//! write.

use crate::entry_table::EntryTable;
use crate::key::Key;
use std::collections::VecDeque;
use std::sync::Arc;

/// How many epochs a key group remembers removed keys. A delta can only be taken against a
/// snapshot less than this many epochs old; older bases get a full key group instead.
pub const TOMBSTONE_EPOCHS: u64 = 32;

/// One key group: its entries, each with the epoch of its last write, and its recent removals.
pub(crate) struct Group<K, E> {
    pub(crate) entries: EntryTable<K, E>,
    /// Keys removed, with the epoch of the removal, in the order of removal (a key removed,
    /// written and removed again is there twice). A queue rather than a map: remembering a
    /// removal is a push, forgetting the old ones pops them from the front.
    // Invariant: holds every key removed in an epoch later than the newest epoch minus
    // TOMBSTONE_EPOCHS (older ones may be pruned), at least its latest removal; epochs ascend
    // from front to back.
    pub(crate) removed: VecDeque<(K, u64)>,
    /// `removed` is compacted to one removal per key once it is longer than this and than
    /// `MIN_COMPACTION + 2 × capacity of entries`: a key removed over and over between
    /// checkpoints does not grow it without bound. The capacity, not the number of entries: it
    /// stays at the most keys the group held, so removing all of many keys at once (as a window
    /// closing does) never compacts, which would find no key twice.
    pub(crate) compact_above: usize,
    /// The `(epoch, needed_after)` of the last [`prune`](Self::prune): pruning again with the
    /// same finds nothing to forget, and is skipped without reading `removed`'s buffer (a cache
    /// miss on every write to a key group that remembers removals).
    // Invariant: no removal in `removed` fails `keeps(_, pruned_at.0, pruned_at.1)`.
    pruned_at: (u64, u64),
}

/// The length of a key group's removals below which they are never compacted.
pub(crate) const MIN_COMPACTION: usize = 4096;

impl<K, E> Default for Group<K, E> {
    fn default() -> Self {
        Group {
            entries: EntryTable::default(),
            removed: VecDeque::new(),
            compact_above: 0,
            pruned_at: (0, 0),
        }
    }
}

/// Whether a removal in `removed_in` may still be needed by a delta taken in `epoch`: no more
/// than `TOMBSTONE_EPOCHS` old, and after `needed_after`, the epoch of the snapshot that every
/// delta from now on is taken since or after (the table raises it when a checkpoint completes).
pub(crate) fn keeps(removed_in: u64, epoch: u64, needed_after: u64) -> bool {
    removed_in + TOMBSTONE_EPOCHS >= epoch && removed_in > needed_after
}

impl<K: Key, E> Group<K, E> {
    /// Forgets the removals no delta taken in `epoch` or later can need, if there are any.
    #[inline]
    pub(crate) fn prune(&mut self, epoch: u64, needed_after: u64) {
        if self.pruned_at == (epoch, needed_after) {
            return;
        }
        self.pruned_at = (epoch, needed_after);
        // `keeps` holds from some epoch on, and epochs ascend: the ones to forget are in front.
        while self
            .removed
            .front()
            .is_some_and(|(_, e)| !keeps(*e, epoch, needed_after))
        {
            self.removed.pop_front();
        }
    }

    /// Removes the entry at `position` in `epoch` (the current one), remembering the removal
    /// unless the key was added in this epoch: no snapshot holds it, so no delta needs it.
    pub(crate) fn remove_at(&mut self, position: usize, epoch: u64, needed_after: u64) -> E {
        let new = self.entries.is_new(position, epoch);
        let (key, entry) = self.entries.remove_at(position);
        if !new {
            self.tombstone(key, epoch, needed_after);
        }
        entry
    }

    /// [`EntryTable::replace_at`] in `epoch` (the current one), remembering a removal as
    /// [`remove_at`](Self::remove_at) does.
    pub(crate) fn replace_at(
        &mut self,
        position: usize,
        epoch: u64,
        needed_after: u64,
        f: impl FnOnce(E) -> Option<E>,
    ) {
        let new = self.entries.is_new(position, epoch);
        if let Some(key) = self.entries.replace_at(position, epoch, f) {
            if !new {
                self.tombstone(key, epoch, needed_after);
            }
        }
    }

    /// Remembers that `key` was removed in `epoch`, first forgetting removals no delta can
    /// need any more.
    ///
    /// Removals in epoch 0 are not kept (`needed_after` starts at 0): a delta is only ever taken
    /// since a snapshot, and epoch 0 ends with the table's first snapshot (or restore), so no
    /// delta can need them. A job that never snapshots (checkpointing off) thus keeps no
    /// removals at all, however many keys it drops.
    pub(crate) fn tombstone(&mut self, key: K, epoch: u64, needed_after: u64) {
        if epoch <= needed_after {
            return;
        }
        self.prune(epoch, needed_after);
        debug_assert!(
            self.removed.back().is_none_or(|(_, last)| *last <= epoch),
            "removals are remembered in the order of their epochs"
        );
        self.removed.push_back((key, epoch));
        if self.removed.len()
            > self
                .compact_above
                .max(MIN_COMPACTION + 2 * self.entries.capacity())
        {
            self.compact_removals();
        }
    }

    /// Keeps only the latest removal of each key, in order: a delta since any epoch needs a key
    /// if its latest removal is after that epoch (and it was not written again). The next
    /// compaction waits until the removals doubled, so compacting costs O(1) per removal.
    #[cold]
    fn compact_removals(&mut self) {
        let mut seen = hashbrown::HashSet::with_capacity(self.removed.len());
        let mut latest: Vec<(K, u64)> = Vec::with_capacity(self.removed.len());
        while let Some((key, epoch)) = self.removed.pop_back() {
            if seen.insert(key.clone()) {
                latest.push((key, epoch));
            }
        }
        latest.reverse();
        self.removed = latest.into();
        self.compact_above = 2 * self.removed.len();
    }
}

/// A key group as the live table holds it.
pub(crate) enum Base<K, E> {
    /// No snapshot holds it: written in place.
    Owned(Group<K, E>),
    /// Shared with snapshots (the ones taken since it was last owned; they may have let go).
    Shared(Arc<Group<K, E>>),
    /// Only within a change of ownership, never observed.
    Moving,
}

impl<K, E> Default for Base<K, E> {
    fn default() -> Self {
        Base::Owned(Group::default())
    }
}

impl<K: Key, E: Clone> Base<K, E> {
    #[inline]
    pub(crate) fn group(&self) -> &Group<K, E> {
        match self {
            Base::Owned(group) => group,
            Base::Shared(group) => group,
            Base::Moving => unreachable!("ownership changes within one call"),
        }
    }

    /// The group to write in place: owned, or taken back from the snapshots that shared it if
    /// they all let go. `None` while one still holds it.
    #[inline]
    pub(crate) fn owned(&mut self) -> Option<&mut Group<K, E>> {
        if let Base::Shared(_) = self {
            self.take_back();
        }
        match self {
            Base::Owned(group) => Some(group),
            _ => None,
        }
    }

    /// Owns the group again if no snapshot holds it any more.
    #[cold]
    fn take_back(&mut self) {
        if let Base::Shared(shared) = std::mem::replace(self, Base::Moving) {
            *self = match Arc::try_unwrap(shared) {
                Ok(group) => Base::Owned(group),
                Err(shared) => Base::Shared(shared),
            };
        }
    }

    /// Shares the group with a snapshot: the snapshot's handle to it.
    pub(crate) fn share(&mut self) -> Arc<Group<K, E>> {
        if let Base::Owned(_) = self {
            if let Base::Owned(group) = std::mem::replace(self, Base::Moving) {
                *self = Base::Shared(Arc::new(group));
            }
        }
        match self {
            Base::Shared(shared) => shared.clone(),
            _ => unreachable!("just shared"),
        }
    }

    /// The group to write, copied first if a snapshot still holds it. The copy leaves out the
    /// removals no delta taken in `epoch` or later can need, so they are not copied checkpoint
    /// after checkpoint.
    pub(crate) fn make_owned(&mut self, epoch: u64, needed_after: u64) -> &mut Group<K, E> {
        if let Base::Shared(_) = self {
            self.take_back();
        }
        if let Base::Shared(shared) = self {
            let removed = shared
                .removed
                .iter()
                .filter(|(_, e)| keeps(*e, epoch, needed_after))
                .cloned()
                .collect();
            *self = Base::Owned(Group {
                entries: shared.entries.clone(),
                removed,
                compact_above: 0,
                pruned_at: (epoch, needed_after),
            });
        }
        match self {
            Base::Owned(group) => group,
            _ => unreachable!("just owned"),
        }
    }
}

impl<K, E> Base<K, E> {
    /// Whether a snapshot still holds the group.
    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Base::Shared(shared) if Arc::strong_count(shared) > 1)
    }

    /// Whether `snapshot` is this group, shared.
    #[cfg(test)]
    pub(crate) fn is(&self, snapshot: &Arc<Group<K, E>>) -> bool {
        matches!(self, Base::Shared(shared) if Arc::ptr_eq(shared, snapshot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_of(keys: &[u64]) -> Base<u64, u64> {
        let mut base = Base::default();
        let group = base.owned().expect("a new group is owned");
        for &key in keys {
            group.entries.insert(key, key, 1);
        }
        base
    }

    #[test]
    fn a_group_is_taken_back_without_a_copy_once_its_snapshot_lets_go() {
        let mut base = group_of(&[1, 2, 3]);
        let snapshot = base.share();
        assert!(base.is_shared());
        assert!(
            base.owned().is_none(),
            "written in place while a snapshot holds it"
        );
        let first_key = |group: &Group<u64, u64>| {
            let (key, _) = group.entries.iter().next().expect("not empty");
            std::ptr::from_ref(key)
        };
        let shared_at = first_key(&snapshot);
        drop(snapshot);
        let group = base.owned().expect("owned again once the snapshot let go");
        // Moved out of the snapshot's handle, not copied: the entries stay where they were.
        assert_eq!(first_key(group), shared_at);
        assert_eq!(group.entries.len(), 3);
        assert!(!base.is_shared());
    }

    #[test]
    fn a_group_still_held_is_copied_for_writing_and_the_snapshot_keeps_its_contents() {
        let mut base = group_of(&[1, 2]);
        let snapshot = base.share();
        let group = base.make_owned(2, 0);
        group.entries.insert(3, 3, 2);
        assert_eq!(group.entries.len(), 3);
        assert_eq!(snapshot.entries.len(), 2);
        assert!(!base.is(&snapshot));
        let again = base.share();
        assert_eq!(again.entries.len(), 3);
        assert!(base.is(&again));
    }
}
