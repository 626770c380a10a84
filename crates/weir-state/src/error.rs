//! Errors of keyed and operator state: encoding, decoding and restoring snapshots.

use crate::entry_codec::TableKind;
use weir_core::KeyGroupRange;

/// What went wrong while snapshotting or restoring state. Every message names the table and key
/// group involved where there is one, so that a user can tell which operator state is affected.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The bytes are not a valid snapshot: bad magic, checksum mismatch, truncated, or an index
    /// pointing outside the buffer. The storage layer should fall back to an older checkpoint.
    #[error("state snapshot is corrupt: {0}")]
    Corrupt(String),
    /// The snapshot was written by a newer (or unknown) version of Weir's state format.
    #[error("state snapshot has format version {found}, but this build of Weir reads only version {supported}; restore it with the Weir version that wrote it")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// A value could not be serialised (for example a `serde` implementation returned an error).
    #[error("cannot encode state: {0}")]
    Encode(String),
    /// The bytes of one key group of one table could not be decoded into its key and value
    /// types: usually the operator's state types changed since the snapshot was taken.
    #[error("cannot decode state table '{table}', key group {key_group}: {reason}; did the key or value type of this state change since the snapshot was taken?")]
    Decode {
        table: String,
        key_group: u32,
        reason: String,
    },
    /// A table was restored as a different kind of state than it was written as.
    #[error("state table '{table}' was written as {found} state but is now declared as {expected} state; keep the kind or give the new state a new name")]
    KindMismatch {
        table: String,
        expected: TableKind,
        found: TableKind,
    },
    /// The snapshot was written with a different number of key groups.
    #[error("keyed state was written with max parallelism {snapshot} but the job now uses {expected}; max parallelism cannot change without discarding keyed state")]
    MaxParallelismMismatch { snapshot: u32, expected: u32 },
    /// Two tables of one operator share a name.
    #[error("two keyed state tables of one operator are both named '{name}'; give each state a unique name")]
    DuplicateTable { name: String },
    /// Two merged snapshots both hold the same key group: they were not taken by distinct
    /// subtasks of one checkpoint.
    #[error("key group {key_group} appears in more than one of the merged keyed state snapshots; restore from the subtask snapshots of a single checkpoint, each once")]
    OverlappingSnapshots { key_group: u32 },
    /// The snapshots given to a restore do not cover every key group the subtask owns.
    #[error("the keyed state snapshots do not cover key group {key_group} of this subtask's range {range}; some subtask snapshots of the checkpoint are missing")]
    MissingKeyGroup {
        key_group: u32,
        range: KeyGroupRange,
    },
    /// The RocksDB state backend failed: its files could not be made, read or written.
    #[error("RocksDB state backend: {0}")]
    Backend(String),
    /// A state table was used before the runtime called `init` on it.
    #[error("state table '{table}' was used before it was initialised with its key-group range")]
    NotInitialised { table: String },
}
