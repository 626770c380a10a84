//! The queue of triggers waiting for their turn: savepoints first, then checkpoints (manual
//! ones and at most one periodic one) in arrival order.
//!
//! A trigger waits here while the limits forbid it (max-concurrent-checkpoints, min-pause) or
//! while another trigger's id is being allocated; the coordinator serves the head whenever a
//! checkpoint ends, an id arrives, or the pause is over.

use crate::events::RequestId;
use std::collections::VecDeque;
use weir_core::CheckpointKind;

/// At most this many triggers wait; more requests are refused rather than piling up without
/// bound behind a stuck checkpoint.
pub const MAX_QUEUED_TRIGGERS: usize = 1000;

/// One trigger, periodic or requested.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct QueuedTrigger {
    /// Echoed by `AllocateId` / `IdAllocated`: the request id, or a reserved periodic one.
    pub token: RequestId,
    /// The user's request; `None` for a periodic trigger.
    pub request: Option<RequestId>,
    pub kind: CheckpointKind,
}

impl QueuedTrigger {
    pub fn is_savepoint(&self) -> bool {
        self.kind.is_savepoint()
    }

    pub fn is_periodic(&self) -> bool {
        self.request.is_none()
    }
}

#[derive(Debug, Default)]
pub(crate) struct TriggerQueue {
    savepoints: VecDeque<QueuedTrigger>,
    checkpoints: VecDeque<QueuedTrigger>,
}

impl TriggerQueue {
    pub fn len(&self) -> usize {
        self.savepoints.len() + self.checkpoints.len()
    }

    pub fn is_full(&self) -> bool {
        self.len() >= MAX_QUEUED_TRIGGERS
    }

    pub fn has_periodic(&self) -> bool {
        self.checkpoints.iter().any(QueuedTrigger::is_periodic)
    }

    pub fn has_request(&self, request: RequestId) -> bool {
        self.savepoints
            .iter()
            .chain(self.checkpoints.iter())
            .any(|t| t.request == Some(request))
    }

    /// Appends a trigger behind those of its class.
    pub fn push(&mut self, trigger: QueuedTrigger) {
        self.class(trigger).push_back(trigger);
    }

    /// Puts a trigger back at the head of its class (its id came while it was not allowed).
    pub fn push_front(&mut self, trigger: QueuedTrigger) {
        self.class(trigger).push_front(trigger);
    }

    /// The trigger to serve next: savepoints go ahead of checkpoints.
    pub fn front(&self) -> Option<QueuedTrigger> {
        self.savepoints
            .front()
            .or(self.checkpoints.front())
            .copied()
    }

    pub fn pop_front(&mut self) -> Option<QueuedTrigger> {
        self.savepoints
            .pop_front()
            .or_else(|| self.checkpoints.pop_front())
    }

    pub fn drain(&mut self) -> Vec<QueuedTrigger> {
        self.savepoints
            .drain(..)
            .chain(self.checkpoints.drain(..))
            .collect()
    }

    fn class(&mut self, trigger: QueuedTrigger) -> &mut VecDeque<QueuedTrigger> {
        if trigger.is_savepoint() {
            &mut self.savepoints
        } else {
            &mut self.checkpoints
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(token: u64, request: Option<u64>, kind: CheckpointKind) -> QueuedTrigger {
        QueuedTrigger {
            token,
            request,
            kind,
        }
    }

    #[test]
    fn savepoints_are_served_ahead_of_queued_checkpoints() {
        let mut q = TriggerQueue::default();
        q.push(trigger(100, None, CheckpointKind::Checkpoint));
        q.push(trigger(1, Some(1), CheckpointKind::Checkpoint));
        q.push(trigger(2, Some(2), CheckpointKind::Savepoint));
        assert!(q.has_periodic() && q.has_request(1) && !q.has_request(3));
        let order: Vec<u64> = std::iter::from_fn(|| q.pop_front())
            .map(|t| t.token)
            .collect();
        assert_eq!(order, vec![2, 100, 1]);
    }

    #[test]
    fn a_trigger_put_back_is_served_first_in_its_class() {
        let mut q = TriggerQueue::default();
        q.push(trigger(1, Some(1), CheckpointKind::Checkpoint));
        q.push_front(trigger(2, Some(2), CheckpointKind::Checkpoint));
        assert_eq!(q.front().map(|t| t.token), Some(2));
        assert_eq!(q.drain().len(), 2);
        assert_eq!(q.len(), 0);
    }
}
