//! The RocksDB keyed state backend (`state.backend.type: rocksdb`): keyed state larger than
//! memory, behind the same [`ValueState`](crate::ValueState), [`MapState`](crate::MapState) and
//! [`ListState`](crate::ListState) API as the heap backend.
//!
//! # Layout
//!
//! One RocksDB instance per keyed operator subtask ([`LsmStore`]), in a directory of its own
//! under `state.backend.rocksdb.localdir`, removed when the subtask ends; one column family per
//! state table. A key is its key group (two bytes, big-endian) followed by the postcard bytes
//! of the key, so a key group's entries are one contiguous key range: a key group is read,
//! written or dropped as a range. A value is the entry as the snapshot format writes it (a
//! value, a list, a map), so a full snapshot copies bytes without decoding them. The write-ahead
//! log is off: durability comes from checkpoints, as in every Weir backend.
//!
//! # Two tiers
//!
//! Reads return references (`get(&self) -> Option<&V>`), so every table keeps an in-memory tier
//! in front of RocksDB ([`tier`]): the keys written since the tier was last spilled (*dirty*,
//! removals included), the keys written before the last snapshots but not yet in RocksDB
//! (*frozen*, shared with those snapshots), and the keys read from RocksDB (*cache*). Between
//! batches ([`KeyedStateSet::maintain`](crate::KeyedStateSet::maintain)) a tier over its share
//! of the memory budget spills: it writes its dirty keys to RocksDB in one batch and forgets
//! everything it holds.
//!
//! # Snapshots
//!
//! The synchronous phase moves every table's dirty keys into a snapshot's frozen set (a pointer
//! swap, whatever the size of the state) and joins the snapshot's [`Materialization`]. Later —
//! on a snapshot worker, or on the task before it spills, whichever comes first — the
//! materialization writes the frozen sets into RocksDB and takes a RocksDB checkpoint (hard
//! links to the immutable files). Until then the task writes nothing to RocksDB, so the
//! checkpoint holds exactly the state as of the barrier. The snapshot worker reads the key
//! groups from that checkpoint and writes them in Weir's snapshot format, the format the heap
//! backend writes and reads: a snapshot of either backend restores into the other, at any
//! parallelism.
//!
//! A RocksDB subtask restoring a native (incremental) checkpoint opens the files of the old
//! subtask sharing the most key groups with it in place ([`fetch_native`]); anything else it
//! restores (other old subtasks' key groups, full snapshots) is written into its database one
//! key group at a time.
//!
//! # Errors
//!
//! A RocksDB failure during a read cannot be returned by `get`: the tier remembers it, answers
//! as if the key were absent, and the next [`maintain`](crate::KeyedStateSet::maintain) or
//! snapshot of the operator returns it, which fails the task before any checkpoint can hold
//! the effects of the failed read.

mod frozen;
mod materialize;
pub mod native;
pub mod restore;
mod store;
pub(crate) mod tier;

pub use native::{LsmFiles, LsmSnapshot, Upload};
pub use restore::{fetch_native, read_native, NativeState};
pub use store::{LsmOptions, LsmStore};

#[cfg(test)]
mod tests;
