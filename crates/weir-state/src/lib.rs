//! Weir's keyed and operator state: key groups, the heap state backend, snapshots and restore.
//!
//! # Role in the flows
//!
//! **Processing.** A keyed operator declares its state as a [`KeyedStateSet`]: one or a tuple of
//! [`ValueState`], [`MapState`] and [`ListState`] tables. The runtime calls
//! [`KeyedStateSet::init`] with the subtask's [`KeyGroupRange`], computes each record's key group
//! once ([`key_group_of`] over the key's [`StableHash`]) and hands the operator a
//! [`CurrentKey`]. Every state access is then one hash lookup in that key group's map: no lock,
//! no dynamic dispatch, no allocation when the key exists.
//!
//! **Snapshot (flow 4).** On a barrier the task calls [`KeyedStateSet::snapshot`] — the
//! synchronous phase. Each table is one `Arc`'d map per key group, so freezing it clones
//! `range.len()` `Arc`s, whatever the number of keys; later writes copy a key group only if its
//! snapshot still shares it (copy-on-write). The frozen [`FrozenTable`]s go to an asynchronous
//! snapshot worker, which calls [`encode_keyed_snapshot`] to produce one self-describing byte
//! buffer; the storage layer (weir-storage) writes it, checksums the file and acknowledges with a
//! `StateHandle`. Per key group, [`FrozenTable::is_dirty`] and the snapshot epochs tell an
//! incremental checkpoint which key groups changed, and per-entry epochs let it write only the
//! changed entries: [`IncrementalBase`] plans which key groups a checkpoint reuses from the last
//! completed one, extends by a delta or writes in full, and [`encode_incremental`] writes them
//! as blobs of a shared data file chained by a per-subtask [`KeyedManifest`].
//!
//! **Recover (flow 7).** The runtime reads the handles for the operator's uid, decodes them
//! into a [`KeyedSnapshotReader`] (merging the snapshots of several old subtasks when the
//! parallelism changed), checks that they cover the new range, and calls
//! [`KeyedStateSet::restore`]: each table takes exactly the key groups inside its range. Because
//! the key group of a key never changes, this is also rescaling.
//!
//! **Time to live.** [`TtlValueState`], [`TtlMapState`] and [`TtlListState`] are the same
//! kinds of state whose values expire a [`StateTtlConfig`]'s time after their last write, with
//! Flink's update, visibility and cleanup choices (see [`ttl`]).
//!
//! **Operator state.** Non-keyed state, such as a source's read positions, is an
//! [`OperatorStateSnapshot`] of named byte lists per subtask; on restore,
//! [`redistribute_operator_state`] deals list state round-robin and gives union state to all.
//!
//! ```
//! use weir_state::*;
//!
//! // Processing: a subtask owning every key group counts words.
//! let mut counts = ValueState::<String, u64>::new("counts");
//! counts.init(DEFAULT_MAX_PARALLELISM, KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM));
//! for word in ["a", "b", "a"] {
//!     let word = word.to_string();
//!     let key = CurrentKey::new(&word, DEFAULT_MAX_PARALLELISM);
//!     *counts.get_or_insert_with(&key, || 0) += 1;
//! }
//!
//! // Snapshot: freeze on the task thread, encode on a worker.
//! let mut frozen = Vec::new();
//! counts.snapshot(&mut frozen);
//! let bytes = encode_keyed_snapshot(&frozen, KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM))?;
//!
//! // Rescale to two subtasks: each restores the key groups it now owns.
//! let reader = KeyedSnapshotReader::decode(&bytes)?;
//! let mut total = 0;
//! for index in 0..2 {
//!     let range = KeyGroupRange::for_subtask(DEFAULT_MAX_PARALLELISM, 2, index);
//!     reader.check_covers(range)?;
//!     let mut restored = ValueState::<String, u64>::new("counts");
//!     restored.init(DEFAULT_MAX_PARALLELISM, range);
//!     restored.restore(&reader)?;
//!     total += restored.iter().map(|(_, n)| n).sum::<u64>();
//! }
//! assert_eq!(total, 3);
//! # Ok::<(), StateError>(())
//! ```

mod chain;
mod encode_buffer;
mod entry_codec;
mod entry_table;
mod envelope;
mod error;
mod expiry;
mod frozen_table;
mod group;
pub mod incremental;
pub mod incremental_format;
mod key;
mod keyed_table;
mod list_state;
#[cfg(feature = "rocksdb")]
pub mod lsm;
mod lsm_manifest;
mod lsm_usage;
mod map_state;
pub mod operator_state;
pub mod snapshot_format;
mod snapshot_reader;
pub mod stable_hash;
mod state_set;
pub mod ttl;
mod value_state;

pub use chain::{Chain, ChainBlob, SharedStateFile};
pub use encode_buffer::EncodeBuffer;
pub use entry_codec::append as append_postcard;
pub use entry_codec::TableKind;
pub use error::StateError;
pub use expiry::TtlCompaction;
pub use frozen_table::FrozenTable;
pub use group::TOMBSTONE_EPOCHS;
pub use incremental::{GroupPlan, IncrementalBase, KeyedSnapshotPlan, TablePlan};
pub use incremental_format::{
    encode_incremental, encode_incremental_releasing, is_manifest, IncrementalEncoding,
    KeyedManifest,
};
pub use key::{CurrentKey, Key, Value};
pub use list_state::ListState;
pub use lsm_manifest::{is_lsm_manifest, LsmFile, LsmManifest};
pub use lsm_usage::LsmUsage;
pub use map_state::MapState;
pub use operator_state::{redistribute_operator_state, OperatorStateSnapshot};
pub use snapshot_format::encode_keyed_snapshot;
pub use snapshot_reader::{KeyGroupBlob, KeyedSnapshotReader};
pub use stable_hash::{
    combine_stable_hashes, key_group_for_hash, key_group_of, StableHash, DEFAULT_MAX_PARALLELISM,
};
pub use state_set::KeyedStateSet;
pub use ttl::{StateTtlConfig, TtlListState, TtlMapState, TtlUpdate, TtlValueState, TtlVisibility};
pub use value_state::ValueState;
pub use weir_core::key_group::{subtask_for_key_group, KeyGroupRange};
