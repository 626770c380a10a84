//! Where the key groups of incremental checkpoints lie: shared files of keyed state, and per key
//! group a *chain* of blobs in them, the full contents first, then deltas.
//!
//! [`IncrementalBase`](crate::IncrementalBase) plans with chains, the incremental format writes
//! them and [`KeyedSnapshotReader::key_group_chain`](crate::KeyedSnapshotReader::key_group_chain)
//! recovers them from a restored snapshot.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A shared file of keyed state, as incremental snapshots reference it.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct SharedStateFile {
    /// Relative to the job's checkpoint root, `/`-separated (as in a `StateHandle`).
    pub path: String,
    pub size: u64,
    /// CRC-32C of the whole file.
    pub checksum: u32,
}

/// One blob of a key group's chain: where it lies in which shared file.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ChainBlob {
    pub file: Arc<SharedStateFile>,
    pub offset: u64,
    pub len: u64,
    /// A delta on top of the blobs before it; the first blob of a chain is never one.
    pub delta: bool,
}

/// A key group's chain: full contents, then deltas.
pub type Chain = Arc<[ChainBlob]>;
