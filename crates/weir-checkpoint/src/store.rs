//! The completed checkpoint store: the newest `num_retained` completed checkpoints, and the
//! reference counts that decide when a shared file may be deleted.
//!
//! A shared file (incremental checkpoints) is referenced by every checkpoint that reuses it.
//! The store counts, per path, how many retained checkpoints reference it; evicting a
//! checkpoint returns its id (its own directory goes) and the shared paths whose count fell to
//! zero. Savepoints never enter the store: they are self-contained and live elsewhere.
//!
//! ```
//! use weir_checkpoint::{CompletedCheckpointStore, StandaloneCompletedCheckpointStore};
//! let store = StandaloneCompletedCheckpointStore::new(3);
//! assert!(store.latest().is_none());
//! ```

use crate::completed::CompletedCheckpoint;
use std::collections::HashMap;
use weir_core::CheckpointId;

/// What to delete after a checkpoint left the store: `chk-<checkpoint>`'s own directory and
/// these shared files, which no retained checkpoint references any more.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Discard {
    pub checkpoint: CheckpointId,
    pub shared_paths: Vec<String>,
}

/// A bounded store of the newest completed checkpoints (Flink's `CompletedCheckpointStore`).
/// The standalone implementation keeps them in memory; an HA one (later) also records them in
/// ZooKeeper so a new job manager finds them.
pub trait CompletedCheckpointStore: Send {
    /// Adds a completed checkpoint and evicts the oldest beyond the retention limit, returning
    /// what to delete for them. A store that keeps its records elsewhere (ZooKeeper) may
    /// refuse; then nothing changes, and the checkpoint does not complete.
    fn add(&mut self, checkpoint: CompletedCheckpoint) -> Result<Vec<Discard>, StoreError>;
    /// The newest retained checkpoint, the one to restore from.
    fn latest(&self) -> Option<&CompletedCheckpoint>;
    /// Every retained checkpoint, oldest first.
    fn all(&self) -> &[CompletedCheckpoint];
    /// Whether some retained checkpoint references this shared file.
    fn is_shared_path_referenced(&self, path: &str) -> bool;
    /// Ends the store's life. With `discard_all` (a job that ended for good and keeps no
    /// checkpoints) every checkpoint is removed and returned for deletion; otherwise they stay
    /// on disk for `--resume` and nothing is returned.
    fn shutdown(&mut self, discard_all: bool) -> Vec<Discard>;
}

/// Why a store did not record a checkpoint, and what that means for its files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another coordinator leads the job now and the store refused the write outright: the
    /// checkpoint is certainly not recorded, so nobody may restore from it. Its metadata must
    /// go, or a sweep of checkpoint storage (a `--resume` without HA) would take this stale
    /// leader's fork for a completed checkpoint.
    #[error("{0}")]
    Fenced(String),
    /// Not recorded as far as this coordinator knows, but the write may have been applied
    /// (the connection broke after it was sent) or may be retried: a new leader may restore
    /// from the checkpoint, so its files stay.
    #[error("{0}")]
    NotRecorded(String),
}

/// The in-memory store of a single job manager.
#[derive(Debug, Default)]
pub struct StandaloneCompletedCheckpointStore {
    num_retained: usize,
    // Invariant: sorted by ascending id, no id twice.
    checkpoints: Vec<CompletedCheckpoint>,
    // Invariant: for every path, the number of retained checkpoints that reference it (each
    // checkpoint counted once however many handles name the path); no zero entries.
    shared_refs: HashMap<String, u32>,
}

impl StandaloneCompletedCheckpointStore {
    /// A store keeping the newest `num_retained` checkpoints (at least one).
    pub fn new(num_retained: u32) -> StandaloneCompletedCheckpointStore {
        StandaloneCompletedCheckpointStore {
            num_retained: num_retained.max(1) as usize,
            checkpoints: Vec::new(),
            shared_refs: HashMap::new(),
        }
    }

    /// How many retained checkpoints reference this shared file.
    pub fn shared_ref_count(&self, path: &str) -> u32 {
        self.shared_refs.get(path).copied().unwrap_or(0)
    }

    /// Removes `checkpoint`'s references and says which shared paths nobody references now.
    fn release(&mut self, checkpoint: &CompletedCheckpoint) -> Discard {
        let mut shared_paths = Vec::new();
        for path in checkpoint.shared_paths() {
            if let Some(count) = self.shared_refs.get_mut(path) {
                *count -= 1;
                if *count == 0 {
                    self.shared_refs.remove(path);
                    shared_paths.push(path.to_string());
                }
            }
        }
        Discard {
            checkpoint: checkpoint.id,
            shared_paths,
        }
    }
}

impl StandaloneCompletedCheckpointStore {
    /// [`CompletedCheckpointStore::add`], which cannot fail in memory.
    pub fn insert(&mut self, checkpoint: CompletedCheckpoint) -> Vec<Discard> {
        let position = match self
            .checkpoints
            .binary_search_by_key(&checkpoint.id, |c| c.id)
        {
            Ok(_) => {
                // The same checkpoint twice (a repeated restore): its references are counted
                // already, and deleting anything would break the one we keep.
                tracing::warn!(checkpoint = %checkpoint.id, "checkpoint already in the store, ignored");
                return Vec::new();
            }
            Err(position) => position,
        };
        for path in checkpoint.shared_paths() {
            match self.shared_refs.get_mut(path) {
                Some(count) => *count += 1,
                None => {
                    self.shared_refs.insert(path.to_string(), 1);
                }
            }
        }
        self.checkpoints.insert(position, checkpoint);
        let excess = self.checkpoints.len().saturating_sub(self.num_retained);
        let evicted: Vec<CompletedCheckpoint> = self.checkpoints.drain(..excess).collect();
        evicted.iter().map(|cp| self.release(cp)).collect()
    }
}

impl CompletedCheckpointStore for StandaloneCompletedCheckpointStore {
    fn add(&mut self, checkpoint: CompletedCheckpoint) -> Result<Vec<Discard>, StoreError> {
        Ok(self.insert(checkpoint))
    }

    fn latest(&self) -> Option<&CompletedCheckpoint> {
        self.checkpoints.last()
    }

    fn all(&self) -> &[CompletedCheckpoint] {
        &self.checkpoints
    }

    fn is_shared_path_referenced(&self, path: &str) -> bool {
        self.shared_refs.contains_key(path)
    }

    fn shutdown(&mut self, discard_all: bool) -> Vec<Discard> {
        if !discard_all {
            return Vec::new();
        }
        let all = std::mem::take(&mut self.checkpoints);
        all.iter().map(|cp| self.release(cp)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_core::{
        CheckpointKind, HandleKind, JobId, OperatorId, StateHandle, SubtaskId, SubtaskState,
    };

    fn checkpoint(id: u64, shared: &[&str]) -> CompletedCheckpoint {
        let mut handles: Vec<StateHandle> = shared
            .iter()
            .map(|p| StateHandle {
                path: p.to_string(),
                size: 1,
                checksum: 0,
                kind: HandleKind::Operator,
                shared: true,
                inline: None,
            })
            .collect();
        handles.push(StateHandle {
            path: format!("chk-{id}/private"),
            size: 1,
            checksum: 0,
            kind: HandleKind::Operator,
            shared: false,
            inline: None,
        });
        let mut states = BTreeMap::new();
        states.insert(
            SubtaskId::new(OperatorId(1), 0),
            SubtaskState::from_handles(handles),
        );
        CompletedCheckpoint {
            job: JobId(1),
            id: CheckpointId(id),
            kind: CheckpointKind::Checkpoint,
            trigger_timestamp_ms: id,
            completion_timestamp_ms: id,
            subtask_states: states,
        }
    }

    #[test]
    fn the_store_keeps_the_newest_num_retained_and_evicts_the_oldest() {
        let mut store = StandaloneCompletedCheckpointStore::new(2);
        assert!(store.insert(checkpoint(1, &[])).is_empty());
        assert!(store.insert(checkpoint(2, &[])).is_empty());
        let discards = store.insert(checkpoint(3, &[]));
        assert_eq!(
            discards,
            vec![Discard {
                checkpoint: CheckpointId(1),
                shared_paths: vec![]
            }]
        );
        let ids: Vec<u64> = store.all().iter().map(|c| c.id.0).collect();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(store.latest().map(|c| c.id), Some(CheckpointId(3)));
    }

    #[test]
    fn a_shared_file_referenced_by_two_retained_checkpoints_survives_eviction_of_one() {
        let mut store = StandaloneCompletedCheckpointStore::new(2);
        store.insert(checkpoint(1, &["shared/a", "shared/b"]));
        store.insert(checkpoint(2, &["shared/a", "shared/c"]));
        assert_eq!(store.shared_ref_count("shared/a"), 2);
        let discards = store.insert(checkpoint(3, &["shared/c"]));
        // Checkpoint 1 goes; "a" is still used by 2, "b" was only 1's.
        assert_eq!(discards.len(), 1);
        assert_eq!(discards[0].checkpoint, CheckpointId(1));
        assert_eq!(discards[0].shared_paths, vec!["shared/b".to_string()]);
        assert!(store.is_shared_path_referenced("shared/a"));
        let discards = store.insert(checkpoint(4, &[]));
        assert_eq!(discards[0].shared_paths, vec!["shared/a".to_string()]);
        assert_eq!(store.shared_ref_count("shared/c"), 1);
    }

    #[test]
    fn adding_the_same_checkpoint_twice_keeps_one_copy_and_one_reference() {
        let mut store = StandaloneCompletedCheckpointStore::new(3);
        store.insert(checkpoint(5, &["shared/a"]));
        assert!(store.insert(checkpoint(5, &["shared/a"])).is_empty());
        assert_eq!(store.all().len(), 1);
        assert_eq!(store.shared_ref_count("shared/a"), 1);
    }

    #[test]
    fn shutdown_keeps_checkpoints_for_resume_unless_asked_to_discard_all() {
        let mut store = StandaloneCompletedCheckpointStore::new(3);
        store.insert(checkpoint(1, &["shared/a"]));
        store.insert(checkpoint(2, &["shared/a"]));
        assert!(store.shutdown(false).is_empty());
        assert_eq!(store.all().len(), 2);
        let discards = store.shutdown(true);
        assert_eq!(discards.len(), 2);
        assert!(discards[0].shared_paths.is_empty());
        assert_eq!(discards[1].shared_paths, vec!["shared/a".to_string()]);
        assert!(store.latest().is_none());
    }
}
