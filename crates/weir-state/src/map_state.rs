//! `MapState`: a map from user keys to user values per key (for example per-key sessions by id).

use crate::entry_codec::MapCodec;
use crate::key::{CurrentKey, Key, Value};
use crate::keyed_table::KeyGroupedMap;
use crate::state_set::{forward_to_table, KeyedStateSet};
use hashbrown::hash_map::RawEntryMut;
use hashbrown::HashMap;
use std::fmt;
use std::hash::Hash;

/// A map from `UK` to `UV` per key of type `K`, partitioned by key group.
///
/// A key whose map becomes empty is removed, so an empty map and an absent key are the same.
/// Access rules are those of [`ValueState`](crate::ValueState).
///
/// ```
/// use weir_state::{CurrentKey, KeyGroupRange, KeyedStateSet, MapState};
///
/// let mut carts: MapState<u64, String, u32> = MapState::new("carts");
/// carts.init(128, KeyGroupRange::new(0, 128));
///
/// let user = CurrentKey::new(&42u64, 128);
/// carts.put(&user, "apple".into(), 2);
/// *carts.get_or_insert_with(&user, &"pear".to_string(), || 0) += 1;
/// assert_eq!(carts.get(&user, &"apple".to_string()), Some(&2));
/// assert_eq!(carts.entries(&user).count(), 2);
/// carts.remove(&user, &"apple".to_string());
/// carts.remove(&user, &"pear".to_string());
/// assert!(carts.is_empty(&user));
/// ```
pub struct MapState<K, UK, UV> {
    table: KeyGroupedMap<K, HashMap<UK, UV>, MapCodec<UK, UV>>,
}

impl<K, UK, UV> MapState<K, UK, UV>
where
    K: Key,
    UK: Value + Eq + Hash,
    UV: Value,
{
    /// An empty table named `name` (stable across job versions, unique within the operator).
    pub fn new(name: &str) -> Self {
        MapState {
            table: KeyGroupedMap::new(name),
        }
    }

    pub fn name(&self) -> &str {
        self.table.name()
    }

    /// The value of `user_key` in the map of `key`.
    #[inline]
    pub fn get(&self, key: &CurrentKey<'_, K>, user_key: &UK) -> Option<&UV> {
        self.table.get(key)?.get(user_key)
    }

    /// Mutable access to the value of `user_key` in the map of `key`.
    #[inline]
    pub fn get_mut(&mut self, key: &CurrentKey<'_, K>, user_key: &UK) -> Option<&mut UV> {
        let present = self
            .table
            .get(key)
            .is_some_and(|m| m.contains_key(user_key));
        if !present {
            return None;
        }
        self.table.get_mut(key)?.get_mut(user_key)
    }

    /// Whether the map of `key` holds `user_key`.
    #[inline]
    pub fn contains(&self, key: &CurrentKey<'_, K>, user_key: &UK) -> bool {
        self.get(key, user_key).is_some()
    }

    /// Sets `user_key` to `value` in the map of `key`; returns the previous value.
    #[inline]
    pub fn put(&mut self, key: &CurrentKey<'_, K>, user_key: UK, value: UV) -> Option<UV> {
        self.table
            .get_or_insert_with(key, HashMap::new)
            .insert(user_key, value)
    }

    /// The value of `user_key` in the map of `key`, first inserting `default()` (and clones of
    /// the keys) if there is none.
    #[inline]
    pub fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        user_key: &UK,
        default: impl FnOnce() -> UV,
    ) -> &mut UV {
        let map = self.table.get_or_insert_with(key, HashMap::new);
        match map.raw_entry_mut().from_key(user_key) {
            RawEntryMut::Occupied(o) => o.into_mut(),
            RawEntryMut::Vacant(v) => v.insert(user_key.clone(), default()).1,
        }
    }

    /// Removes `user_key` from the map of `key`, and the key itself once its map is empty.
    pub fn remove(&mut self, key: &CurrentKey<'_, K>, user_key: &UK) -> Option<UV> {
        self.table
            .modify_existing(key, |m| m.contains_key(user_key), |m| m.remove(user_key))
            .flatten()
    }

    /// The entries of the map of `key`, in no particular order.
    pub fn entries(&self, key: &CurrentKey<'_, K>) -> impl Iterator<Item = (&UK, &UV)> {
        self.table.get(key).into_iter().flat_map(|m| m.iter())
    }

    /// The number of entries in the map of `key`.
    pub fn len(&self, key: &CurrentKey<'_, K>) -> usize {
        self.table.get(key).map_or(0, |m| m.len())
    }

    /// Whether the map of `key` is empty.
    pub fn is_empty(&self, key: &CurrentKey<'_, K>) -> bool {
        self.table.get(key).is_none_or(|m| m.is_empty())
    }

    /// Removes the whole map of `key`.
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        self.table.remove(key);
    }

    /// The number of keys with a non-empty map in this subtask: O(number of key groups).
    pub fn num_keys(&self) -> usize {
        self.table.len()
    }

    /// Every `(key, user key, user value)` of this subtask, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &UK, &UV)> {
        self.table
            .iter()
            .flat_map(|(k, m)| m.iter().map(move |(uk, uv)| (k, uk, uv)))
    }
}

impl<K, UK, UV> KeyedStateSet<K> for MapState<K, UK, UV>
where
    K: Key,
    UK: Value + Eq + Hash,
    UV: Value,
{
    forward_to_table!(table);
}

impl<K, UK, UV> fmt::Debug for MapState<K, UK, UV>
where
    K: Key,
    UK: Value + Eq + Hash,
    UV: Value,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapState")
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

    fn state() -> MapState<String, u32, u64> {
        let mut s = MapState::new("m");
        s.init(MP, KeyGroupRange::new(0, MP));
        s
    }

    #[test]
    fn put_get_and_contains_see_the_latest_value_per_user_key() {
        let mut s = state();
        let key = "a".to_string();
        let k = CurrentKey::new(&key, MP);
        assert_eq!(s.put(&k, 1, 10), None);
        assert_eq!(s.put(&k, 1, 11), Some(10));
        s.put(&k, 2, 20);
        assert_eq!(s.get(&k, &1), Some(&11));
        assert!(s.contains(&k, &2));
        assert!(!s.contains(&k, &3));
        assert_eq!(s.len(&k), 2);
        let mut entries: Vec<_> = s.entries(&k).map(|(a, b)| (*a, *b)).collect();
        entries.sort();
        assert_eq!(entries, vec![(1, 11), (2, 20)]);
    }

    #[test]
    fn removing_the_last_user_key_removes_the_key() {
        let mut s = state();
        let key = "a".to_string();
        let k = CurrentKey::new(&key, MP);
        s.put(&k, 1, 10);
        assert_eq!(s.remove(&k, &2), None);
        assert_eq!(s.remove(&k, &1), Some(10));
        assert!(s.is_empty(&k));
        assert_eq!(s.num_keys(), 0);
    }

    #[test]
    fn get_mut_and_get_or_insert_with_modify_in_place() {
        let mut s = state();
        let key = "a".to_string();
        let k = CurrentKey::new(&key, MP);
        assert_eq!(s.get_mut(&k, &1), None);
        *s.get_or_insert_with(&k, &1, || 5) += 1;
        *s.get_mut(&k, &1).unwrap() *= 2;
        assert_eq!(s.get(&k, &1), Some(&12));
    }

    #[test]
    fn clear_removes_the_whole_map_of_one_key_only() {
        let mut s = state();
        let (a, b) = ("a".to_string(), "b".to_string());
        let (ka, kb) = (CurrentKey::new(&a, MP), CurrentKey::new(&b, MP));
        s.put(&ka, 1, 1);
        s.put(&kb, 1, 1);
        s.clear(&ka);
        assert!(s.is_empty(&ka));
        assert_eq!(s.iter().count(), 1);
    }
}
