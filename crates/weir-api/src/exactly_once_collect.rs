//! An exactly-once sink into memory, by two-phase commit — for tests of recovery, where a job
//! fails and restarts and its output must still hold every result once.
//!
//! Each subtask buffers what it receives; a snapshot *pre-commits* the buffer under the
//! checkpoint's id, and the checkpoint's completion notice commits it (and every earlier one
//! of the subtask) into the shared output. On restore, what the restored checkpoint
//! pre-committed is committed (that checkpoint completed), and everything else of the failed
//! attempt is dropped: its records come again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::{OperatorContext, TaskError};

#[derive(Default)]
struct Shared<T> {
    committed: Vec<T>,
    /// Per subtask: pre-committed batches by checkpoint id.
    pending: BTreeMap<u32, BTreeMap<u64, Vec<T>>>,
}

/// Collects records exactly once across failures; see the module documentation.
pub struct ExactlyOnceCollectSink<T> {
    shared: Arc<Mutex<Shared<T>>>,
    subtask: u32,
    buffer: Vec<T>,
}

impl<T> Clone for ExactlyOnceCollectSink<T> {
    fn clone(&self) -> Self {
        ExactlyOnceCollectSink {
            shared: self.shared.clone(),
            subtask: self.subtask,
            buffer: Vec::new(),
        }
    }
}

impl<T> Default for ExactlyOnceCollectSink<T> {
    fn default() -> Self {
        ExactlyOnceCollectSink {
            shared: Arc::new(Mutex::new(Shared {
                committed: Vec::new(),
                pending: BTreeMap::new(),
            })),
            subtask: 0,
            buffer: Vec::new(),
        }
    }
}

impl<T> ExactlyOnceCollectSink<T> {
    fn lock(&self) -> Result<MutexGuard<'_, Shared<T>>, TaskError> {
        self.shared
            .lock()
            .map_err(|_| TaskError::user("exactly-once collect sink poisoned"))
    }

    /// The committed records.
    pub fn records(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.shared
            .lock()
            .map(|s| s.committed.clone())
            .unwrap_or_default()
    }

    /// Commits the subtask's batches pre-committed up to `checkpoint`.
    fn commit(&self, checkpoint: u64) -> Result<(), TaskError> {
        let mut shared = self.lock()?;
        let Shared { committed, pending } = &mut *shared;
        if let Some(mine) = pending.get_mut(&self.subtask) {
            let later = mine.split_off(&(checkpoint + 1));
            for (_, batch) in std::mem::replace(mine, later) {
                committed.extend(batch);
            }
        }
        Ok(())
    }
}

impl<T: Send + 'static> SinkFunction<T> for ExactlyOnceCollectSink<T> {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.subtask = ctx.index;
        self.buffer.clear();
        let restored_checkpoint = restored
            .and_then(|r| r.into_iter().next())
            .map(|b| {
                b.try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| TaskError::user("exactly-once collect sink state is malformed"))
            })
            .transpose()?;
        if let Some(checkpoint) = restored_checkpoint {
            self.commit(checkpoint)?;
        }
        // Whatever the failed attempt pre-committed after that is replayed.
        let mut shared = self.lock()?;
        shared.pending.remove(&self.subtask);
        Ok(())
    }

    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        self.buffer.extend(batch);
        Ok(())
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        let batch = std::mem::take(&mut self.buffer);
        self.lock()?
            .pending
            .entry(self.subtask)
            .or_default()
            .insert(checkpoint.0, batch);
        Ok(vec![checkpoint.0.to_le_bytes().to_vec()])
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.commit(checkpoint.0)
    }
}
