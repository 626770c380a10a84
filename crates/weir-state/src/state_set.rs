//! `KeyedStateSet`: the keyed state tables of one operator, as the runtime initialises, snapshots and restores them.

use crate::entry_codec::EntryCodec;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use crate::key::Key;
use crate::keyed_table::KeyGroupedMap;
use crate::snapshot_reader::KeyedSnapshotReader;
use weir_core::KeyGroupRange;

/// A set of keyed state tables that the runtime can initialise, snapshot and restore.
///
/// Implemented for [`ValueState`](crate::ValueState), [`MapState`](crate::MapState),
/// [`ListState`](crate::ListState), for `()` (no keyed state) and for tuples of up to six sets,
/// so an operator declares its state as one value:
///
/// ```
/// use weir_state::*;
///
/// let mut state = (
///     ValueState::<String, u64>::new("count"),
///     ListState::<String, f64>::new("readings"),
/// );
/// state.check_names().unwrap();
/// let range = KeyGroupRange::new(0, 128); // a single subtask owns every key group
/// state.init(128, range);
///
/// let sensor = String::from("sensor-1");
/// let key = CurrentKey::new(&sensor, 128);
/// state.0.set(&key, 1);
/// state.1.add(&key, 20.5);
///
/// let mut frozen = Vec::new();
/// state.snapshot(&mut frozen); // synchronous phase, on the task thread
/// let bytes = encode_keyed_snapshot(&frozen, range).unwrap(); // on a snapshot worker
///
/// let mut restored = (
///     ValueState::<String, u64>::new("count"),
///     ListState::<String, f64>::new("readings"),
/// );
/// restored.init(128, range);
/// restored.restore(&KeyedSnapshotReader::decode(&bytes).unwrap()).unwrap();
/// assert_eq!(restored.0.get(&key), Some(&1));
/// assert_eq!(restored.1.get(&key), [20.5]);
/// ```
pub trait KeyedStateSet<K: Key>: Send + 'static {
    /// Called once on the task thread before any access: this subtask owns `range` out of
    /// `max_parallelism` key groups. Every table starts empty.
    fn init(&mut self, max_parallelism: u32, range: KeyGroupRange);

    /// Synchronous phase: appends a frozen view of every table to `out`, in a fixed order.
    /// O(number of key groups), independent of the number of keys.
    fn snapshot(&mut self, out: &mut Vec<Box<dyn FrozenTable>>);

    /// Replaces the contents of every table with its key groups in `snapshot` that lie inside the
    /// range given to `init`, so a restore at a different parallelism (rescaling) takes just the
    /// key groups it owns. Tables absent from the snapshot start empty. Call
    /// [`KeyedSnapshotReader::check_covers`] first to make sure no subtask snapshot is missing.
    fn restore(&mut self, snapshot: &KeyedSnapshotReader) -> Result<(), StateError>;

    /// Appends the names of every table, for duplicate-name detection.
    fn names(&self, out: &mut Vec<String>);

    /// A checkpoint completed: `confirmed_epoch(table)` is the epoch of the snapshot of `table`
    /// that incremental checkpoints now build on (see
    /// [`IncrementalBase::confirmed_epoch`](crate::IncrementalBase::confirmed_epoch)). No delta
    /// is taken since an older one any more, so the tables forget the keys removed up to it.
    fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>);

    /// Moves every table to the RocksDB backend: from now on their entries live in `store`
    /// (see [`crate::lsm`]). Called once by the runtime, after [`init`](Self::init) and before
    /// [`restore`](Self::restore) or any access.
    #[cfg(feature = "rocksdb")]
    fn use_lsm(&mut self, store: &std::sync::Arc<crate::lsm::LsmStore>) -> Result<(), StateError>;

    /// Called by the runtime before it processes a batch of records, with their keys: with
    /// the RocksDB backend, the tables read the entries of those keys that they do not hold in
    /// memory in one batched lookup (RocksDB's `MultiGet`) instead of one read per record.
    #[cfg(feature = "rocksdb")]
    fn prefetch(&mut self, _keys: &[crate::CurrentKey<'_, K>]) {}

    /// The processing time (ms since the Unix epoch, on the operator's clock), handed over by
    /// the runtime before each batch and each snapshot: the time tables with a time to live
    /// expire their state against (`TtlValueState` and the others). Other tables ignore it.
    fn advance_time(&mut self, _now_ms: u64) {}

    /// Appends how RocksDB's compactions drop the expired entries of each table with a time to
    /// live, by table name: the runtime opens the subtask's RocksDB with them.
    #[cfg(feature = "rocksdb")]
    fn compaction_filters(&self, _out: &mut Vec<(String, crate::expiry::TtlCompaction)>) {}

    /// Called by the runtime between batches and before every snapshot. With the RocksDB
    /// backend a table spills its in-memory tier if it is over its budget, and returns a
    /// RocksDB failure met since the last call (reads cannot return one). The heap backend has
    /// nothing to do.
    fn maintain(&mut self) -> Result<(), StateError> {
        Ok(())
    }

    /// Errors if two tables share a name: their snapshots would be indistinguishable.
    fn check_names(&self) -> Result<(), StateError> {
        let mut names = Vec::new();
        self.names(&mut names);
        names.sort_unstable();
        match names.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(StateError::DuplicateTable { name: w[0].clone() }),
            None => Ok(()),
        }
    }
}

/// The one implementation for a single table, which [`ValueState`](crate::ValueState),
/// [`ListState`](crate::ListState) and [`MapState`](crate::MapState) forward to
/// ([`forward_to_table`]).
impl<K, E, C> KeyedStateSet<K> for KeyGroupedMap<K, E, C>
where
    K: Key,
    E: Clone + Send + Sync + 'static,
    C: EntryCodec<Entry = E>,
{
    fn init(&mut self, max_parallelism: u32, range: KeyGroupRange) {
        KeyGroupedMap::init(self, max_parallelism, range)
    }

    fn snapshot(&mut self, out: &mut Vec<Box<dyn FrozenTable>>) {
        self.snapshot_into(out)
    }

    fn restore(&mut self, snapshot: &KeyedSnapshotReader) -> Result<(), StateError> {
        KeyGroupedMap::restore(self, snapshot)
    }

    fn names(&self, out: &mut Vec<String>) {
        out.push(self.name().to_string());
    }

    fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
        KeyGroupedMap::forget_removals(self, confirmed_epoch)
    }

    #[cfg(feature = "rocksdb")]
    fn use_lsm(&mut self, store: &std::sync::Arc<crate::lsm::LsmStore>) -> Result<(), StateError> {
        KeyGroupedMap::use_lsm(self, store)
    }

    fn maintain(&mut self) -> Result<(), StateError> {
        KeyGroupedMap::maintain(self)
    }

    #[cfg(feature = "rocksdb")]
    fn prefetch(&mut self, keys: &[crate::CurrentKey<'_, K>]) {
        KeyGroupedMap::prefetch(self, keys)
    }
}

/// The body of `impl KeyedStateSet<K>` for a kind of state whose one table is its field
/// `$table`: every method forwards to the table's implementation.
macro_rules! forward_to_table {
    ($table:ident) => {
        fn init(&mut self, max_parallelism: u32, range: weir_core::KeyGroupRange) {
            $crate::KeyedStateSet::init(&mut self.$table, max_parallelism, range)
        }

        fn snapshot(&mut self, out: &mut Vec<Box<dyn $crate::FrozenTable>>) {
            $crate::KeyedStateSet::snapshot(&mut self.$table, out)
        }

        fn restore(
            &mut self,
            snapshot: &$crate::KeyedSnapshotReader,
        ) -> Result<(), $crate::StateError> {
            $crate::KeyedStateSet::restore(&mut self.$table, snapshot)
        }

        fn names(&self, out: &mut Vec<String>) {
            $crate::KeyedStateSet::names(&self.$table, out)
        }

        fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
            $crate::KeyedStateSet::forget_removals(&mut self.$table, confirmed_epoch)
        }

        #[cfg(feature = "rocksdb")]
        fn use_lsm(
            &mut self,
            store: &std::sync::Arc<$crate::lsm::LsmStore>,
        ) -> Result<(), $crate::StateError> {
            $crate::KeyedStateSet::use_lsm(&mut self.$table, store)
        }

        fn maintain(&mut self) -> Result<(), $crate::StateError> {
            $crate::KeyedStateSet::maintain(&mut self.$table)
        }

        fn advance_time(&mut self, now_ms: u64) {
            $crate::KeyedStateSet::advance_time(&mut self.$table, now_ms)
        }

        #[cfg(feature = "rocksdb")]
        fn prefetch(&mut self, keys: &[$crate::CurrentKey<'_, K>]) {
            $crate::KeyedStateSet::prefetch(&mut self.$table, keys)
        }

        #[cfg(feature = "rocksdb")]
        fn compaction_filters(&self, out: &mut Vec<(String, $crate::TtlCompaction)>) {
            $crate::KeyedStateSet::compaction_filters(&self.$table, out)
        }
    };
}
pub(crate) use forward_to_table;

impl<K: Key> KeyedStateSet<K> for () {
    fn init(&mut self, _max_parallelism: u32, _range: KeyGroupRange) {}
    fn snapshot(&mut self, _out: &mut Vec<Box<dyn FrozenTable>>) {}
    fn restore(&mut self, _snapshot: &KeyedSnapshotReader) -> Result<(), StateError> {
        Ok(())
    }
    fn names(&self, _out: &mut Vec<String>) {}
    fn forget_removals(&mut self, _confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {}
    #[cfg(feature = "rocksdb")]
    fn use_lsm(&mut self, _store: &std::sync::Arc<crate::lsm::LsmStore>) -> Result<(), StateError> {
        Ok(())
    }
}

macro_rules! tuple_state_set {
    ($($name:ident . $index:tt),+) => {
        impl<K: Key, $($name: KeyedStateSet<K>),+> KeyedStateSet<K> for ($($name,)+) {
            fn init(&mut self, max_parallelism: u32, range: KeyGroupRange) {
                $(self.$index.init(max_parallelism, range);)+
            }
            fn snapshot(&mut self, out: &mut Vec<Box<dyn FrozenTable>>) {
                $(self.$index.snapshot(out);)+
            }
            fn restore(&mut self, snapshot: &KeyedSnapshotReader) -> Result<(), StateError> {
                $(self.$index.restore(snapshot)?;)+
                Ok(())
            }
            fn names(&self, out: &mut Vec<String>) {
                $(self.$index.names(out);)+
            }
            fn forget_removals(&mut self, confirmed_epoch: &dyn Fn(&str) -> Option<u64>) {
                $(self.$index.forget_removals(confirmed_epoch);)+
            }
            #[cfg(feature = "rocksdb")]
            fn use_lsm(&mut self, store: &std::sync::Arc<crate::lsm::LsmStore>) -> Result<(), StateError> {
                $(self.$index.use_lsm(store)?;)+
                Ok(())
            }
            fn maintain(&mut self) -> Result<(), StateError> {
                $(self.$index.maintain()?;)+
                Ok(())
            }
            fn advance_time(&mut self, now_ms: u64) {
                $(self.$index.advance_time(now_ms);)+
            }
            #[cfg(feature = "rocksdb")]
            fn prefetch(&mut self, keys: &[crate::CurrentKey<'_, K>]) {
                $(self.$index.prefetch(keys);)+
            }
            #[cfg(feature = "rocksdb")]
            fn compaction_filters(&self, out: &mut Vec<(String, crate::expiry::TtlCompaction)>) {
                $(self.$index.compaction_filters(out);)+
            }
        }
    };
}

tuple_state_set!(A.0);
tuple_state_set!(A.0, B.1);
tuple_state_set!(A.0, B.1, C.2);
tuple_state_set!(A.0, B.1, C.2, D.3);
tuple_state_set!(A.0, B.1, C.2, D.3, E.4);
tuple_state_set!(A.0, B.1, C.2, D.3, E.4, F.5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ListState, MapState, ValueState};

    #[test]
    fn duplicate_table_names_are_reported_by_name() {
        let set = (
            ValueState::<u64, u64>::new("a"),
            (
                ListState::<u64, u64>::new("b"),
                MapState::<u64, u8, u8>::new("a"),
            ),
        );
        let err = set.check_names().unwrap_err();
        assert!(
            matches!(err, StateError::DuplicateTable { ref name } if name == "a"),
            "{err}"
        );
    }

    #[test]
    fn a_tuple_snapshots_its_tables_in_declaration_order() {
        let mut set = (
            ValueState::<u64, u64>::new("a"),
            ListState::<u64, u64>::new("b"),
            MapState::<u64, u8, u8>::new("c"),
            (),
        );
        set.check_names().unwrap();
        set.init(4, KeyGroupRange::new(1, 3));
        let mut frozen = Vec::new();
        set.snapshot(&mut frozen);
        let names: Vec<&str> = frozen.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(frozen
            .iter()
            .all(|t| t.key_groups() == KeyGroupRange::new(1, 3)));
    }

    #[test]
    fn restoring_before_init_is_an_error() {
        let mut set = ValueState::<u64, u64>::new("a");
        let err = set.restore(&KeyedSnapshotReader::default()).unwrap_err();
        assert!(matches!(err, StateError::NotInitialised { .. }), "{err}");
    }
}
