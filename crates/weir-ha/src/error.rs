//! High-availability errors, each saying what was attempted and what to do about it.

use crate::FencingToken;
use weir_core::CheckpointId;
use weir_storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// ZooKeeper could not be reached, or the session is between connections; nothing was
    /// written. The same call succeeds again once ZooKeeper answers.
    #[error("ZooKeeper at {quorum} is unavailable, could not {operation}: {reason} (retry once ZooKeeper is reachable)")]
    Unavailable {
        quorum: String,
        operation: String,
        reason: String,
    },
    /// The connection broke after a write was sent: it may or may not have been applied.
    /// Whatever the write would have made obsolete must be kept until the next leader reads
    /// ZooKeeper again.
    #[error("lost ZooKeeper at {quorum} while trying to {operation}; it may or may not have been applied: {reason}")]
    OutcomeUnknown {
        quorum: String,
        operation: String,
        reason: String,
    },
    /// The writer is no longer the leader: its contender znode is gone, so ZooKeeper refused the
    /// write. Stop acting for the job; the current leader owns it.
    #[error("refused to {operation}: not the leader any more ({token} no longer exists; its session expired or closed, or it resigned)")]
    Fenced {
        operation: String,
        token: FencingToken,
    },
    /// ZooKeeper answered with an error that retrying will not fix (permissions, a bad path).
    #[error("ZooKeeper at {quorum} refused to {operation}: {reason}")]
    ZooKeeper {
        quorum: String,
        operation: String,
        reason: String,
    },
    /// A znode holds something Weir did not write; remove or repair it by hand.
    #[error("znode {path} is corrupt: {reason}")]
    CorruptZnode { path: String, reason: String },
    #[error("checkpoint id counter {path} is exhausted: no id after {last}")]
    CounterExhausted { path: String, last: CheckpointId },
    /// A pointer already exists for this checkpoint id, naming other metadata.
    #[error("checkpoint {checkpoint} is already registered at {path} with metadata {existing}, not {wanted}; ids must never be reused")]
    PointerConflict {
        checkpoint: CheckpointId,
        path: String,
        existing: String,
        wanted: String,
    },
    /// Checkpoint storage failed while recovering (not damage of one checkpoint, which is
    /// skipped: the storage itself could not be read).
    #[error("cannot read checkpoint {checkpoint} listed at {pointer}: {source}")]
    Storage {
        checkpoint: CheckpointId,
        pointer: String,
        source: StorageError,
    },
    /// ZooKeeper lists checkpoints but none can be restored: starting empty would silently
    /// lose the job's state.
    #[error("none of the {listed} checkpoints listed under {path} can be restored (first problem: {first_problem}); check that checkpoint storage ({storage}) is the one the job wrote to, or remove the pointers to start the job over")]
    NoRecoverableCheckpoint {
        path: String,
        listed: usize,
        storage: String,
        first_problem: String,
    },
    /// The handle was closed; open a new one.
    #[error("the ZooKeeper connection to {quorum} was closed, could not {operation}")]
    Closed { quorum: String, operation: String },
}

impl HaError {
    /// Whether a later attempt may succeed (ZooKeeper was unreachable), as opposed to a refusal.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HaError::Unavailable { .. } | HaError::OutcomeUnknown { .. }
        )
    }

    /// Whether the writer lost leadership.
    pub fn is_fenced(&self) -> bool {
        matches!(self, HaError::Fenced { .. })
    }
}
