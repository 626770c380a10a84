//! What keys and values of keyed state must be, and the key of the record being processed.

use crate::stable_hash::{key_group_of, StableHash};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::hash::Hash;

/// A key of keyed state: stably hashable (for its key group), hashable and comparable (for the
/// in-memory maps), and serialisable (for snapshots). Implemented for every type that qualifies.
pub trait Key:
    StableHash + Eq + Hash + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<T> Key for T where
    T: StableHash + Eq + Hash + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

/// A value of keyed state. Implemented for every type that qualifies.
///
/// `Clone` is needed because the state tables are copy-on-write: the first write to a key group
/// after a snapshot copies that group while the snapshot is still being serialised.
pub trait Value: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}

impl<T> Value for T where T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}

/// The key of the record being processed, with its key group computed once per record by the
/// runtime, so that every state access for the record skips the stable hash.
///
/// Contract: `key_group == key_group_of(key, max_parallelism)` and the key group lies in the
/// subtask's range. Debug builds assert the range; in release a key group outside it makes the
/// state access panic (an index out of bounds), because it is a runtime bug that would otherwise
/// put state where no restore will find it.
///
/// ```
/// use weir_state::{key_group_of, CurrentKey};
///
/// let key = String::from("user-42");
/// let current = CurrentKey::new(&key, 128);
/// assert_eq!(current.key_group, key_group_of(&key, 128));
/// ```
pub struct CurrentKey<'a, K: ?Sized> {
    pub key: &'a K,
    pub key_group: u32,
}

impl<'a, K: StableHash + ?Sized> CurrentKey<'a, K> {
    /// The current key `key`, with its key group out of `max_parallelism` computed here.
    #[inline]
    pub fn new(key: &'a K, max_parallelism: u32) -> CurrentKey<'a, K> {
        CurrentKey {
            key,
            key_group: key_group_of(key, max_parallelism),
        }
    }
}

impl<K: ?Sized> Clone for CurrentKey<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: ?Sized> Copy for CurrentKey<'_, K> {}

impl<K: fmt::Debug + ?Sized> fmt::Debug for CurrentKey<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurrentKey")
            .field("key", &self.key)
            .field("key_group", &self.key_group)
            .finish()
    }
}
