//! A bounded source over records held in memory — for tests and examples. Each subtask emits
//! its share (every `parallelism`-th record, in order) and records its position, so a restored
//! job replays exactly the records after its checkpoint.

use std::sync::Arc;
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

/// Emits `records`, spread over the source's subtasks; see the module documentation.
#[derive(Clone, Debug)]
pub struct VecSource<T> {
    records: Arc<Vec<T>>,
    index: u32,
    parallelism: u32,
    /// The next position in this subtask's share.
    next: usize,
}

impl<T> VecSource<T> {
    pub fn new(records: Vec<T>) -> VecSource<T> {
        VecSource {
            records: Arc::new(records),
            index: 0,
            parallelism: 1,
            next: 0,
        }
    }
}

impl<T: Clone + Send + Sync + 'static> SourceFunction<T> for VecSource<T> {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.index = ctx.index;
        self.parallelism = ctx.parallelism.max(1);
        self.next = 0;
        if let Some(bytes) = restored.and_then(|p| p.into_iter().next()) {
            let bytes: [u8; 8] = bytes
                .try_into()
                .map_err(|_| TaskError::user("a VecSource position is 8 bytes"))?;
            self.next = u64::from_le_bytes(bytes) as usize;
        }
        Ok(())
    }

    fn poll_batch(&mut self, batch: &mut Vec<T>, max: usize) -> Result<SourceStatus, TaskError> {
        let p = self.parallelism as usize;
        let start = self.index as usize + self.next * p;
        if start >= self.records.len() {
            return Ok(SourceStatus::Exhausted);
        }
        let before = batch.len();
        batch.extend(self.records[start..].iter().step_by(p).take(max).cloned());
        self.next += batch.len() - before;
        Ok(SourceStatus::Emitted)
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(vec![(self.next as u64).to_le_bytes().to_vec()])
    }
}
