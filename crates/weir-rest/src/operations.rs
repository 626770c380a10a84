//! Triggered operations — a checkpoint, a savepoint, a stop with savepoint — by trigger id.
//!
//! Flink answers a trigger with a 32-hex `request-id` and lets the caller poll the operation's
//! status under it; a caller may also bring its own `triggerId` to make a retried request
//! idempotent. Checkpoint and savepoint operations live in separate namespaces, as in Flink
//! (a savepoint's status is polled under `/savepoints/`, a checkpoint's under
//! `/checkpoints/`). The registry maps trigger ids to the job handle's request ids and
//! remembers which finished operations were reported, so that a stopping job can wait for its
//! caller to see the outcome before the process exits.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use weir_checkpoint::RequestId;

use crate::ids::TriggerId;

/// Operations remembered at most; the oldest are forgotten first.
pub const MAX_OPERATIONS: usize = 1024;

/// What was triggered.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum OperationKind {
    Checkpoint,
    Savepoint,
    StopWithSavepoint,
}

impl OperationKind {
    fn namespace(self) -> Namespace {
        match self {
            OperationKind::Checkpoint => Namespace::Checkpoints,
            OperationKind::Savepoint | OperationKind::StopWithSavepoint => Namespace::Savepoints,
        }
    }
}

/// Where an operation's status is polled.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Namespace {
    Checkpoints,
    Savepoints,
}

#[derive(Clone, Copy, Debug)]
struct Operation {
    kind: OperationKind,
    request: RequestId,
    reported_final: bool,
}

/// The registry of triggered operations.
#[derive(Default)]
pub struct Operations {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    by_id: HashMap<(Namespace, TriggerId), Operation>,
    // Invariant: holds exactly the keys of `by_id`, oldest first.
    order: VecDeque<(Namespace, TriggerId)>,
}

/// What [`Operations::register`] decided.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Registered {
    /// A new operation: trigger it.
    New,
    /// The trigger id is already known for the same kind of operation: answer with it again.
    Existing(RequestId),
    /// The trigger id is taken by another kind of operation.
    Conflict(OperationKind),
}

impl Operations {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Every update is a few map operations that cannot leave the registry half-changed.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks whether `id` is new for `kind`; a known id is answered, not triggered again.
    pub fn check(&self, id: TriggerId, kind: OperationKind) -> Registered {
        match self.lock().by_id.get(&(kind.namespace(), id)) {
            None => Registered::New,
            Some(op) if op.kind == kind => Registered::Existing(op.request),
            Some(op) => Registered::Conflict(op.kind),
        }
    }

    /// Remembers a triggered operation.
    pub fn insert(&self, id: TriggerId, kind: OperationKind, request: RequestId) {
        let mut reg = self.lock();
        let key = (kind.namespace(), id);
        if reg
            .by_id
            .insert(
                key,
                Operation {
                    kind,
                    request,
                    reported_final: false,
                },
            )
            .is_none()
        {
            reg.order.push_back(key);
        }
        while reg.order.len() > MAX_OPERATIONS {
            if let Some(old) = reg.order.pop_front() {
                reg.by_id.remove(&old);
            }
        }
    }

    /// The operation polled under `namespace` with `id`.
    pub fn find(&self, namespace: Namespace, id: TriggerId) -> Option<(OperationKind, RequestId)> {
        self.lock()
            .by_id
            .get(&(namespace, id))
            .map(|op| (op.kind, op.request))
    }

    /// Records that a caller has seen the final outcome of the operation.
    pub fn mark_reported(&self, namespace: Namespace, id: TriggerId) {
        if let Some(op) = self.lock().by_id.get_mut(&(namespace, id)) {
            op.reported_final = true;
        }
    }

    /// Every remembered operation: kind and request id.
    pub fn all(&self) -> Vec<(OperationKind, RequestId)> {
        self.lock()
            .by_id
            .values()
            .map(|op| (op.kind, op.request))
            .collect()
    }

    /// Request ids of operations whose final outcome nobody has fetched yet.
    pub fn unreported(&self) -> Vec<RequestId> {
        self.lock()
            .by_id
            .values()
            .filter(|op| !op.reported_final)
            .map(|op| op.request)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_trigger_id_is_answered_again_not_triggered_twice() {
        let ops = Operations::default();
        let id = TriggerId(7);
        assert_eq!(ops.check(id, OperationKind::Savepoint), Registered::New);
        ops.insert(id, OperationKind::Savepoint, 3);
        assert_eq!(
            ops.check(id, OperationKind::Savepoint),
            Registered::Existing(3)
        );
        assert_eq!(
            ops.check(id, OperationKind::StopWithSavepoint),
            Registered::Conflict(OperationKind::Savepoint)
        );
        // Checkpoints are another namespace: the same id is free there.
        assert_eq!(ops.check(id, OperationKind::Checkpoint), Registered::New);
    }

    #[test]
    fn operations_are_found_only_in_their_namespace() {
        let ops = Operations::default();
        ops.insert(TriggerId(1), OperationKind::Checkpoint, 5);
        assert_eq!(
            ops.find(Namespace::Checkpoints, TriggerId(1)),
            Some((OperationKind::Checkpoint, 5))
        );
        assert_eq!(ops.find(Namespace::Savepoints, TriggerId(1)), None);
    }

    #[test]
    fn the_registry_is_bounded_and_forgets_the_oldest() {
        let ops = Operations::default();
        for i in 0..(MAX_OPERATIONS as u128 + 10) {
            ops.insert(TriggerId(i), OperationKind::Checkpoint, i as u64);
        }
        assert_eq!(ops.find(Namespace::Checkpoints, TriggerId(0)), None);
        assert!(ops
            .find(
                Namespace::Checkpoints,
                TriggerId(MAX_OPERATIONS as u128 + 9)
            )
            .is_some());
        assert_eq!(ops.unreported().len(), MAX_OPERATIONS);
    }

    #[test]
    fn reported_operations_are_no_longer_waited_for() {
        let ops = Operations::default();
        ops.insert(TriggerId(1), OperationKind::StopWithSavepoint, 9);
        assert_eq!(ops.unreported(), vec![9]);
        ops.mark_reported(Namespace::Savepoints, TriggerId(1));
        assert!(ops.unreported().is_empty());
    }
}
