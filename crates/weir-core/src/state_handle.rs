//! Pointers to persisted state, as carried in acknowledgements and checkpoint metadata.

use crate::key_group::KeyGroupRange;
use serde::{Deserialize, Serialize};

/// What a persisted file holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum HandleKind {
    /// Keyed state of the given key groups.
    Keyed { key_groups: KeyGroupRange },
    /// Non-keyed operator state (for example a source's read position).
    Operator,
}

/// A pointer to one persisted file of state.
///
/// `path` is relative to the job's checkpoint root and uses `/` as separator, so a checkpoint
/// directory can be moved without rewriting its metadata.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct StateHandle {
    pub path: String,
    /// Size of the file in bytes.
    pub size: u64,
    /// CRC-32C of the file's bytes, verified on every read.
    pub checksum: u32,
    pub kind: HandleKind,
    /// A shared file may be referenced by several checkpoints (incremental checkpoints); it is
    /// deleted only when no retained checkpoint references it. A private file belongs to the
    /// one checkpoint whose directory holds it.
    pub shared: bool,
}

/// Everything one subtask persisted for one checkpoint.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct SubtaskState {
    pub handles: Vec<StateHandle>,
    /// Bytes of all state this subtask's snapshot references (full size).
    pub state_size: u64,
    /// Bytes this checkpoint newly wrote for this subtask (incremental size).
    pub persisted_size: u64,
}

impl SubtaskState {
    pub fn from_handles(handles: Vec<StateHandle>) -> SubtaskState {
        let size = handles.iter().map(|h| h.size).sum();
        SubtaskState {
            handles,
            state_size: size,
            persisted_size: size,
        }
    }
}
