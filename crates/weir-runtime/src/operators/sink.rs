//! Sinks: where records leave the job. A sink takes part in checkpoints: it flushes (and may
//! pre-commit) on snapshot and commits on the completion notice.

use weir_core::CheckpointId;
use weir_state::OperatorStateSnapshot;

use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::output::Output;

/// A parallel sink.
pub trait SinkFunction<T>: Send + 'static {
    /// Whether what [`snapshot`](Self::snapshot) returns is union state (every subtask gets
    /// all of it on restore) rather than list state (redistributed round-robin).
    fn union_state(&self) -> bool {
        false
    }
    /// Opens the sink; `restored` is the list state this subtask recorded (or was given on
    /// rescale) in the checkpoint being restored.
    fn open(
        &mut self,
        _ctx: &OperatorContext,
        _restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError>;
    /// Flush (and pre-commit) everything written so far; return what must be recorded in the
    /// checkpoint for this subtask.
    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
    /// The checkpoint is durable: commit what was pre-committed for it. May be repeated or
    /// lost, so it must be idempotent.
    fn notify_complete(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_aborted(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        Ok(())
    }
    /// All input has arrived.
    fn finish(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
}

/// Runs a [`SinkFunction`].
#[derive(Clone)]
pub struct SinkOperator<S>(pub S);

impl<T, S> OneInputOperator<T, ()> for SinkOperator<S>
where
    T: Send + 'static,
    S: SinkFunction<T>,
{
    fn open(&mut self, ctx: &OperatorContext, restored: RestoredState) -> Result<(), TaskError> {
        let union = self.0.union_state();
        let state = restored.operator.map(|s| {
            let parts = if union { s.union } else { s.list };
            parts.into_iter().flat_map(|(_, e)| e).collect()
        });
        self.0.open(ctx, state)
    }
    fn process_batch(&mut self, batch: Vec<T>, _out: &mut Output<()>) -> Result<(), TaskError> {
        self.0.write_batch(batch)
    }
    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        let elements = self.0.snapshot(checkpoint)?;
        let named = vec![("sink".to_string(), elements)];
        let (list, union) = if self.0.union_state() {
            (Vec::new(), named)
        } else {
            (named, Vec::new())
        };
        Ok(OperatorSnapshot {
            keyed: Vec::new(),
            operator: Some(OperatorStateSnapshot { list, union }),
            incremental: None,
            lsm: None,
            channels: None,
        })
    }
    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.0.notify_complete(checkpoint)
    }
    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.0.notify_aborted(checkpoint)
    }
    fn finish(&mut self, _out: &mut Output<()>) -> Result<(), TaskError> {
        self.0.finish()
    }
}
