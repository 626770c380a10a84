//! Timers of keyed operators: event-time timers fire when the watermark passes them,
//! processing-time timers when the wall clock does — always on the task loop.
//!
//! Timers are keyed state. Each registered timer is one entry `(key, timestamp)` of a keyed
//! state table whose key group is its key's, so timers are snapshotted with the rest of the
//! operator's keyed state (copy-on-write, by key group, incremental-friendly), restored on
//! recovery and redistributed on rescale. Next to each table, an in-memory index ordered by time
//! finds the due timers; it is rebuilt from the table on restore and may hold stale entries of
//! deleted timers, which are skipped when their time comes.
//!
//! Invariant: a timer fires at most once: it is removed from its table before its callback
//! runs, in the same epoch as the callback's effects, so a checkpoint holds either the timer or
//! the effects of its firing, never both. It fires at least once: a timer in a checkpoint is in
//! the restored table and its index.
//!
//! ```
//! use weir_core::{KeyGroupRange, ManualClock};
//! use weir_runtime::timer_service::{TimeDomain, TimerService};
//! use std::sync::Arc;
//!
//! let clock = ManualClock::new(1_000);
//! let mut timers = TimerService::<u64>::new(Arc::new(clock.clone()));
//! timers.init(128, KeyGroupRange::new(0, 128));
//! timers.register(TimeDomain::EventTime, &7, 500);
//! timers.register(TimeDomain::EventTime, &7, 500); // one timer per key and time
//! timers.register(TimeDomain::EventTime, &8, 900);
//! timers.register(TimeDomain::ProcessingTime, &7, 1_500);
//!
//! let mut fired = Vec::new();
//! while let Some((time, keys)) = timers.pop_due(TimeDomain::EventTime, 600) {
//!     for key in keys {
//!         if timers.take(TimeDomain::EventTime, &key, time) {
//!             fired.push((key, time));
//!         }
//!     }
//! }
//! assert_eq!(fired, [(7, 500)]);
//! clock.advance(500);
//! assert_eq!(timers.until_next_processing_timer(), Some(std::time::Duration::ZERO));
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use weir_core::{Clock, KeyGroupRange};
use weir_state::{
    key_group_of, CurrentKey, FrozenTable, Key, KeyedSnapshotReader, KeyedStateSet, StableHash,
    StateError, ValueState,
};

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the operator's watermark reaches the timer's time.
    EventTime,
    /// Fires when the wall clock (milliseconds since the Unix epoch) reaches it.
    ProcessingTime,
}

/// A timer that fired: its time and its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    pub timestamp: i64,
    pub domain: TimeDomain,
}

/// A key together with a time: the entry of a timer, and of per-window state.
///
/// Its [`StableHash`] is the key's alone, so it lives in the key group of its key — the
/// subtask that owns the key owns its timers and windows, and restore checks hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimedKey<K> {
    pub key: K,
    pub time: i64,
}

impl<K: StableHash> StableHash for TimedKey<K> {
    #[inline]
    fn stable_hash(&self) -> u64 {
        self.key.stable_hash()
    }
}

/// The names of the timer tables in a keyed snapshot; user state may not use them.
pub const EVENT_TIMERS_TABLE: &str = "weir.timers.event-time";
pub const PROCESSING_TIMERS_TABLE: &str = "weir.timers.processing-time";

/// One clock's timers: the table (the truth, checkpointed) and the index by time.
struct TimerQueue<K> {
    table: ValueState<TimedKey<K>, ()>,
    // Invariant: every timer in `table` has an entry in `by_time` at its time.
    by_time: BTreeMap<i64, Vec<K>>,
}

impl<K: Key> TimerQueue<K> {
    fn new(name: &str) -> TimerQueue<K> {
        TimerQueue {
            table: ValueState::new(name),
            by_time: BTreeMap::new(),
        }
    }

    fn rebuild_index(&mut self) {
        self.by_time.clear();
        for (timer, ()) in self.table.iter() {
            self.by_time
                .entry(timer.time)
                .or_default()
                .push(timer.key.clone());
        }
    }
}

/// The timers of one keyed operator subtask.
pub struct TimerService<K> {
    event: TimerQueue<K>,
    processing: TimerQueue<K>,
    watermark: i64,
    clock: Arc<dyn Clock>,
    max_parallelism: u32,
}

impl<K: Key> TimerService<K> {
    /// An empty service reading processing time from `clock`; [`init`](Self::init) it first.
    pub fn new(clock: Arc<dyn Clock>) -> TimerService<K> {
        TimerService {
            event: TimerQueue::new(EVENT_TIMERS_TABLE),
            processing: TimerQueue::new(PROCESSING_TIMERS_TABLE),
            watermark: i64::MIN,
            clock,
            max_parallelism: 0,
        }
    }

    /// This subtask owns `range` of `max_parallelism` key groups.
    pub fn init(&mut self, max_parallelism: u32, range: KeyGroupRange) {
        self.max_parallelism = max_parallelism;
        self.event.table.init(max_parallelism, range);
        self.processing.table.init(max_parallelism, range);
    }

    /// Loads the timers of this subtask's key groups from a snapshot.
    pub fn restore(&mut self, reader: &KeyedSnapshotReader) -> Result<(), StateError> {
        self.event.table.restore(reader)?;
        self.processing.table.restore(reader)?;
        self.event.rebuild_index();
        self.processing.rebuild_index();
        Ok(())
    }

    /// Synchronous snapshot phase: frozen views of both timer tables.
    pub fn snapshot(&mut self, out: &mut Vec<Box<dyn FrozenTable>>) {
        self.event.table.snapshot(out);
        self.processing.table.snapshot(out);
    }

    /// A checkpoint completed: see [`KeyedStateSet::forget_removals`].
    pub fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
        self.event.table.forget_removals(confirmed_epoch);
        self.processing.table.forget_removals(confirmed_epoch);
    }

    /// The current event time (the operator's watermark).
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Moves event time forward (never back).
    pub fn advance_watermark(&mut self, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }

    /// The current processing time, milliseconds since the Unix epoch.
    pub fn processing_time(&self) -> i64 {
        self.clock.now_ms() as i64
    }

    fn queue(&mut self, domain: TimeDomain) -> &mut TimerQueue<K> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer for `key` at `time`; returns false if it was already registered.
    pub fn register(&mut self, domain: TimeDomain, key: &K, time: i64) -> bool {
        let key_group = key_group_of(key, self.max_parallelism);
        self.register_in_group(domain, key, key_group, time)
    }

    /// [`register`](Self::register) for a key whose key group is known.
    pub fn register_in_group(
        &mut self,
        domain: TimeDomain,
        key: &K,
        key_group: u32,
        time: i64,
    ) -> bool {
        let queue = self.queue(domain);
        let timer = TimedKey {
            key: key.clone(),
            time,
        };
        let entry = CurrentKey {
            key: &timer,
            key_group,
        };
        if !queue.table.set_if_absent(&entry, ()) {
            return false;
        }
        queue.by_time.entry(time).or_default().push(timer.key);
        true
    }

    /// Deletes a timer; returns whether it was registered.
    pub fn delete(&mut self, domain: TimeDomain, key: &K, time: i64) -> bool {
        let key_group = key_group_of(key, self.max_parallelism);
        self.delete_in_group(domain, key, key_group, time)
    }

    /// [`delete`](Self::delete) for a key whose key group is known.
    pub fn delete_in_group(
        &mut self,
        domain: TimeDomain,
        key: &K,
        key_group: u32,
        time: i64,
    ) -> bool {
        let timer = TimedKey {
            key: key.clone(),
            time,
        };
        // The index entry stays behind and is skipped when its time comes.
        self.queue(domain)
            .table
            .take(&CurrentKey {
                key: &timer,
                key_group,
            })
            .is_some()
    }

    /// Removes and returns the earliest time with timers at or before `limit`, with their keys.
    /// Some keys may be stale (their timers deleted): [`take`](Self::take) tells.
    pub fn pop_due(&mut self, domain: TimeDomain, limit: i64) -> Option<(i64, Vec<K>)> {
        let queue = self.queue(domain);
        let entry = queue.by_time.first_entry()?;
        if *entry.key() > limit {
            return None;
        }
        Some(entry.remove_entry())
    }

    /// Removes the timer of `key` at `time` if it is registered; a timer fires only if this
    /// returns true.
    pub fn take(&mut self, domain: TimeDomain, key: &K, time: i64) -> bool {
        self.delete(domain, key, time)
    }

    /// How long until the earliest processing-time timer is due (zero if it is overdue).
    pub fn until_next_processing_timer(&self) -> Option<Duration> {
        let (&time, _) = self.processing.by_time.first_key_value()?;
        let now = self.processing_time();
        Some(Duration::from_millis(time.saturating_sub(now).max(0) as u64))
    }

    /// The number of registered timers of one clock.
    pub fn len(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.table.len(),
            TimeDomain::ProcessingTime => self.processing.table.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len(TimeDomain::EventTime) == 0 && self.len(TimeDomain::ProcessingTime) == 0
    }
}

/// Fires every timer of `domain` due at `limit` in time order, calling `on_timer` for each with
/// the service (to register more: those due at `limit` fire in the same call).
pub fn fire_due<K: Key>(
    timers: &mut TimerService<K>,
    domain: TimeDomain,
    limit: i64,
    mut on_timer: impl FnMut(
        &mut TimerService<K>,
        &CurrentKey<'_, K>,
        Timer,
    ) -> Result<(), crate::TaskError>,
) -> Result<(), crate::TaskError> {
    while let Some((time, keys)) = timers.pop_due(domain, limit) {
        for key in keys {
            let key_group = key_group_of(&key, timers.max_parallelism);
            if timers.delete_in_group(domain, &key, key_group, time) {
                let current = CurrentKey {
                    key: &key,
                    key_group,
                };
                let timer = Timer {
                    timestamp: time,
                    domain,
                };
                on_timer(timers, &current, timer)?;
            }
        }
    }
    Ok(())
}

/// What a keyed function may do besides emitting: read the current times and register or
/// delete timers for the key being processed.
pub struct TimerContext<'a, K> {
    key: &'a K,
    key_group: u32,
    timers: &'a mut TimerService<K>,
}

impl<'a, K: Key> TimerContext<'a, K> {
    pub fn new(key: &CurrentKey<'a, K>, timers: &'a mut TimerService<K>) -> TimerContext<'a, K> {
        TimerContext {
            key: key.key,
            key_group: key.key_group,
            timers,
        }
    }

    /// The operator's watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.timers.watermark()
    }

    /// Milliseconds since the Unix epoch, on the operator's clock.
    pub fn current_processing_time(&self) -> i64 {
        self.timers.processing_time()
    }

    /// Calls `on_timer` for the current key once the watermark reaches `time`. Registering the
    /// same time twice makes one timer.
    pub fn register_event_time_timer(&mut self, time: i64) {
        self.timers
            .register_in_group(TimeDomain::EventTime, self.key, self.key_group, time);
    }

    /// Calls `on_timer` for the current key once the clock reaches `time` (ms since the epoch).
    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.timers
            .register_in_group(TimeDomain::ProcessingTime, self.key, self.key_group, time);
    }

    pub fn delete_event_time_timer(&mut self, time: i64) {
        self.timers
            .delete_in_group(TimeDomain::EventTime, self.key, self.key_group, time);
    }

    pub fn delete_processing_time_timer(&mut self, time: i64) {
        self.timers
            .delete_in_group(TimeDomain::ProcessingTime, self.key, self.key_group, time);
    }
}

/// Checks that a function's own keyed state does not use the timer tables' names.
pub fn check_reserved_names<K: Key, S: KeyedStateSet<K>>(
    state: &S,
    uid: &str,
) -> Result<(), crate::TaskError> {
    let mut names = Vec::new();
    state.names(&mut names);
    match names.iter().find(|n| n.starts_with("weir.")) {
        Some(name) => Err(crate::TaskError::user(format!(
            "operator '{uid}' declares keyed state '{name}': names starting with 'weir.' are reserved"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::ManualClock;
    use weir_state::encode_keyed_snapshot;

    const MP: u32 = 16;

    fn service(clock: &ManualClock) -> TimerService<u64> {
        let mut t = TimerService::new(Arc::new(clock.clone()));
        t.init(MP, KeyGroupRange::new(0, MP));
        t
    }

    fn fire_all(t: &mut TimerService<u64>, domain: TimeDomain, limit: i64) -> Vec<(u64, i64)> {
        let mut fired = Vec::new();
        while let Some((time, keys)) = t.pop_due(domain, limit) {
            for key in keys {
                if t.take(domain, &key, time) {
                    fired.push((key, time));
                }
            }
        }
        fired
    }

    #[test]
    fn timers_fire_in_time_order_once_and_only_when_due() {
        let clock = ManualClock::new(0);
        let mut t = service(&clock);
        t.register(TimeDomain::EventTime, &1, 30);
        t.register(TimeDomain::EventTime, &2, 10);
        t.register(TimeDomain::EventTime, &3, 20);
        assert!(!t.register(TimeDomain::EventTime, &3, 20));
        assert_eq!(
            fire_all(&mut t, TimeDomain::EventTime, 25),
            [(2, 10), (3, 20)]
        );
        assert_eq!(fire_all(&mut t, TimeDomain::EventTime, 25), []);
        assert_eq!(fire_all(&mut t, TimeDomain::EventTime, 30), [(1, 30)]);
        assert!(t.is_empty());
    }

    #[test]
    fn a_deleted_timer_never_fires_even_if_registered_again_and_deleted_once_more() {
        let clock = ManualClock::new(0);
        let mut t = service(&clock);
        t.register(TimeDomain::EventTime, &1, 10);
        assert!(t.delete(TimeDomain::EventTime, &1, 10));
        t.register(TimeDomain::EventTime, &1, 10);
        assert_eq!(fire_all(&mut t, TimeDomain::EventTime, 10), [(1, 10)]);
    }

    #[test]
    fn processing_time_timers_follow_the_clock_they_are_given() {
        let clock = ManualClock::new(1_000);
        let mut t = service(&clock);
        t.register(TimeDomain::ProcessingTime, &5, 1_250);
        assert_eq!(
            t.until_next_processing_timer(),
            Some(Duration::from_millis(250))
        );
        clock.advance(300);
        assert_eq!(t.until_next_processing_timer(), Some(Duration::ZERO));
        let now = t.processing_time();
        assert_eq!(
            fire_all(&mut t, TimeDomain::ProcessingTime, now),
            [(5, 1_250)]
        );
        assert_eq!(t.until_next_processing_timer(), None);
    }

    #[test]
    fn restored_timers_are_exactly_those_of_the_snapshot_and_fire_once() {
        let clock = ManualClock::new(0);
        let mut t = service(&clock);
        for k in 0..100u64 {
            t.register(TimeDomain::EventTime, &k, k as i64);
        }
        t.register(TimeDomain::ProcessingTime, &7, 99);
        fire_all(&mut t, TimeDomain::EventTime, 49); // 0..=49 fired before the snapshot
        let mut frozen = Vec::new();
        t.snapshot(&mut frozen);
        fire_all(&mut t, TimeDomain::EventTime, 79); // after the snapshot: lost in a failure
        let bytes = encode_keyed_snapshot(&frozen, KeyGroupRange::new(0, MP)).unwrap();

        // Restore at parallelism 2: each half gets the timers of its key groups.
        let reader = KeyedSnapshotReader::decode(&bytes).unwrap();
        let mut fired = Vec::new();
        for index in 0..2 {
            let range = KeyGroupRange::for_subtask(MP, 2, index);
            let mut r = TimerService::<u64>::new(Arc::new(clock.clone()));
            r.init(MP, range);
            r.restore(&reader).unwrap();
            fired.extend(fire_all(&mut r, TimeDomain::EventTime, i64::MAX));
            assert!(r.len(TimeDomain::ProcessingTime) <= 1);
        }
        fired.sort();
        let expected: Vec<(u64, i64)> = (50..100).map(|k| (k, k as i64)).collect();
        assert_eq!(fired, expected);
    }
}
