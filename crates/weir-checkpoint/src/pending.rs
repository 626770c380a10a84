//! A pending checkpoint: triggered, waiting for every subtask's acknowledgement, then for its
//! metadata to become durable.
//!
//! Acknowledgements are recorded by the subtask's dense index (the coordinator maps a
//! `SubtaskId` to it once, with a hash map), so recording one is O(1) and allocates nothing
//! beyond the state it keeps.

use crate::completed::CompletedCheckpoint;
use crate::events::RequestId;
use std::collections::BTreeMap;
use weir_core::{CheckpointId, CheckpointKind, JobId, StateHandle, SubtaskId, SubtaskState};

/// What became of one acknowledgement.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AckOutcome {
    Recorded,
    /// The subtask had acknowledged already; the new report is ignored.
    Duplicate,
}

/// A checkpoint in flight (Flink's `PendingCheckpoint`).
#[derive(Debug)]
pub struct PendingCheckpoint {
    id: CheckpointId,
    kind: CheckpointKind,
    request: Option<RequestId>,
    trigger_timestamp_ms: u64,
    // Invariant: `num_acked` is the number of `Some` entries in `states`; once `finalized` is
    // set every entry has been moved into it and `states` is empty.
    states: Vec<Option<SubtaskState>>,
    num_subtasks: usize,
    num_acked: usize,
    finalized: Option<CompletedCheckpoint>,
}

impl PendingCheckpoint {
    pub(crate) fn new(
        id: CheckpointId,
        kind: CheckpointKind,
        request: Option<RequestId>,
        trigger_timestamp_ms: u64,
        num_subtasks: usize,
    ) -> PendingCheckpoint {
        let mut states = Vec::with_capacity(num_subtasks);
        states.resize_with(num_subtasks, || None);
        PendingCheckpoint {
            id,
            kind,
            request,
            trigger_timestamp_ms,
            states,
            num_subtasks,
            num_acked: 0,
            finalized: None,
        }
    }

    pub fn id(&self) -> CheckpointId {
        self.id
    }

    pub fn kind(&self) -> CheckpointKind {
        self.kind
    }

    pub fn is_savepoint(&self) -> bool {
        self.kind.is_savepoint()
    }

    /// The trigger request this checkpoint serves; `None` for a periodic one.
    pub fn request(&self) -> Option<RequestId> {
        self.request
    }

    pub fn trigger_timestamp_ms(&self) -> u64 {
        self.trigger_timestamp_ms
    }

    pub fn num_acknowledged(&self) -> usize {
        self.num_acked
    }

    pub fn num_subtasks(&self) -> usize {
        self.num_subtasks
    }

    pub fn is_fully_acknowledged(&self) -> bool {
        self.num_acked == self.num_subtasks
    }

    /// Every acknowledgement is in and the metadata is being written.
    pub fn is_awaiting_metadata(&self) -> bool {
        self.finalized.is_some()
    }

    /// Whether subtask `index` has acknowledged.
    pub(crate) fn has_acknowledged(&self, index: usize) -> bool {
        self.finalized.is_some() || matches!(self.states.get(index), Some(Some(_)))
    }

    /// Records subtask `index`'s state. The caller guarantees `index < num_subtasks`.
    pub(crate) fn acknowledge(&mut self, index: usize, state: SubtaskState) -> AckOutcome {
        match self.states.get_mut(index) {
            Some(slot @ None) => {
                *slot = Some(state);
                self.num_acked += 1;
                AckOutcome::Recorded
            }
            // A second ack from the same subtask, or one after finalisation emptied `states`.
            _ => AckOutcome::Duplicate,
        }
    }

    /// Turns the acknowledged states into the completed checkpoint whose metadata is to be
    /// written, and keeps it until the write is confirmed. `subtasks[i]` is subtask `i`.
    pub(crate) fn finalize(
        &mut self,
        job: JobId,
        subtasks: &[SubtaskId],
        now_ms: u64,
    ) -> &CompletedCheckpoint {
        let states = std::mem::take(&mut self.states);
        let subtask_states: BTreeMap<SubtaskId, SubtaskState> = subtasks
            .iter()
            .zip(states)
            .filter_map(|(id, state)| state.map(|s| (*id, s)))
            .collect();
        self.finalized.insert(CompletedCheckpoint {
            job,
            id: self.id,
            kind: self.kind,
            trigger_timestamp_ms: self.trigger_timestamp_ms,
            completion_timestamp_ms: now_ms,
            subtask_states,
        })
    }

    /// The completed checkpoint, once finalised.
    pub(crate) fn finalized(&self) -> Option<&CompletedCheckpoint> {
        self.finalized.as_ref()
    }

    /// The completed checkpoint, once finalised.
    pub(crate) fn into_completed(self) -> Option<CompletedCheckpoint> {
        self.finalized
    }

    /// Every state handle acknowledged so far.
    pub(crate) fn handles(&self) -> Box<dyn Iterator<Item = &StateHandle> + '_> {
        match &self.finalized {
            Some(cp) => Box::new(cp.subtask_states.values().flat_map(|s| s.handles.iter())),
            None => Box::new(self.states.iter().flatten().flat_map(|s| s.handles.iter())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::OperatorId;

    #[test]
    fn a_pending_checkpoint_is_complete_when_every_subtask_acked_once() {
        let subtasks: Vec<SubtaskId> = (0..3).map(|i| SubtaskId::new(OperatorId(1), i)).collect();
        let mut p =
            PendingCheckpoint::new(CheckpointId(1), CheckpointKind::Checkpoint, None, 10, 3);
        assert_eq!(
            p.acknowledge(0, SubtaskState::default()),
            AckOutcome::Recorded
        );
        assert_eq!(
            p.acknowledge(0, SubtaskState::default()),
            AckOutcome::Duplicate
        );
        assert_eq!(
            p.acknowledge(2, SubtaskState::default()),
            AckOutcome::Recorded
        );
        assert!(!p.is_fully_acknowledged());
        assert_eq!(
            p.acknowledge(1, SubtaskState::default()),
            AckOutcome::Recorded
        );
        assert!(p.is_fully_acknowledged());
        let cp = p.finalize(JobId(9), &subtasks, 20);
        assert_eq!(cp.subtask_states.len(), 3);
        assert_eq!(cp.completion_timestamp_ms, 20);
        assert!(p.is_awaiting_metadata());
        assert_eq!(
            p.acknowledge(1, SubtaskState::default()),
            AckOutcome::Duplicate
        );
        assert!(p.has_acknowledged(0));
    }
}
