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
    /// The channel state of an unaligned checkpoint: what a subtask's input channels held
    /// ahead of the barrier.
    Channels,
}

/// A pointer to one persisted piece of state: a file, or bytes kept inline.
///
/// `path` is relative to the job's checkpoint root and uses `/` as separator, so a checkpoint
/// directory can be moved without rewriting its metadata. Private state smaller than
/// `execution.checkpointing.data-inline-threshold` is not written to a file of its own: its
/// bytes travel in the handle (`inline`) into the checkpoint's `_metadata`, and `path` is only
/// its name (the file it would have been), for messages and tools.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct StateHandle {
    pub path: String,
    /// Size of the state in bytes.
    pub size: u64,
    /// CRC-32C of the state's bytes, verified on every read.
    pub checksum: u32,
    pub kind: HandleKind,
    /// A shared file may be referenced by several checkpoints (incremental checkpoints); it is
    /// deleted only when no retained checkpoint references it. A private file belongs to the
    /// one checkpoint whose directory holds it. Inline state is always private.
    pub shared: bool,
    /// The state itself when it is kept in the metadata instead of a file.
    pub inline: Option<Vec<u8>>,
}

impl StateHandle {
    /// Whether the state has a file of its own (it is not inline).
    pub fn is_file(&self) -> bool {
        self.inline.is_none()
    }
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
