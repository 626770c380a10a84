//! `ValueState`: one value per key, the most common keyed state (counters, last seen, aggregates).

use crate::entry_codec::ValueCodec;
use crate::key::{CurrentKey, Key, Value};
use crate::keyed_table::KeyGroupedMap;
use crate::state_set::{forward_to_table, KeyedStateSet};
use std::fmt;

/// One value of type `V` per key of type `K`, partitioned by key group.
///
/// Every access takes the [`CurrentKey`] of the record being processed; a read or an overwrite of
/// an existing key is one hash lookup, with no allocation, lock or dynamic call. The runtime
/// calls [`KeyedStateSet::init`] before the first access; accessing a key group outside the
/// subtask's range (or before `init`) panics, as it is a runtime bug.
///
/// ```
/// use weir_state::{CurrentKey, KeyGroupRange, KeyedStateSet, ValueState};
///
/// let mut counts: ValueState<String, u64> = ValueState::new("counts");
/// counts.init(128, KeyGroupRange::new(0, 128));
///
/// let word = String::from("weir");
/// let key = CurrentKey::new(&word, 128);
/// *counts.get_or_insert_with(&key, || 0) += 1;
/// counts.update(&key, |n| n.map(|n| n + 1));
/// assert_eq!(counts.get(&key), Some(&2));
/// counts.clear(&key);
/// assert_eq!(counts.get(&key), None);
/// ```
pub struct ValueState<K, V> {
    table: KeyGroupedMap<K, V, ValueCodec<V>>,
}

impl<K: Key, V: Value> ValueState<K, V> {
    /// An empty table named `name`; the name identifies it in snapshots, so it must stay the
    /// same across versions of the job and be unique within the operator.
    pub fn new(name: &str) -> Self {
        ValueState {
            table: KeyGroupedMap::new(name),
        }
    }

    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// The value of `key`, if it has one.
    #[inline]
    pub fn get(&self, key: &CurrentKey<'_, K>) -> Option<&V> {
        self.table.get(key)
    }

    /// Mutable access to the value of `key`, if it has one.
    #[inline]
    pub fn get_mut(&mut self, key: &CurrentKey<'_, K>) -> Option<&mut V> {
        self.table.get_mut(key)
    }

    /// Sets the value of `key`; the key is cloned only if it had no value.
    #[inline]
    pub fn set(&mut self, key: &CurrentKey<'_, K>, value: V) {
        self.table.insert(key, value);
    }

    /// Sets the value of `key` if it has none; returns whether it did. One lookup either way,
    /// and a key that has a value is left as it was (not written, so not in the next
    /// incremental checkpoint for it).
    #[inline]
    pub fn set_if_absent(&mut self, key: &CurrentKey<'_, K>, value: V) -> bool {
        self.table.insert_absent(key, value)
    }

    /// The value of `key`, first setting it to `default()` if it has none.
    #[inline]
    pub fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> V,
    ) -> &mut V {
        self.table.get_or_insert_with(key, default)
    }

    /// Replaces the value of `key` by `f(current)`; `None` means no value (returning `None`
    /// clears the key).
    #[inline]
    pub fn update(&mut self, key: &CurrentKey<'_, K>, f: impl FnOnce(Option<V>) -> Option<V>) {
        self.table.update(key, f)
    }

    /// Removes the value of `key`.
    #[inline]
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        self.table.remove(key);
    }

    /// Removes and returns the value of `key`.
    #[inline]
    pub fn take(&mut self, key: &CurrentKey<'_, K>) -> Option<V> {
        self.table.remove(key)
    }

    /// The number of keys with a value in this subtask: O(number of key groups).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key of this subtask with its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.table.iter()
    }

    #[cfg(test)]
    pub(crate) fn table(&self) -> &KeyGroupedMap<K, V, ValueCodec<V>> {
        &self.table
    }
}

impl<K: Key, V: Value> KeyedStateSet<K> for ValueState<K, V> {
    forward_to_table!(table);
}

impl<K, V> fmt::Debug for ValueState<K, V>
where
    K: Key,
    V: Value,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueState")
            .field("name", &self.name())
            .field("key_groups", &self.table.key_groups())
            .field("keys", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot_format::encode_keyed_snapshot;
    use crate::{FrozenTable, KeyGroupRange, KeyedSnapshotReader};
    use std::collections::BTreeMap;

    const MP: u32 = 16;

    /// `k` as the current key, among `MP` key groups.
    fn key(k: &u64) -> CurrentKey<'_, u64> {
        CurrentKey::new(k, MP)
    }

    fn state() -> ValueState<u64, String> {
        let mut s = ValueState::new("v");
        s.init(MP, KeyGroupRange::new(0, MP));
        s
    }

    /// A table named `name` over `MP` key groups holding `k → k` for the first `keys` keys.
    fn identity(name: &str, keys: u64) -> ValueState<u64, u64> {
        let mut s = ValueState::new(name);
        s.init(MP, KeyGroupRange::new(0, MP));
        for k in 0..keys {
            s.set(&key(&k), k);
        }
        s
    }

    #[test]
    fn set_then_get_returns_the_value_and_overwrites_replace_it() {
        let mut s = state();
        let k = CurrentKey::new(&7, MP);
        assert_eq!(s.get(&k), None);
        s.set(&k, "a".into());
        s.set(&k, "b".into());
        assert_eq!(s.get(&k).map(String::as_str), Some("b"));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn update_returning_none_clears_the_key() {
        let mut s = state();
        let k = CurrentKey::new(&7, MP);
        s.update(&k, |v| {
            assert_eq!(v, None);
            Some("x".into())
        });
        s.update(&k, |v| {
            assert_eq!(v.as_deref(), Some("x"));
            None
        });
        assert!(s.is_empty());
    }

    #[test]
    fn take_returns_the_old_value_and_clear_of_a_missing_key_is_a_no_op() {
        let mut s = state();
        let k = CurrentKey::new(&3, MP);
        s.clear(&k);
        s.set(&k, "x".into());
        assert_eq!(s.take(&k).as_deref(), Some("x"));
        assert_eq!(s.take(&k), None);
    }

    #[test]
    fn a_snapshot_keeps_the_old_values_while_the_task_keeps_writing() {
        let mut s = state();
        let k = CurrentKey::new(&1, MP);
        s.set(&k, "old".into());
        let mut frozen = Vec::new();
        s.snapshot(&mut frozen);
        s.set(&k, "new".into());
        *s.get_mut(&k).unwrap() += "er";
        s.set(&CurrentKey::new(&2, MP), "added".into());

        let bytes = encode_keyed_snapshot(&frozen, KeyGroupRange::new(0, MP)).unwrap();
        let mut restored = state();
        restored
            .restore(&KeyedSnapshotReader::decode(&bytes).unwrap())
            .unwrap();
        assert_eq!(restored.get(&k).map(String::as_str), Some("old"));
        assert_eq!(restored.len(), 1);
        assert_eq!(s.get(&k).map(String::as_str), Some("newer"));
    }

    #[test]
    fn the_synchronous_snapshot_of_a_million_keys_shares_every_key_group_instead_of_copying() {
        let mut s: ValueState<u64, u64> = ValueState::new("big");
        s.init(128, KeyGroupRange::new(0, 128));
        for k in 0..1_000_000u64 {
            s.set(&CurrentKey::new(&k, 128), k);
        }
        let start = std::time::Instant::now();
        let frozen = s.table.freeze();
        println!("sync snapshot of 1,000,000 keys: {:?}", start.elapsed());
        // Structural bound: the snapshot is one Arc clone per key group, no map was copied.
        assert!(frozen.shares_groups_with(s.table()));
        assert!(s.table.groups_shared_count() == 128);
        assert_eq!(frozen.num_entries(), 1_000_000);

        // A write while the snapshot is held copies the entry it writes, not its key group.
        s.set(&CurrentKey::new(&0, 128), 1);
        assert_eq!(s.table.groups_shared_count(), 128);
        assert_eq!(s.table.pending_changes(), 1);
    }

    #[test]
    fn writes_while_a_snapshot_is_held_copy_entries_and_leave_the_snapshot_as_it_was() {
        let mut s = identity("v", 1_000);
        let frozen = s.table.freeze();
        // Every kind of write, while the snapshot shares every key group.
        for k in 0..100u64 {
            s.set(&key(&k), k + 1_000); // overwrite
        }
        for k in 100..200u64 {
            s.clear(&key(&k)); // remove
        }
        for k in 1_000..1_100u64 {
            s.set(&key(&k), k); // new keys
        }
        for k in 1_050..1_100u64 {
            s.clear(&key(&k)); // new, then removed
        }
        s.clear(&key(&150)); // removed twice
        s.set(&key(&199), 7); // removed, then set again
        *s.get_or_insert_with(&key(&200), || 0) += 1; // read-modify-write of an existing key
        *s.get_or_insert_with(&key(&5_000), || 41) += 1; // of a new key
        let expected: BTreeMap<u64, u64> = (0..100u64)
            .map(|k| (k, k + 1_000))
            .chain([(199, 7), (200, 201), (5_000, 42)])
            .chain((201..1_000).map(|k| (k, k)))
            .chain((1_000..1_050).map(|k| (k, k)))
            .collect();
        let live = |s: &ValueState<u64, u64>| -> BTreeMap<u64, u64> {
            s.table.iter().map(|(k, v)| (*k, *v)).collect()
        };
        assert_eq!(live(&s), expected);
        assert_eq!(s.len(), expected.len());
        assert_eq!(s.get(&key(&150)), None);
        assert_eq!(s.get(&key(&0)), Some(&1_000));
        assert_eq!(
            s.table.groups_shared_count(),
            MP as usize,
            "no key group was copied"
        );

        // The snapshot still holds the state as it was frozen.
        let mut bytes = crate::EncodeBuffer::chunked(4096);
        for g in 0..MP {
            frozen.encode_key_group(g, &mut bytes).unwrap();
        }
        assert_eq!(frozen.num_entries(), 1_000);

        // Once the snapshot lets go, the next write moves its group's changes in place, and the
        // next snapshot takes the rest.
        drop(frozen);
        s.set(&key(&0), 1_000);
        assert!(s.table.pending_changes() > 0);
        let next = s.table.freeze();
        assert_eq!(s.table.pending_changes(), 0);
        assert_eq!(next.num_entries(), expected.len());
        assert_eq!(live(&s), expected);
        // Removals made while shared are remembered for the next delta.
        assert!(s.table.tombstones_len() >= 100);
    }

    #[test]
    fn without_snapshots_removed_keys_leave_nothing_behind() {
        let mut s: ValueState<u64, u64> = ValueState::new("windows");
        s.init(MP, KeyGroupRange::new(0, MP));
        for k in 0..100_000u64 {
            let key = CurrentKey::new(&k, MP);
            s.set(&key, k);
            s.clear(&key);
        }
        assert_eq!(s.len(), 0);
        assert_eq!(
            s.table.tombstones_len(),
            0,
            "no snapshot can need these removals"
        );

        // Once a snapshot holds a key, its removal is kept for the next delta, and only as long
        // as a delta can need it.
        for k in 0..1_000u64 {
            s.set(&CurrentKey::new(&k, MP), k);
        }
        s.table.freeze();
        for k in 0..1_000u64 {
            s.clear(&CurrentKey::new(&k, MP));
        }
        assert_eq!(s.table.tombstones_len(), 1_000);
        for _ in 0..=crate::TOMBSTONE_EPOCHS {
            s.table.freeze();
        }
        s.set(&CurrentKey::new(&7, MP), 7);
        s.clear(&CurrentKey::new(&7, MP));
        assert!(s.table.tombstones_len() < 1_000, "old removals are pruned");
    }

    #[test]
    fn removals_a_completed_checkpoint_covers_are_forgotten_at_the_next_write_to_their_group() {
        let mut s = identity("auctions", 1_000);
        s.table.freeze();
        for k in 0..1_000u64 {
            s.clear(&key(&k));
        }
        assert_eq!(s.table.tombstones_len(), 1_000);
        // Writes in the same epoch, before any checkpoint completed: every removal is kept.
        for k in 1_000..3_000u64 {
            s.set(&key(&k), k);
        }
        assert_eq!(s.table.tombstones_len(), 1_000);
        // The snapshot taken after the removals; writes before its checkpoint completes keep
        // them (a delta against the earlier snapshot may still be needed).
        let after_removals = s.table.freeze();
        let epoch = crate::frozen_table::FrozenTable::snapshot_epoch(&after_removals);
        drop(after_removals);
        for k in 3_000..5_000u64 {
            s.set(&key(&k), k);
        }
        assert_eq!(s.table.tombstones_len(), 1_000);
        // It completes: the next write to each key group forgets them, in the same epoch as the
        // writes just before.
        s.table.forget_removals_through(epoch);
        for k in 5_000..7_000u64 {
            s.set(&key(&k), k);
        }
        assert_eq!(s.table.tombstones_len(), 0);
    }

    #[test]
    fn keys_added_and_removed_between_two_snapshots_leave_no_removal_behind() {
        let mut s = identity("auctions", 100);
        s.table.freeze();
        // Short-lived keys: added, written again, removed, all before the next snapshot. No
        // snapshot holds them, so no delta needs their removal.
        for k in 1_000..11_000u64 {
            s.set(&key(&k), k);
            s.update(&key(&k), |v| v.map(|v| v + 1));
            if k % 2 == 0 {
                s.clear(&key(&k));
            } else {
                s.update(&key(&k), |_| None);
            }
        }
        assert_eq!(s.table.tombstones_len(), 0);
        // A key the snapshot holds is remembered, also when it is removed, added again and
        // removed again; a key added in an earlier epoch too.
        s.set(&key(&20_000), 1);
        s.clear(&key(&3));
        s.set(&key(&3), 3);
        s.clear(&key(&3));
        assert_eq!(s.table.tombstones_len(), 1);
        s.table.freeze();
        s.clear(&key(&20_000));
        assert_eq!(s.table.tombstones_len(), 2);
        // Restored keys are held by the snapshot restored from.
        let mut restored: ValueState<u64, u64> = ValueState::new("auctions");
        restored.init(MP, KeyGroupRange::new(0, MP));
        let mut frozen = Vec::new();
        s.snapshot(&mut frozen);
        let bytes = crate::encode_keyed_snapshot(&frozen, KeyGroupRange::new(0, MP)).unwrap();
        let reader = crate::KeyedSnapshotReader::decode(&bytes).unwrap();
        restored.restore(&reader).unwrap();
        restored.clear(&key(&5));
        assert_eq!(restored.table.tombstones_len(), 1);
    }

    #[test]
    fn a_key_removed_over_and_over_between_snapshots_is_remembered_once() {
        let mut s = identity("flags", 3);
        s.table.freeze(); // removals of these keys from now on are kept for the next delta
        for round in 0..100_000u64 {
            for k in 0..3u64 {
                let key = CurrentKey::new(&k, MP);
                s.set(&key, round);
                s.clear(&key);
            }
        }
        // The first removal of each key is remembered; after it the key is new in this epoch.
        assert_eq!(s.table.tombstones_len(), 3);
        // The next delta still holds each removed key.
        let frozen = s.table.freeze();
        let mut removed = 0;
        for g in 0..MP {
            let mut bytes = crate::EncodeBuffer::contiguous(Vec::new());
            frozen.encode_key_group_delta(g, 0, &mut bytes).unwrap();
            let (count, _): (u64, _) = postcard::take_from_bytes(&bytes.into_bytes()).unwrap();
            removed += count;
        }
        assert!(removed >= 3, "the delta removes every key ({removed})");
    }

    #[test]
    fn removals_of_keys_removed_in_many_epochs_are_compacted_to_one_per_key() {
        // No checkpoint completes, so every removal since the first snapshot stays needed.
        let mut s: ValueState<u64, u64> = ValueState::new("flags");
        s.init(1, KeyGroupRange::new(0, 1));
        let keys = 3_000u64;
        for _ in 0..20 {
            for k in 0..keys {
                s.set(&CurrentKey::new(&k, 1), k);
            }
            s.table.freeze();
            for k in 0..keys {
                s.clear(&CurrentKey::new(&k, 1));
            }
        }
        assert!(s.table.removals_compacted());
        assert!(
            s.table.tombstones_len() < 20 * keys as usize / 2,
            "{} removals remembered for {keys} keys",
            s.table.tombstones_len()
        );
        // The next delta since the first snapshot still removes every key.
        let frozen = s.table.freeze();
        let mut bytes = crate::EncodeBuffer::contiguous(Vec::new());
        frozen.encode_key_group_delta(0, 0, &mut bytes).unwrap();
        let (removed, _): (u64, _) = postcard::take_from_bytes(&bytes.into_bytes()).unwrap();
        assert!(removed >= keys, "the delta removes every key ({removed})");
    }

    #[test]
    fn an_incremental_snapshot_lets_go_of_each_key_group_once_encoded() {
        let range = KeyGroupRange::new(0, MP);
        let mut s: ValueState<u64, u64> = ValueState::new("counts");
        s.init(MP, range);
        for k in 0..1_000u64 {
            s.set(&key(&k), k);
        }
        let base = crate::IncrementalBase::new();
        let mut frozen = Vec::new();
        s.snapshot(&mut frozen);
        let plan = base.plan(1, &frozen);
        assert_eq!(s.table.groups_shared_count(), MP as usize);

        let encoding = crate::encode_incremental_releasing(&mut frozen, range, &plan).unwrap();
        assert!(encoding.data.is_some());
        // The view still exists, but shares nothing: writes go straight into the maps.
        assert_eq!(s.table.groups_shared_count(), 0);
        s.set(&key(&0), 7);
        assert_eq!(s.table.pending_changes(), 0);
        assert_eq!(frozen[0].num_entries(), 0);
        let mut out = crate::EncodeBuffer::contiguous(Vec::new());
        let again = frozen[0].encode_key_group(0, &mut out).unwrap_err();
        assert!(again.to_string().contains("already released"), "{again}");

        // Encoding without releasing leaves the view whole.
        let mut frozen = Vec::new();
        s.snapshot(&mut frozen);
        let plan = base.plan(2, &frozen);
        crate::encode_incremental(&frozen, range, &plan).unwrap();
        assert_eq!(s.table.groups_shared_count(), MP as usize);
        assert_eq!(frozen[0].num_entries(), 1_000);
    }

    #[test]
    fn removing_every_key_at_once_remembers_each_removal_without_compacting() {
        // As a window closing does: many keys of one key group, all removed between two
        // snapshots.
        let mut s: ValueState<u64, u64> = ValueState::new("panes");
        s.init(1, KeyGroupRange::new(0, 1));
        s.table.freeze();
        for k in 0..200_000u64 {
            s.set(&CurrentKey::new(&k, 1), k);
        }
        s.table.freeze();
        for k in 0..200_000u64 {
            s.clear(&CurrentKey::new(&k, 1));
        }
        assert_eq!(s.table.tombstones_len(), 200_000);
        assert!(
            !s.table.removals_compacted(),
            "no key was removed twice: nothing to compact"
        );
    }

    #[test]
    fn removals_up_to_the_confirmed_snapshot_are_left_out_of_the_next_copy() {
        let mut s = identity("windows", 1_000);
        s.table.freeze(); // epoch 0
        for k in 0..1_000u64 {
            s.clear(&CurrentKey::new(&k, MP)); // removed in epoch 1
        }
        let _pending = s.table.freeze(); // epoch 1: a delta since epoch 0 needs those removals
        assert_eq!(s.table.tombstones_len(), 1_000);

        // The snapshot of epoch 1 completed (and let go of the state): no delta is taken since
        // an older one any more.
        s.table.forget_removals_through(1);
        drop(_pending);
        for k in 0..1_000u64 {
            s.set(&CurrentKey::new(&k, MP), k); // the first write to each group prunes them
        }
        assert_eq!(s.table.tombstones_len(), 0);
        // Removals after the confirmed snapshot are kept (of keys a snapshot holds).
        s.table.freeze();
        s.clear(&CurrentKey::new(&3, MP));
        assert_eq!(s.table.tombstones_len(), 1);
    }

    #[test]
    fn dirty_flags_mark_exactly_the_key_groups_written_since_the_previous_snapshot() {
        let mut s = state();
        let one = CurrentKey::new(&1, MP);
        let two = CurrentKey::new(&2, MP);
        s.set(&one, "a".into());
        let first = s.table.freeze();
        assert!(
            (0..MP).all(|g| first.is_dirty(g)),
            "first snapshot is all dirty"
        );
        s.set(&two, "b".into());
        s.clear(&CurrentKey::new(&3, MP)); // a no-op must not dirty its group
        let second = s.table.freeze();
        let dirty: Vec<u32> = (0..MP).filter(|&g| second.is_dirty(g)).collect();
        assert_eq!(dirty, vec![two.key_group]);
        assert_eq!(second.snapshot_epoch(), 1);
        assert_eq!(second.last_modified_epoch(one.key_group), Some(0));
        assert_eq!(second.last_modified_epoch(MP), None);

        // With no snapshot sharing them, key groups are written in place: a removal of a
        // missing key still dirties nothing, a removal of a present one its group alone.
        drop((first, second));
        let missing = (10..)
            .find(|k| key(k).key_group != two.key_group)
            .expect("a key of another group");
        assert_eq!(s.take(&key(&missing)), None);
        assert_eq!(s.take(&two), Some("b".into()));
        let third = s.table.freeze();
        let dirty: Vec<u32> = (0..MP).filter(|&g| third.is_dirty(g)).collect();
        assert_eq!(dirty, vec![two.key_group]);
    }

    #[test]
    fn set_if_absent_sets_a_missing_key_only_and_leaves_a_present_one_unwritten() {
        let mut s = state();
        let one = key(&1);
        assert!(s.set_if_absent(&one, "a".into()));
        assert!(!s.set_if_absent(&one, "b".into()));
        assert_eq!(s.get(&one).map(String::as_str), Some("a"));

        // In place: a present key's group is not dirtied, a missing one's is.
        drop(s.table.freeze());
        let two = (2..)
            .find(|k| key(k).key_group != one.key_group)
            .expect("a key of another group");
        assert!(!s.set_if_absent(&one, "c".into()));
        assert!(s.set_if_absent(&key(&two), "d".into()));
        let second = s.table.freeze();
        let dirty: Vec<u32> = (0..MP).filter(|&g| second.is_dirty(g)).collect();
        assert_eq!(dirty, vec![key(&two).key_group]);

        // While a snapshot shares the groups: the same, through copies of entries, and a key
        // removed meanwhile counts as missing.
        assert!(!s.set_if_absent(&one, "e".into()));
        assert_eq!(s.table.pending_changes(), 0, "a present key is not copied");
        assert_eq!(s.take(&key(&two)).as_deref(), Some("d"));
        assert!(s.set_if_absent(&key(&two), "f".into()));
        assert!(!s.set_if_absent(&key(&two), "g".into()));
        assert!(s.set_if_absent(&key(&3), "h".into()));
        assert_eq!(s.table.groups_shared_count(), MP as usize);
        let third = s.table.freeze();
        let dirty: Vec<u32> = (0..MP).filter(|&g| third.is_dirty(g)).collect();
        let mut expected = vec![key(&two).key_group, key(&3).key_group];
        expected.sort();
        expected.dedup();
        assert_eq!(dirty, expected);
        drop((second, third));
        let live: BTreeMap<u64, String> = s.iter().map(|(k, v)| (*k, v.clone())).collect();
        let expected: BTreeMap<u64, String> = [(1, "a"), (two, "f"), (3, "h")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        assert_eq!(live, expected);
    }

    #[test]
    #[should_panic]
    fn accessing_a_key_group_outside_the_range_panics() {
        let mut s: ValueState<u64, u64> = ValueState::new("v");
        s.init(MP, KeyGroupRange::new(0, 4));
        s.set(
            &CurrentKey {
                key: &1,
                key_group: 9,
            },
            1,
        );
    }
}
