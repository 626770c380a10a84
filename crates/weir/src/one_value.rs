//! Keyed state of one value per key, with or without a time to live: the jobs whose
//! `--state-ttl` flag chooses between a [`ValueState`] and a [`TtlValueState`] are written once,
//! generic over [`OneValue`].

use std::time::Duration;
use weir_api::prelude::*;

/// A [`ValueState`] or a [`TtlValueState`], as a job's function uses it.
pub trait OneValue<K: Key, V: Value>: KeyedStateSet<K> + Sized {
    /// What the state is made from: nothing, or its time to live.
    type Config: Clone + Send + Sync + 'static;

    fn make(name: &str, config: &Self::Config) -> Self;

    /// The value of `key`, first set to `default()` if it has none (or an expired one).
    fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> V,
    ) -> &mut V;

    fn get(&mut self, key: &CurrentKey<'_, K>) -> Option<&V>;
}

impl<K: Key, V: Value> OneValue<K, V> for ValueState<K, V> {
    type Config = ();

    fn make(name: &str, _: &()) -> Self {
        ValueState::new(name)
    }

    #[inline]
    fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> V,
    ) -> &mut V {
        ValueState::get_or_insert_with(self, key, default)
    }

    fn get(&mut self, key: &CurrentKey<'_, K>) -> Option<&V> {
        ValueState::get(self, key)
    }
}

impl<K: Key, V: Value> OneValue<K, V> for TtlValueState<K, V> {
    /// The time to live, from the last write.
    type Config = Duration;

    fn make(name: &str, ttl: &Duration) -> Self {
        TtlValueState::new(name, StateTtlConfig::new(*ttl))
    }

    #[inline]
    fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> V,
    ) -> &mut V {
        TtlValueState::get_or_insert_with(self, key, default)
    }

    fn get(&mut self, key: &CurrentKey<'_, K>) -> Option<&V> {
        TtlValueState::get(self, key)
    }
}
