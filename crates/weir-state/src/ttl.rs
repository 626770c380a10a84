//! State time-to-live: keyed state that expires when it was not written (or read) for a while.
//!
//! [`TtlValueState`], [`TtlMapState`] and [`TtlListState`] are the three kinds of keyed state
//! with a [`StateTtlConfig`]. Each value (each user key of a map, each element of a list) carries
//! the processing time of its last write — of its last read too with
//! [`TtlUpdate::OnReadAndWrite`] — as eight little-endian bytes ahead of the value. It expires
//! `ttl` after that: from then on it is absent to the job ([`TtlVisibility::NeverReturnExpired`],
//! the default) or returned until something removes it
//! ([`TtlVisibility::ReturnExpiredIfNotCleanedUp`]).
//!
//! # Time
//!
//! The runtime hands the state the processing time once per batch
//! ([`KeyedStateSet::advance_time`]), from the clock the operator's timers use: every record of
//! a batch sees the same time, reading it costs nothing per record, and tests drive it with a
//! manual clock. The time never goes back: a smaller reading is ignored.
//!
//! # Cleanup
//!
//! Expired state is removed by whichever of these the configuration enables:
//!
//! - **on access**: a read or write of an expired value removes it (with `NeverReturnExpired`);
//! - **incrementally** (heap backend, on by default): every access lets the next upkeep between
//!   batches examine a few more entries, a cursor walking the key groups round and round, and
//!   remove the expired ones (Flink's `cleanupIncrementally`);
//! - **in RocksDB's compactions** (RocksDB backend, on by default): a compaction filter on the
//!   table's column family drops the entries whose every part expired, so expired state leaves
//!   the table files — and the next incremental checkpoint — without a read;
//! - **in full snapshots** (off by default): a snapshot written in full (a savepoint, or a key
//!   group an incremental checkpoint writes whole) leaves out the keys whose every part expired,
//!   without changing the running state.
//!
//! A key removed by cleanup counts as removed for incremental checkpoints, like any removal.
//!
//! # Snapshots
//!
//! A table with a TTL is its own [kind](crate::TableKind): a snapshot of a `ValueState` does not
//! restore into a `TtlValueState` of the same name or back (the stored values differ); give the
//! state a new name to change it. The stamps travel with the values, so state restored after
//! downtime expires when it would have.

use crate::entry_codec::{EntryCodec, ListCodec, MapCodec, TableKind, ValueCodec};
use crate::error::StateError;
#[cfg(feature = "rocksdb")]
use crate::expiry::TtlCompaction;
use crate::expiry::{expiry_limit, stamp_expired, Expiry, Verdict};
use crate::frozen_table::FrozenTable;
use crate::key::{CurrentKey, Key, Value};
use crate::keyed_table::{KeyGroupedMap, PurgeCursor};
use crate::snapshot_reader::KeyedSnapshotReader;
use crate::state_set::{forward_to_table, KeyedStateSet};
use hashbrown::HashMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_core::KeyGroupRange;

/// What refreshes a value's time to live (Flink's `StateTtlConfig.UpdateType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUpdate {
    /// Writes only: a value read every second still expires `ttl` after it was written.
    OnCreateAndWrite,
    /// Reads too: a value expires `ttl` after it was last read or written.
    OnReadAndWrite,
}

/// Whether an expired value not yet removed is returned (Flink's `StateVisibility`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlVisibility {
    /// An expired value is absent, whether or not cleanup removed it yet; reading or writing
    /// it removes it.
    NeverReturnExpired,
    /// An expired value is returned until cleanup removes it (and a write refreshes it).
    ReturnExpiredIfNotCleanedUp,
}

/// The time to live of one state table and how its expired state is cleaned up (Flink's
/// `StateTtlConfig`).
///
/// ```
/// use std::time::Duration;
/// use weir_state::{StateTtlConfig, TtlUpdate, TtlVisibility};
///
/// let ttl = StateTtlConfig::new(Duration::from_secs(3600))
///     .update_on_read_and_write()
///     .cleanup_full_snapshot();
/// assert_eq!(ttl.update(), TtlUpdate::OnReadAndWrite);
/// assert_eq!(ttl.visibility(), TtlVisibility::NeverReturnExpired);
/// assert_eq!(ttl.incremental_cleanup(), 5);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateTtlConfig {
    ttl: Duration,
    update: TtlUpdate,
    visibility: TtlVisibility,
    full_snapshot: bool,
    incremental: usize,
    compaction_filter: bool,
}

/// Entries the heap backend examines for expiry per state access, by default (Flink's too).
pub const DEFAULT_INCREMENTAL_CLEANUP: usize = 5;

/// The most entries one upkeep between batches examines, however many accesses the batch made.
const MAX_CLEANUP_PER_BATCH: usize = 1 << 16;

impl StateTtlConfig {
    /// State that expires `ttl` after its last write, is never returned once expired, and is
    /// cleaned up incrementally on the heap and in compactions with RocksDB.
    pub fn new(ttl: Duration) -> Self {
        StateTtlConfig {
            ttl,
            update: TtlUpdate::OnCreateAndWrite,
            visibility: TtlVisibility::NeverReturnExpired,
            full_snapshot: false,
            incremental: DEFAULT_INCREMENTAL_CLEANUP,
            compaction_filter: true,
        }
    }

    /// Reads refresh the time to live too.
    pub fn update_on_read_and_write(mut self) -> Self {
        self.update = TtlUpdate::OnReadAndWrite;
        self
    }

    /// Only writes refresh the time to live (the default).
    pub fn update_on_create_and_write(mut self) -> Self {
        self.update = TtlUpdate::OnCreateAndWrite;
        self
    }

    /// Expired values not yet cleaned up are still returned.
    pub fn return_expired_if_not_cleaned_up(mut self) -> Self {
        self.visibility = TtlVisibility::ReturnExpiredIfNotCleanedUp;
        self
    }

    /// Expired values are never returned (the default).
    pub fn never_return_expired(mut self) -> Self {
        self.visibility = TtlVisibility::NeverReturnExpired;
        self
    }

    /// Full snapshots leave out expired keys.
    pub fn cleanup_full_snapshot(mut self) -> Self {
        self.full_snapshot = true;
        self
    }

    /// With the heap backend, each state access lets `entries` more entries be examined and
    /// the expired ones removed; 0 turns incremental cleanup off.
    pub fn cleanup_incrementally(mut self, entries: usize) -> Self {
        self.incremental = entries;
        self
    }

    /// With the RocksDB backend, whether compactions drop expired entries (on by default).
    pub fn cleanup_in_rocksdb_compaction(mut self, enabled: bool) -> Self {
        self.compaction_filter = enabled;
        self
    }

    /// Neither incremental nor compaction cleanup: expired state goes only when accessed (or
    /// from full snapshots, if enabled).
    pub fn disable_cleanup_in_background(mut self) -> Self {
        self.incremental = 0;
        self.compaction_filter = false;
        self
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn update(&self) -> TtlUpdate {
        self.update
    }

    pub fn visibility(&self) -> TtlVisibility {
        self.visibility
    }

    pub fn full_snapshot_cleanup(&self) -> bool {
        self.full_snapshot
    }

    pub fn incremental_cleanup(&self) -> usize {
        self.incremental
    }

    pub fn compaction_cleanup(&self) -> bool {
        self.compaction_filter
    }
}

/// A value with the processing time (ms) it was last written (or read), which the encoding
/// puts first as eight little-endian bytes: a filter over encoded values reads it there.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Stamped<V> {
    stamp: [u8; 8],
    value: V,
}

impl<V> Stamped<V> {
    fn new(now: u64, value: V) -> Self {
        Stamped {
            stamp: now.to_le_bytes(),
            value,
        }
    }

    fn time(&self) -> u64 {
        u64::from_le_bytes(self.stamp)
    }

    fn touch(&mut self, now: u64) {
        self.stamp = now.to_le_bytes();
    }
}

/// The codec of a kind of table with a TTL, and how its entries expire.
pub(crate) trait TtlCodec: EntryCodec {
    fn verdict(entry: &Self::Entry, limit: u64) -> Verdict;
    /// Removes the expired parts of `entry`.
    fn drop_expired(entry: &mut Self::Entry, limit: u64);
    /// Whether every part of the encoded entry `bytes` expired (false if it does not decode).
    fn all_expired(bytes: &[u8], limit: u64) -> bool;
}

/// [`TtlValueState`]'s entries: a stamped value.
pub(crate) struct TtlValueCodec<V>(PhantomData<fn() -> V>);

impl<V: Value> EntryCodec for TtlValueCodec<V> {
    type Entry = Stamped<V>;
    const KIND: TableKind = TableKind::TtlValue;
    fn encode(entry: &Stamped<V>, out: &mut Vec<u8>) -> postcard::Result<()> {
        ValueCodec::<Stamped<V>>::encode(entry, out)
    }
    fn decode(input: &[u8]) -> postcard::Result<(Stamped<V>, &[u8])> {
        ValueCodec::<Stamped<V>>::decode(input)
    }
}

impl<V: Value> TtlCodec for TtlValueCodec<V> {
    fn verdict(entry: &Stamped<V>, limit: u64) -> Verdict {
        if entry.time() < limit {
            Verdict::Remove
        } else {
            Verdict::Keep
        }
    }
    fn drop_expired(_entry: &mut Stamped<V>, _limit: u64) {}
    fn all_expired(bytes: &[u8], limit: u64) -> bool {
        stamp_expired(bytes, limit)
    }
}

/// [`TtlMapState`]'s entries: a map of stamped values.
pub(crate) struct TtlMapCodec<UK, UV>(PhantomData<fn() -> (UK, UV)>);

impl<UK: Value + Eq + Hash, UV: Value> EntryCodec for TtlMapCodec<UK, UV> {
    type Entry = HashMap<UK, Stamped<UV>>;
    const KIND: TableKind = TableKind::TtlMap;
    fn encode(entry: &Self::Entry, out: &mut Vec<u8>) -> postcard::Result<()> {
        MapCodec::<UK, Stamped<UV>>::encode(entry, out)
    }
    fn decode(input: &[u8]) -> postcard::Result<(Self::Entry, &[u8])> {
        MapCodec::<UK, Stamped<UV>>::decode(input)
    }
    fn is_empty(entry: &Self::Entry) -> bool {
        entry.is_empty()
    }
}

impl<UK: Value + Eq + Hash, UV: Value> TtlCodec for TtlMapCodec<UK, UV> {
    fn verdict(entry: &Self::Entry, limit: u64) -> Verdict {
        verdict_of(entry.values(), limit)
    }
    fn drop_expired(entry: &mut Self::Entry, limit: u64) {
        entry.retain(|_, v| v.time() >= limit);
    }
    fn all_expired(bytes: &[u8], limit: u64) -> bool {
        match Self::decode(bytes) {
            Ok((map, _)) => map.values().all(|v| v.time() < limit),
            Err(_) => false,
        }
    }
}

/// [`TtlListState`]'s entries: a list of stamped values.
pub(crate) struct TtlListCodec<V>(PhantomData<fn() -> V>);

impl<V: Value> EntryCodec for TtlListCodec<V> {
    type Entry = Vec<Stamped<V>>;
    const KIND: TableKind = TableKind::TtlList;
    fn encode(entry: &Self::Entry, out: &mut Vec<u8>) -> postcard::Result<()> {
        ListCodec::<Stamped<V>>::encode(entry, out)
    }
    fn decode(input: &[u8]) -> postcard::Result<(Self::Entry, &[u8])> {
        ListCodec::<Stamped<V>>::decode(input)
    }
    fn is_empty(entry: &Self::Entry) -> bool {
        entry.is_empty()
    }
}

impl<V: Value> TtlCodec for TtlListCodec<V> {
    fn verdict(entry: &Self::Entry, limit: u64) -> Verdict {
        verdict_of(entry.iter(), limit)
    }
    fn drop_expired(entry: &mut Self::Entry, limit: u64) {
        entry.retain(|v| v.time() >= limit);
    }
    fn all_expired(bytes: &[u8], limit: u64) -> bool {
        match Self::decode(bytes) {
            Ok((list, _)) => list.iter().all(|v| v.time() < limit),
            Err(_) => false,
        }
    }
}

fn verdict_of<'a, V: 'a>(mut parts: impl Iterator<Item = &'a Stamped<V>>, limit: u64) -> Verdict {
    let Some(first) = parts.next() else {
        return Verdict::Keep;
    };
    let first_expired = first.time() < limit;
    for part in parts {
        if (part.time() < limit) != first_expired {
            return Verdict::Trim;
        }
    }
    if first_expired {
        Verdict::Remove
    } else {
        Verdict::Keep
    }
}

/// The time of a table with a TTL and its cleanup's progress.
struct TtlClock {
    config: StateTtlConfig,
    ttl_ms: u64,
    /// The processing time the runtime last handed the state (ms).
    now: u64,
    /// `now`, for the compaction filter on RocksDB's threads.
    shared_now: Arc<AtomicU64>,
    /// State accesses since the last incremental cleanup.
    accesses: usize,
    cursor: PurgeCursor,
}

impl TtlClock {
    fn new(config: StateTtlConfig) -> Self {
        TtlClock {
            ttl_ms: u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX),
            config,
            now: 0,
            shared_now: Arc::new(AtomicU64::new(0)),
            accesses: 0,
            cursor: PurgeCursor::default(),
        }
    }

    fn limit(&self) -> u64 {
        expiry_limit(self.now, self.ttl_ms)
    }

    #[inline]
    fn expired(&self, time: u64) -> bool {
        time < self.limit()
    }

    /// Whether an entry stamped `time` is returned.
    #[inline]
    fn visible(&self, time: u64) -> bool {
        !self.expired(time) || self.config.visibility == TtlVisibility::ReturnExpiredIfNotCleanedUp
    }

    #[inline]
    fn refresh_on_read(&self) -> bool {
        self.config.update == TtlUpdate::OnReadAndWrite
    }

    #[inline]
    fn accessed(&mut self) {
        self.accesses = self.accesses.saturating_add(1);
    }
}

/// One table with a TTL: the stamped entries and the clock. The three kinds of TTL state wrap
/// it and share its [`KeyedStateSet`] implementation.
struct TtlTable<K, E, C> {
    table: KeyGroupedMap<K, E, C>,
    clock: TtlClock,
}

impl<K: Key, C: TtlCodec> TtlTable<K, C::Entry, C> {
    fn new(name: &str, config: StateTtlConfig) -> Self {
        TtlTable {
            table: KeyGroupedMap::new(name),
            clock: TtlClock::new(config),
        }
    }
}

impl<K: Key, C: TtlCodec> KeyedStateSet<K> for TtlTable<K, C::Entry, C> {
    fn init(&mut self, max_parallelism: u32, range: KeyGroupRange) {
        self.table.init(max_parallelism, range);
    }

    fn snapshot(&mut self, out: &mut Vec<Box<dyn FrozenTable>>) {
        let expiry = self
            .clock
            .config
            .full_snapshot
            .then(|| Expiry::new(C::all_expired, self.clock.limit()));
        self.table.snapshot_with_expiry(out, expiry);
    }

    fn restore(&mut self, snapshot: &KeyedSnapshotReader) -> Result<(), StateError> {
        self.table.restore(snapshot)
    }

    fn names(&self, out: &mut Vec<String>) {
        out.push(self.table.name().to_string());
    }

    fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
        self.table.forget_removals(confirmed_epoch)
    }

    #[cfg(feature = "rocksdb")]
    fn use_lsm(&mut self, store: &Arc<crate::lsm::LsmStore>) -> Result<(), StateError> {
        self.table.use_lsm(store)
    }

    #[cfg(feature = "rocksdb")]
    fn compaction_filters(&self, out: &mut Vec<(String, TtlCompaction)>) {
        if self.clock.config.compaction_filter {
            out.push((
                self.table.name().to_string(),
                TtlCompaction::new(
                    self.clock.ttl_ms,
                    self.clock.shared_now.clone(),
                    C::all_expired,
                ),
            ));
        }
    }

    fn advance_time(&mut self, now_ms: u64) {
        if now_ms > self.clock.now {
            self.clock.now = now_ms;
            self.clock.shared_now.store(now_ms, Ordering::Relaxed);
        }
    }

    fn maintain(&mut self) -> Result<(), StateError> {
        let clock = &mut self.clock;
        let budget = clock
            .accesses
            .saturating_mul(clock.config.incremental)
            .min(MAX_CLEANUP_PER_BATCH);
        clock.accesses = 0;
        if budget > 0 {
            let limit = clock.limit();
            self.table.purge(
                &mut clock.cursor,
                budget,
                |entry| C::verdict(entry, limit),
                |entry| C::drop_expired(entry, limit),
            );
        }
        self.table.maintain()
    }
}

/// One value per key that expires (see the [module](self) documentation): [`ValueState`]'s
/// access methods, each as of the processing time the runtime last handed the state.
///
/// Reads take `&mut self`: with [`TtlUpdate::OnReadAndWrite`] a read refreshes the value, and
/// a read of an expired value removes it.
///
/// ```
/// use std::time::Duration;
/// use weir_state::*;
///
/// let mut last_seen = TtlValueState::<String, u64>::new(
///     "last-seen",
///     StateTtlConfig::new(Duration::from_secs(60)),
/// );
/// last_seen.init(128, KeyGroupRange::new(0, 128));
/// let user = String::from("ada");
/// let key = CurrentKey::new(&user, 128);
///
/// last_seen.advance_time(1_000);
/// last_seen.set(&key, 7);
/// last_seen.advance_time(60_999);
/// assert_eq!(last_seen.get(&key), Some(&7));
/// last_seen.advance_time(61_000); // 60 s after the write
/// assert_eq!(last_seen.get(&key), None);
/// ```
///
/// [`ValueState`]: crate::ValueState
pub struct TtlValueState<K, V> {
    inner: TtlTable<K, Stamped<V>, TtlValueCodec<V>>,
}

impl<K: Key, V: Value> TtlValueState<K, V> {
    /// An empty table named `name` whose values live `config.ttl()`.
    pub fn new(name: &str, config: StateTtlConfig) -> Self {
        TtlValueState {
            inner: TtlTable::new(name, config),
        }
    }

    pub fn name(&self) -> &str {
        self.inner.table.name()
    }

    pub fn config(&self) -> &StateTtlConfig {
        &self.inner.clock.config
    }

    /// The value of `key`, if it has one that did not expire (or may be returned expired).
    pub fn get(&mut self, key: &CurrentKey<'_, K>) -> Option<&V> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let time = table.get(key)?.time();
        if !clock.visible(time) {
            table.remove(key);
            return None;
        }
        if !clock.expired(time) && clock.refresh_on_read() {
            let now = clock.now;
            return table.get_mut(key).map(|e| {
                e.touch(now);
                &e.value
            });
        }
        table.get(key).map(|e| &e.value)
    }

    /// Mutable access to the value of `key` if it has a visible one; a write, so it refreshes
    /// the value's time to live.
    pub fn get_mut(&mut self, key: &CurrentKey<'_, K>) -> Option<&mut V> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let time = table.get(key)?.time();
        if !clock.visible(time) {
            table.remove(key);
            return None;
        }
        let now = clock.now;
        table.get_mut(key).map(|e| {
            e.touch(now);
            &mut e.value
        })
    }

    /// Sets the value of `key`, stamped now.
    pub fn set(&mut self, key: &CurrentKey<'_, K>, value: V) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        table.insert(key, Stamped::new(clock.now, value));
    }

    /// The value of `key`, first setting it to `default()` if it has none or only an expired
    /// one that is not returned; refreshed either way.
    pub fn get_or_insert_with(
        &mut self,
        key: &CurrentKey<'_, K>,
        default: impl FnOnce() -> V,
    ) -> &mut V {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let now = clock.now;
        let mut default = Some(default);
        let entry = table.get_or_insert_with(key, || {
            Stamped::new(now, (default.take().expect("called once"))())
        });
        if let Some(default) = default {
            if !clock.visible(entry.time()) {
                entry.value = default();
            }
        }
        entry.touch(now);
        &mut entry.value
    }

    /// Replaces the value of `key` by `f(current)`, where an expired value not returned is
    /// `None`; `None` from `f` clears the key.
    pub fn update(&mut self, key: &CurrentKey<'_, K>, f: impl FnOnce(Option<V>) -> Option<V>) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let clock = &*clock;
        table.update(key, |old| {
            let old = old.filter(|e| clock.visible(e.time())).map(|e| e.value);
            f(old).map(|v| Stamped::new(clock.now, v))
        });
    }

    /// Removes the value of `key`.
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        self.take(key);
    }

    /// Removes the value of `key` and returns it if it was visible.
    pub fn take(&mut self, key: &CurrentKey<'_, K>) -> Option<V> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let entry = table.remove(key)?;
        clock.visible(entry.time()).then_some(entry.value)
    }

    /// The number of keys stored, expired ones not yet cleaned up included.
    pub fn len(&self) -> usize {
        self.inner.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key with a visible value, in no particular order (a read that refreshes nothing).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let clock = &self.inner.clock;
        self.inner
            .table
            .iter()
            .filter(move |(_, e)| clock.visible(e.time()))
            .map(|(k, e)| (k, &e.value))
    }
}

impl<K: Key, V: Value> KeyedStateSet<K> for TtlValueState<K, V> {
    forward_to_table!(inner);
}

/// A map per key whose user keys expire one by one (see the [module](self) documentation):
/// [`MapState`]'s access methods, each as of the processing time the runtime last handed the
/// state. A key whose map has nothing left is removed.
///
/// ```
/// use std::time::Duration;
/// use weir_state::*;
///
/// let mut carts = TtlMapState::<u64, String, u32>::new(
///     "carts",
///     StateTtlConfig::new(Duration::from_secs(60)),
/// );
/// carts.init(128, KeyGroupRange::new(0, 128));
/// let user = CurrentKey::new(&42u64, 128);
///
/// carts.advance_time(0);
/// carts.put(&user, "apple".into(), 2);
/// carts.advance_time(30_000);
/// carts.put(&user, "pear".into(), 1);
/// carts.advance_time(60_000); // the apple expires, the pear has 30 s left
/// assert_eq!(carts.get(&user, &"apple".to_string()), None);
/// assert_eq!(carts.entries(&user).count(), 1);
/// ```
///
/// [`MapState`]: crate::MapState
pub struct TtlMapState<K, UK, UV> {
    inner: TtlTable<K, HashMap<UK, Stamped<UV>>, TtlMapCodec<UK, UV>>,
}

impl<K, UK, UV> TtlMapState<K, UK, UV>
where
    K: Key,
    UK: Value + Eq + Hash,
    UV: Value,
{
    /// An empty table named `name` whose user keys live `config.ttl()`.
    pub fn new(name: &str, config: StateTtlConfig) -> Self {
        TtlMapState {
            inner: TtlTable::new(name, config),
        }
    }

    pub fn name(&self) -> &str {
        self.inner.table.name()
    }

    pub fn config(&self) -> &StateTtlConfig {
        &self.inner.clock.config
    }

    /// The value of `user_key` in the map of `key`, if visible.
    pub fn get(&mut self, key: &CurrentKey<'_, K>, user_key: &UK) -> Option<&UV> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let time = table.get(key)?.get(user_key)?.time();
        if !clock.visible(time) {
            table.modify_existing(key, |_| true, |map| map.remove(user_key));
            return None;
        }
        if !clock.expired(time) && clock.refresh_on_read() {
            let now = clock.now;
            table.modify_existing(
                key,
                |_| true,
                |map| map.get_mut(user_key).map(|e| e.touch(now)),
            );
        }
        table.get(key)?.get(user_key).map(|e| &e.value)
    }

    /// Whether `user_key` has a visible value in the map of `key` (a read).
    pub fn contains(&mut self, key: &CurrentKey<'_, K>, user_key: &UK) -> bool {
        self.get(key, user_key).is_some()
    }

    /// Sets `user_key` to `value` in the map of `key`, stamped now; returns the visible value
    /// it replaces.
    pub fn put(&mut self, key: &CurrentKey<'_, K>, user_key: UK, value: UV) -> Option<UV> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let old = table
            .get_or_insert_with(key, HashMap::new)
            .insert(user_key, Stamped::new(clock.now, value))?;
        clock.visible(old.time()).then_some(old.value)
    }

    /// Removes `user_key` from the map of `key` and returns its value if it was visible.
    pub fn remove(&mut self, key: &CurrentKey<'_, K>, user_key: &UK) -> Option<UV> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let old = table
            .modify_existing(
                key,
                |map| map.contains_key(user_key),
                |map| map.remove(user_key),
            )
            .flatten()?;
        clock.visible(old.time()).then_some(old.value)
    }

    /// The visible entries of the map of `key` (a read that refreshes nothing).
    pub fn entries(&self, key: &CurrentKey<'_, K>) -> impl Iterator<Item = (&UK, &UV)> {
        let clock = &self.inner.clock;
        self.inner
            .table
            .get(key)
            .into_iter()
            .flatten()
            .filter(move |(_, e)| clock.visible(e.time()))
            .map(|(k, e)| (k, &e.value))
    }

    /// Removes the map of `key`.
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        table.remove(key);
    }

    /// The number of keys stored, expired ones not yet cleaned up included.
    pub fn num_keys(&self) -> usize {
        self.inner.table.len()
    }

    /// Every visible `(key, user key, value)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &UK, &UV)> {
        let clock = &self.inner.clock;
        self.inner.table.iter().flat_map(move |(k, map)| {
            map.iter()
                .filter(move |(_, e)| clock.visible(e.time()))
                .map(move |(uk, e)| (k, uk, &e.value))
        })
    }
}

impl<K, UK, UV> KeyedStateSet<K> for TtlMapState<K, UK, UV>
where
    K: Key,
    UK: Value + Eq + Hash,
    UV: Value,
{
    forward_to_table!(inner);
}

/// A list per key whose elements expire one by one (see the [module](self) documentation):
/// [`ListState`]'s access methods, each as of the processing time the runtime last handed the
/// state. A key whose list has nothing left is removed.
///
/// [`ListState`]: crate::ListState
pub struct TtlListState<K, V> {
    inner: TtlTable<K, Vec<Stamped<V>>, TtlListCodec<V>>,
}

impl<K: Key, V: Value> TtlListState<K, V> {
    /// An empty table named `name` whose elements live `config.ttl()`.
    pub fn new(name: &str, config: StateTtlConfig) -> Self {
        TtlListState {
            inner: TtlTable::new(name, config),
        }
    }

    pub fn name(&self) -> &str {
        self.inner.table.name()
    }

    pub fn config(&self) -> &StateTtlConfig {
        &self.inner.clock.config
    }

    /// The visible elements of the list of `key`, oldest first. Expired elements that are not
    /// returned are removed; with [`TtlUpdate::OnReadAndWrite`] the others are refreshed.
    pub fn get(&mut self, key: &CurrentKey<'_, K>) -> impl Iterator<Item = &V> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let (limit, now) = (clock.limit(), clock.now);
        let never = clock.config.visibility == TtlVisibility::NeverReturnExpired;
        let refresh = clock.refresh_on_read();
        if let Some(list) = table.get(key) {
            let verdict = TtlListCodec::<V>::verdict(list, limit);
            let trim = never && !matches!(verdict, Verdict::Keep);
            if trim || (refresh && !matches!(verdict, Verdict::Remove)) {
                table.modify_existing(
                    key,
                    |_| true,
                    |list| {
                        if trim {
                            TtlListCodec::<V>::drop_expired(list, limit);
                        }
                        if refresh {
                            list.iter_mut()
                                .filter(|e| e.time() >= limit)
                                .for_each(|e| e.touch(now));
                        }
                    },
                );
            }
        }
        let clock = &self.inner.clock;
        self.inner
            .table
            .get(key)
            .into_iter()
            .flatten()
            .filter(move |e| clock.visible(e.time()))
            .map(|e| &e.value)
    }

    /// Appends `value` to the list of `key`, stamped now.
    pub fn add(&mut self, key: &CurrentKey<'_, K>, value: V) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        table
            .get_or_insert_with(key, Vec::new)
            .push(Stamped::new(clock.now, value));
    }

    /// Replaces the list of `key` by `values`, stamped now (empty clears the key).
    pub fn update(&mut self, key: &CurrentKey<'_, K>, values: Vec<V>) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let now = clock.now;
        if values.is_empty() {
            table.remove(key);
        } else {
            table.insert(
                key,
                values.into_iter().map(|v| Stamped::new(now, v)).collect(),
            );
        }
    }

    /// Removes the list of `key`.
    pub fn clear(&mut self, key: &CurrentKey<'_, K>) {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        table.remove(key);
    }

    /// Removes the list of `key` and returns its visible elements.
    pub fn take(&mut self, key: &CurrentKey<'_, K>) -> Vec<V> {
        let TtlTable { table, clock } = &mut self.inner;
        clock.accessed();
        let list = table.remove(key).unwrap_or_default();
        list.into_iter()
            .filter(|e| clock.visible(e.time()))
            .map(|e| e.value)
            .collect()
    }

    /// The number of keys stored, expired ones not yet cleaned up included.
    pub fn num_keys(&self) -> usize {
        self.inner.table.len()
    }

    /// Every key with its visible elements, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, Vec<&V>)> {
        let clock = &self.inner.clock;
        self.inner.table.iter().filter_map(move |(k, list)| {
            let visible: Vec<&V> = list
                .iter()
                .filter(|e| clock.visible(e.time()))
                .map(|e| &e.value)
                .collect();
            (!visible.is_empty()).then_some((k, visible))
        })
    }
}

impl<K: Key, V: Value> KeyedStateSet<K> for TtlListState<K, V> {
    forward_to_table!(inner);
}

impl<K: Key, V: Value> fmt::Debug for TtlValueState<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.debug("TtlValueState", f)
    }
}

impl<K: Key, UK: Value + Eq + Hash, UV: Value> fmt::Debug for TtlMapState<K, UK, UV> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.debug("TtlMapState", f)
    }
}

impl<K: Key, V: Value> fmt::Debug for TtlListState<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.debug("TtlListState", f)
    }
}

impl<K: Key, C: TtlCodec> TtlTable<K, C::Entry, C> {
    fn debug(&self, kind: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(kind)
            .field("name", &self.table.name())
            .field("key_groups", &self.table.key_groups())
            .field("keys", &self.table.len())
            .field("ttl", &self.clock.config.ttl)
            .finish()
    }
}

#[cfg(test)]
mod tests;
