//! The operator contracts the task loops drive: sources and one-input operators (a two-input
//! operator is a one-input operator over [`Either`](crate::channel::Either)).

use std::sync::Arc;
use weir_core::config::StateBackendConfig;
use weir_core::{CheckpointId, KeyGroupRange};
use weir_state::{FrozenTable, KeyedSnapshotPlan, KeyedSnapshotReader, OperatorStateSnapshot};

use crate::error::TaskError;
use crate::output::Output;

/// What a source's own event time asks its task loop to emit (see
/// [`SourceFunction::event_time`] and the runtime's `split_watermarks` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceEventTime {
    /// Nothing new (or the source makes no event time of its own).
    Unchanged,
    /// The subtask's watermark; the output drops one that does not advance.
    Watermark(i64),
    /// Every split is idle: the subtask is idle until its next record.
    Idle,
}

/// Where an operator instance runs.
#[derive(Clone, Debug)]
pub struct OperatorContext {
    pub uid: String,
    pub name: String,
    pub index: u32,
    pub parallelism: u32,
    pub max_parallelism: u32,
    /// Key groups this subtask owns (meaningful for keyed operators).
    pub key_groups: KeyGroupRange,
    /// Where keyed operators keep their state.
    pub state_backend: StateBackendConfig,
    /// The subtask's metrics (a keyed operator reports its state backend's memory there).
    pub metrics: Arc<crate::metrics::SubtaskMetrics>,
}

/// The synchronous part of a snapshot: frozen views, cheap to take, serialised later on a
/// snapshot worker.
#[derive(Default)]
pub struct OperatorSnapshot {
    pub keyed: Vec<Box<dyn FrozenTable>>,
    pub operator: Option<OperatorStateSnapshot>,
    /// For incremental checkpoints: which key groups of `keyed` to write, and which to reuse
    /// from the last completed checkpoint. `None` writes all of them. With `lsm`, it covers
    /// only the tables kept on the heap (the timers), in their order in `keyed`.
    pub incremental: Option<KeyedSnapshotPlan>,
    /// With the RocksDB backend, its snapshot: an incremental checkpoint uploads the
    /// database's new table files instead of writing its tables (which `keyed` also holds,
    /// for savepoints and full checkpoints).
    pub lsm: Option<LsmSnapshot>,
    /// With an unaligned checkpoint, the subtask's channel state: what its input channels held
    /// ahead of the barrier (see [`crate::channel_state`]).
    pub channels: Option<Vec<u8>>,
}

/// The RocksDB backend's snapshot of a subtask's tables.
#[cfg(feature = "rocksdb")]
pub type LsmSnapshot = weir_state::lsm::LsmSnapshot;
/// Without the `rocksdb` feature there is never one.
#[cfg(not(feature = "rocksdb"))]
pub type LsmSnapshot = std::convert::Infallible;

/// State handed to an operator when it opens after a restore.
#[derive(Default)]
pub struct RestoredState {
    pub keyed: Option<KeyedSnapshotReader>,
    pub operator: Option<OperatorStateSnapshot>,
    /// With the RocksDB backend: the database of the old subtask sharing the most key groups
    /// with this one, fetched to be opened in place and clipped to this subtask's key groups
    /// (its tables' entries are then not in `keyed`, which holds its timers and the state of
    /// the other old subtasks, read out). Taken by the keyed operator that opens it.
    #[cfg(feature = "rocksdb")]
    pub native: Option<weir_state::lsm::NativeState>,
    /// The channel state of an unaligned checkpoint, for the subtask's input gate.
    pub channels: Option<Vec<u8>>,
}

/// What a source's poll produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceStatus {
    /// Records were appended to the batch (possibly zero if it was cut short).
    Emitted,
    /// Nothing available right now; poll again soon.
    Idle,
    /// The source is bounded and has nothing more, ever.
    Exhausted,
}

/// A parallel source. Each subtask reads its own share and can rewind to a recorded position.
pub trait SourceFunction<T>: Send + 'static {
    /// Opens the source; `restored` holds the list-state elements recorded for this subtask by
    /// the checkpoint being restored, `None` on a fresh start.
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError>;
    /// Appends up to `max` records to `batch`.
    fn poll_batch(&mut self, batch: &mut Vec<T>, max: usize) -> Result<SourceStatus, TaskError>;
    /// Called just before [`snapshot_position`](Self::snapshot_position) with the checkpoint
    /// it is for: a source that acts when a checkpoint completes (acknowledging its position
    /// to an external system) remembers which position belongs to which checkpoint.
    fn snapshot_started(&mut self, _checkpoint: CheckpointId) {}
    /// The read position, as list-state elements (redistributed round-robin on rescale).
    /// Called between batches, right after the barrier was emitted.
    ///
    /// A subtask that restores no element (there are more subtasks than elements after a
    /// rescale) is opened with `Some(vec![])`, not `None`: it must read nothing that the
    /// elements describe, never start over from the beginning.
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError>;
    /// Union-state elements taken with the position (none by default). On restore every
    /// subtask receives those of all old subtasks, through
    /// [`restore_union`](Self::restore_union): what a subtask must know of the others'
    /// positions, such as which files some subtask already owns.
    fn snapshot_union(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
    /// Called before [`open`](Self::open) on a restore, with the union-state elements of every
    /// old subtask (empty if the checkpoint holds none).
    fn restore_union(&mut self, _elements: Vec<Vec<u8>>) -> Result<(), TaskError> {
        Ok(())
    }
    /// Event time the source makes per split itself (see the runtime's `split_watermarks`
    /// module), asked after every batch and while the source is idle. The default,
    /// `Unchanged`, leaves event time to the watermark strategy the source was added with.
    fn event_time(&mut self, _now: std::time::Instant) -> SourceEventTime {
        SourceEventTime::Unchanged
    }
    fn notify_complete(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
}

/// An operator with one input (which may be an `Either` of two).
pub trait OneInputOperator<I, O>: Send + 'static {
    fn open(&mut self, _ctx: &OperatorContext, _restored: RestoredState) -> Result<(), TaskError> {
        Ok(())
    }
    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError>;
    /// The input's watermark advanced to `watermark`: fire what it completes (event-time timers,
    /// windows). The task loop forwards the watermark downstream afterwards, behind everything
    /// emitted here, unless [`forwards_watermarks`](Self::forwards_watermarks) is false.
    fn watermark(&mut self, _watermark: i64, _out: &mut Output<O>) -> Result<(), TaskError> {
        Ok(())
    }
    /// Whether the task loop forwards the input's watermarks; operators that make watermarks
    /// of their own say no.
    fn forwards_watermarks(&self) -> bool {
        true
    }
    /// How long until the earliest processing-time timer is due, if there is one. The task loop
    /// wakes up then and calls [`on_processing_time`](Self::on_processing_time).
    fn next_processing_timer(&self) -> Option<std::time::Duration> {
        None
    }
    /// Fires the processing-time timers that are due. Called on the task loop, between batches.
    fn on_processing_time(&mut self, _out: &mut Output<O>) -> Result<(), TaskError> {
        Ok(())
    }
    /// Synchronous snapshot phase: must not grow with the amount of state.
    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        Ok(OperatorSnapshot::default())
    }
    fn notify_complete(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_aborted(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
    /// All input has arrived; emit what is left.
    fn finish(&mut self, _out: &mut Output<O>) -> Result<(), TaskError> {
        Ok(())
    }
}
