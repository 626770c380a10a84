//! `ListState`: a list of values per key (for example buffered elements of a window).

use crate::entry_codec::ListCodec;
use crate::key::{CurrentKey, Key, Value};
use crate::keyed_table::KeyGroupedMap;
use crate::state_set::{forward_to_table, KeyedStateSet};
use std::fmt;

/// A list of `V` per key of type `K`, partitioned by key group.
///
/// A key whose list becomes empty is removed, so an empty list and an absent key are the same.
/// Access rules are those of [`ValueState`](crate::ValueState).
///
/// ```
/// use weir_state::{CurrentKey, KeyGroupRange, KeyedStateSet, ListState};
///
/// let mut buffered: ListState<u32, String> = ListState::new("buffered");
/// buffered.init(128, KeyGroupRange::new(0, 128));
///
/// let key = CurrentKey::new(&7u32, 128);
/// buffered.add(&key, "a".into());
/// buffered.add(&key, "b".into());
/// assert_eq!(buffered.get(&key), ["a", "b"]);
/// buffered.update(&key, vec!["c".into()]);
/// assert_eq!(buffered.take(&key), vec!["c".to_string()]);
/// assert!(buffered.get(&key).is_empty());
/// ```
pub struct ListState<K, V> {
    table: KeyGroupedMap<K, Vec<V>, ListCodec<V>>,
}

impl<K: Key, V: Value> ListState<K, V> {
    /// An empty table named `name` (stable across job versions, unique within the operator).
    pub fn new(name: &str) -> Self {
        ListState {
            table: KeyGroupedMap::new(name),
        }
    }

    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// The list of `key`; empty if it has none.
    #[inline]
    pub fn get(&self, key: &CurrentKey<'_, K>) -> &[V] {
        self.table.get(key).map_or(&[], Vec::as_slice)
    }

    /// Appends `value` to the list of `key`.
    #[inline]
    pub fn add(&mut self, key: &CurrentKey<'_, K>, value: V) {
        self.table.get_or_insert_with(key, Vec::new).push(value);
    }

    /// Appends every value of `values` to the list of `key`.
    pub fn add_all(&mut self, key: &CurrentKey<'_, K>, values: impl IntoIterator<Item = V>) {
        let mut values = values.into_iter().peekable();
        if values.peek().is_some() {
            self.table.get_or_insert_with(key, Vec::new).extend(values);
        }
    }

    /// Replaces the list of `key` by `values` (an empty `values` clears the key).
    pub fn update(&mut self, key: &CurrentKey<'_, K>, values: Vec<V>) {
        if values.is_empty() {
            self.table.remove(key);
        } else {
            self.table.insert(key, values);
        }
    }

    /// Removes the list of `key`.
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        self.table.remove(key);
    }

    /// Removes and returns the list of `key`.
    pub fn take(&mut self, key: &CurrentKey<'_, K>) -> Vec<V> {
        self.table.remove(key).unwrap_or_default()
    }

    /// The number of keys with a non-empty list in this subtask: O(number of key groups).
    pub fn num_keys(&self) -> usize {
        self.table.len()
    }

    /// Every key of this subtask with its list, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &[V])> {
        self.table.iter().map(|(k, v)| (k, v.as_slice()))
    }
}

impl<K: Key, V: Value> KeyedStateSet<K> for ListState<K, V> {
    forward_to_table!(table);
}

impl<K: Key, V: Value> fmt::Debug for ListState<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListState")
            .field("name", &self.name())
            .field("key_groups", &self.table.key_groups())
            .field("keys", &self.num_keys())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyGroupRange;

    const MP: u32 = 8;

    fn state() -> ListState<u64, u32> {
        let mut s = ListState::new("l");
        s.init(MP, KeyGroupRange::new(0, MP));
        s
    }

    #[test]
    fn add_appends_in_order() {
        let mut s = state();
        let k = CurrentKey::new(&1, MP);
        s.add(&k, 1);
        s.add_all(&k, [2, 3]);
        assert_eq!(s.get(&k), [1, 2, 3]);
    }

    #[test]
    fn updating_with_an_empty_list_removes_the_key() {
        let mut s = state();
        let k = CurrentKey::new(&1, MP);
        s.add(&k, 1);
        s.update(&k, vec![]);
        assert_eq!(s.num_keys(), 0);
        s.add_all(&k, []);
        assert_eq!(s.num_keys(), 0, "adding nothing creates no key");
    }

    #[test]
    fn clear_and_take_empty_the_list() {
        let mut s = state();
        let k = CurrentKey::new(&1, MP);
        s.update(&k, vec![4, 5]);
        assert_eq!(s.take(&k), vec![4, 5]);
        s.add(&k, 6);
        s.clear(&k);
        assert!(s.get(&k).is_empty());
    }
}
