//! A completed checkpoint: every subtask's persisted state for one checkpoint id, whose
//! metadata is (or is being made) durable.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use weir_core::{CheckpointId, CheckpointKind, JobId, SubtaskId, SubtaskState};

/// Everything needed to restore a job from one checkpoint; this is what `_metadata` holds.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CompletedCheckpoint {
    pub job: JobId,
    pub id: CheckpointId,
    pub kind: CheckpointKind,
    pub trigger_timestamp_ms: u64,
    /// When the last acknowledgement arrived and the metadata was assembled. The checkpoint
    /// counts as completed for min-pause only once this metadata is durable, a little later.
    pub completion_timestamp_ms: u64,
    pub subtask_states: BTreeMap<SubtaskId, SubtaskState>,
}

impl CompletedCheckpoint {
    /// Bytes of all state the checkpoint references (its full size).
    pub fn state_size(&self) -> u64 {
        self.subtask_states.values().map(|s| s.state_size).sum()
    }

    /// Bytes this checkpoint wrote itself (its incremental size).
    pub fn persisted_size(&self) -> u64 {
        self.subtask_states.values().map(|s| s.persisted_size).sum()
    }

    /// The shared files the checkpoint references, each path once, in order.
    pub fn shared_paths(&self) -> impl Iterator<Item = &str> {
        let distinct: BTreeSet<&str> = self
            .subtask_states
            .values()
            .flat_map(|s| s.handles.iter())
            .filter(|h| h.shared)
            .map(|h| h.path.as_str())
            .collect();
        distinct.into_iter()
    }

    pub fn is_savepoint(&self) -> bool {
        self.kind.is_savepoint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{HandleKind, OperatorId, StateHandle};

    fn handle(path: &str, size: u64, shared: bool) -> StateHandle {
        StateHandle {
            path: path.into(),
            size,
            checksum: 0,
            kind: HandleKind::Operator,
            shared,
            inline: None,
        }
    }

    #[test]
    fn sizes_add_up_and_shared_paths_are_listed_once() {
        let op = OperatorId(7);
        let mut states = BTreeMap::new();
        let mut a = SubtaskState::from_handles(vec![
            handle("shared/x", 10, true),
            handle("chk-1/a", 5, false),
        ]);
        a.persisted_size = 5;
        states.insert(SubtaskId::new(op, 0), a);
        states.insert(
            SubtaskId::new(op, 1),
            SubtaskState::from_handles(vec![handle("shared/x", 10, true)]),
        );
        let cp = CompletedCheckpoint {
            job: JobId(1),
            id: CheckpointId(1),
            kind: CheckpointKind::Checkpoint,
            trigger_timestamp_ms: 0,
            completion_timestamp_ms: 1,
            subtask_states: states,
        };
        assert_eq!(cp.state_size(), 25);
        assert_eq!(cp.persisted_size(), 15);
        assert_eq!(cp.shared_paths().collect::<Vec<_>>(), vec!["shared/x"]);
    }
}
