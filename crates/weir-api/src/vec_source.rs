//! A bounded source over records held in memory — for tests and examples. Each subtask emits
//! its share (every `parallelism`-th record, in order) and records its position, so a restored
//! job replays exactly the records after its checkpoint, at any parallelism.
//!
//! A share is a *split*: the records `offset, offset + stride, …` and how many of them were
//! emitted. Splits are list state: on a rescale they are dealt over the new subtasks, each to
//! exactly one, so a subtask may read several shares, or none.

use std::sync::Arc;
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

/// Emits `records`, spread over the source's subtasks; see the module documentation.
#[derive(Clone, Debug)]
pub struct VecSource<T> {
    records: Arc<Vec<T>>,
    splits: Vec<Split>,
    /// The split the next batch comes from, so that every split advances.
    next_split: usize,
}

/// The records `offset + k * stride` for `k >= emitted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    offset: u64,
    stride: u64,
    emitted: u64,
}

impl Split {
    fn encode(&self) -> Vec<u8> {
        [self.offset, self.stride, self.emitted]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn decode(bytes: &[u8]) -> Result<Split, TaskError> {
        let bad = || {
            TaskError::user(format!(
                "a VecSource position is 24 bytes, this one is {}: the checkpoint was not written by this source",
                bytes.len()
            ))
        };
        if bytes.len() != 24 {
            return Err(bad());
        }
        let at =
            |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let split = Split {
            offset: at(0),
            stride: at(1),
            emitted: at(2),
        };
        if split.stride == 0 {
            return Err(bad());
        }
        Ok(split)
    }

    /// The position in the records of the next record, if any is left.
    fn next(&self, len: usize) -> Option<usize> {
        let position = self
            .offset
            .checked_add(self.emitted.checked_mul(self.stride)?)?;
        usize::try_from(position).ok().filter(|p| *p < len)
    }
}

impl<T> VecSource<T> {
    pub fn new(records: Vec<T>) -> VecSource<T> {
        VecSource {
            records: Arc::new(records),
            splits: Vec::new(),
            next_split: 0,
        }
    }
}

impl<T: Clone + Send + Sync + 'static> SourceFunction<T> for VecSource<T> {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.next_split = 0;
        self.splits = match restored {
            Some(elements) => elements
                .iter()
                .map(|e| Split::decode(e))
                .collect::<Result<_, _>>()?,
            None => vec![Split {
                offset: ctx.index as u64,
                stride: ctx.parallelism.max(1) as u64,
                emitted: 0,
            }],
        };
        Ok(())
    }

    fn poll_batch(&mut self, batch: &mut Vec<T>, max: usize) -> Result<SourceStatus, TaskError> {
        let n = self.splits.len();
        for k in 0..n {
            let i = (self.next_split + k) % n;
            let split = &mut self.splits[i];
            let Some(start) = split.next(self.records.len()) else {
                continue;
            };
            let before = batch.len();
            let records = self.records[start..].iter().step_by(split.stride as usize);
            batch.extend(records.take(max).cloned());
            split.emitted += (batch.len() - before) as u64;
            self.next_split = (i + 1) % n;
            return Ok(SourceStatus::Emitted);
        }
        Ok(SourceStatus::Exhausted)
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(self.splits.iter().map(Split::encode).collect())
    }
}
