//! The keyed-state plumbing every keyed operator of the runtime shares: opening its state
//! tables and timers (restored or fresh), taking the synchronous snapshot with its incremental
//! plan, and following checkpoint completion.

use std::sync::Arc;
use weir_core::{CheckpointId, Clock};
use weir_state::{IncrementalBase, Key, KeyedStateSet};

use crate::error::TaskError;
use crate::operator::{OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed::{complete, open_state, open_timers, restored_base};
use crate::timer_service::{check_reserved_names, TimerService};

/// The timers and incremental-checkpoint base of one keyed operator subtask, next to the
/// operator's own state tables.
pub struct KeyedBackend<K> {
    pub timers: TimerService<K>,
    base: IncrementalBase,
    pub max_parallelism: u32,
}

impl<K: Key> KeyedBackend<K> {
    /// Opens `state` (whose tables may be keyed by any key type in `K`'s key groups) and the
    /// timers, restoring both from `restored`.
    pub fn open<SK: Key, S: KeyedStateSet<SK>>(
        state: S,
        clock: Option<Arc<dyn Clock>>,
        ctx: &OperatorContext,
        restored: &RestoredState,
    ) -> Result<(KeyedBackend<K>, S), TaskError> {
        check_reserved_names(&state, &ctx.uid)?;
        let state = open_state(state, ctx, restored)?;
        let backend = KeyedBackend {
            timers: open_timers(clock, ctx, restored)?,
            base: restored_base(ctx, restored),
            max_parallelism: ctx.max_parallelism,
        };
        Ok((backend, state))
    }

    /// The synchronous snapshot of `state` and the timers, O(tables × key groups).
    pub fn snapshot<SK: Key, S: KeyedStateSet<SK>>(
        &mut self,
        checkpoint: CheckpointId,
        state: &mut S,
    ) -> OperatorSnapshot {
        let mut keyed = Vec::new();
        state.snapshot(&mut keyed);
        self.timers.snapshot(&mut keyed);
        let plan = self.base.plan(checkpoint.0, &keyed);
        OperatorSnapshot {
            keyed,
            operator: None,
            incremental: Some(plan),
        }
    }

    /// Checkpoint `checkpoint` completed: it may be the new incremental base, and the tables
    /// of `state` and the timers forget removals no later delta needs.
    pub fn complete<SK: Key, S: KeyedStateSet<SK>>(
        &mut self,
        checkpoint: CheckpointId,
        state: &mut S,
    ) {
        complete(&self.base, checkpoint, Some(state), Some(&mut self.timers));
    }

    pub fn abort(&mut self, checkpoint: CheckpointId) {
        self.base.abort(checkpoint.0);
    }
}
