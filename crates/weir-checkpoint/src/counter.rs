//! Checkpoint id counters: where ascending checkpoint ids come from.
//!
//! The coordinator never calls a counter itself: it asks its driver with
//! [`crate::Action::AllocateId`], because a highly available counter is a remote call that must
//! not run inside the coordinator's state machine. The standalone counter lives in memory and is
//! seeded from the highest id found in checkpoint storage, so ids keep ascending across
//! restarts and `--resume`.
//!
//! ```
//! use weir_checkpoint::{CheckpointIdCounter, StandaloneCheckpointIdCounter};
//! use weir_core::CheckpointId;
//! let mut counter = StandaloneCheckpointIdCounter::starting_after(CheckpointId(41));
//! assert_eq!(counter.get_and_increment().unwrap(), CheckpointId(42));
//! assert_eq!(counter.current(), CheckpointId(43));
//! ```

use weir_core::CheckpointId;

/// Why no id could be handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("checkpoint id counter exhausted: no id after {0}")]
    Exhausted(CheckpointId),
    /// A remote counter (ZooKeeper, later) could not be reached or updated.
    #[error("checkpoint id counter unavailable: {0}")]
    Unavailable(String),
}

/// A source of strictly ascending checkpoint ids (Flink's `CheckpointIDCounter`).
pub trait CheckpointIdCounter: Send {
    /// Returns the next id and moves past it; no id is ever returned twice.
    fn get_and_increment(&mut self) -> Result<CheckpointId, CounterError>;
    /// The id the next [`CheckpointIdCounter::get_and_increment`] will return.
    fn current(&self) -> CheckpointId;
}

/// An in-memory counter for a single job manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandaloneCheckpointIdCounter {
    next: u64,
}

impl StandaloneCheckpointIdCounter {
    /// A counter for a job with no checkpoints yet: the first id is 1.
    pub fn new() -> StandaloneCheckpointIdCounter {
        StandaloneCheckpointIdCounter { next: 1 }
    }

    /// A counter whose first id is `max_id_found + 1`, for a job resumed from storage that
    /// holds checkpoints up to `max_id_found`.
    pub fn starting_after(max_id_found: CheckpointId) -> StandaloneCheckpointIdCounter {
        StandaloneCheckpointIdCounter {
            // u64::MAX as a seed leaves nothing to hand out; get_and_increment reports it.
            next: max_id_found.0.saturating_add(1),
        }
    }
}

impl Default for StandaloneCheckpointIdCounter {
    fn default() -> Self {
        StandaloneCheckpointIdCounter::new()
    }
}

impl CheckpointIdCounter for StandaloneCheckpointIdCounter {
    fn get_and_increment(&mut self) -> Result<CheckpointId, CounterError> {
        // Invariant: `next` only grows, so ids strictly ascend; the last id (u64::MAX) is
        // never handed out because nothing could follow it.
        if self.next == u64::MAX {
            return Err(CounterError::Exhausted(CheckpointId(self.next - 1)));
        }
        let id = CheckpointId(self.next);
        self.next += 1;
        Ok(id)
    }

    fn current(&self) -> CheckpointId {
        CheckpointId(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_counter_starts_at_one_and_ascends() {
        let mut c = StandaloneCheckpointIdCounter::new();
        let ids: Vec<_> = (0..3).map(|_| c.get_and_increment().unwrap()).collect();
        assert_eq!(ids, vec![CheckpointId(1), CheckpointId(2), CheckpointId(3)]);
    }

    #[test]
    fn ids_ascend_after_restore_from_the_max_id_in_storage() {
        let mut c = StandaloneCheckpointIdCounter::starting_after(CheckpointId(17));
        assert_eq!(c.current(), CheckpointId(18));
        assert_eq!(c.get_and_increment().unwrap(), CheckpointId(18));
        assert_eq!(c.get_and_increment().unwrap(), CheckpointId(19));
    }

    #[test]
    fn an_exhausted_counter_is_an_error_not_a_wrap_around() {
        let mut c = StandaloneCheckpointIdCounter::starting_after(CheckpointId(u64::MAX - 2));
        assert_eq!(c.get_and_increment().unwrap(), CheckpointId(u64::MAX - 1));
        assert!(matches!(
            c.get_and_increment(),
            Err(CounterError::Exhausted(_))
        ));
        let mut c = StandaloneCheckpointIdCounter::starting_after(CheckpointId(u64::MAX));
        assert!(c.get_and_increment().is_err());
    }
}
