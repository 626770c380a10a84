//! `PostgresCdcSource`: a consistent snapshot of a set of tables, then their changes, from a
//! logical replication slot, emitted as a changelog ([`Change`]) exactly once.
//!
//! **Start.** On a fresh start the source (re)creates its publication (`FOR TABLE` the
//! tables) and its replication slot (`pgoutput`); the slot's creation point is where the
//! stream begins. Every table must have a primary key: the snapshot is read in chunks in key
//! order, and changes are matched to chunks by key.
//!
//! **Snapshot and stream together.** The task loop alternates between reading a chunk and
//! draining the stream. A change to a key no chunk has read yet is dropped (the chunk will
//! read the row as it is then); a change to a key a chunk read is emitted unless that chunk's
//! snapshot already saw its transaction (`position.rs`). So the hand-over from snapshot to
//! stream neither loses nor repeats a row, whenever a failure strikes.
//!
//! **Position.** A checkpoint records the end of the last transaction handled, how many changes
//! of the next one were handled, each table's snapshot progress and the open windows, as list
//! state (one element; the subtask that holds it reads the slot, the others stay idle). The
//! slot is told a position only when a checkpoint holding it **completes**, so the server keeps
//! every change a restore from the latest checkpoint needs. Restoring from an older snapshot
//! than the slot's confirmed position is refused with an error naming both positions: those
//! changes are gone from the slot.
//!
//! **Changelog.** Inserts and snapshot rows are `+I`; an update is `-U` (with the old row, when
//! the table's replica identity is `FULL`) then `+U`; a delete is `-D` (key columns only unless
//! `FULL`). An update that moves a row's key out of or into what is covered becomes `-D` or
//! `+I`. `TRUNCATE` cannot be expressed as row changes and fails the job with a clear error.

mod chunks;
mod pgoutput;
mod position;
mod reader;
mod slot;
mod stream;

#[cfg(test)]
mod tests;

use weir_core::CheckpointId;
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

use crate::error::PgError;
use crate::schema::split_name;
use crate::url::PgUrl;
use crate::value::Change;
use position::Position;
use reader::Reader;

/// Reads a snapshot and then the changes of `tables` through the slot `slot`.
pub struct PostgresCdcSource {
    url: PgUrl,
    tables: Vec<String>,
    slot: String,
    publication: String,
    chunk_size: usize,
    reader: Option<Box<Reader>>,
}

/// A clone is the configured source, unopened: subtasks clone it before opening.
impl Clone for PostgresCdcSource {
    fn clone(&self) -> Self {
        PostgresCdcSource {
            url: self.url.clone(),
            tables: self.tables.clone(),
            slot: self.slot.clone(),
            publication: self.publication.clone(),
            chunk_size: self.chunk_size,
            reader: None,
        }
    }
}

impl std::fmt::Debug for PostgresCdcSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCdcSource")
            .field("url", &self.url)
            .field("tables", &self.tables)
            .field("slot", &self.slot)
            .finish()
    }
}

impl PostgresCdcSource {
    /// A source over `tables` (`name` or `schema.name`), reading through the replication slot
    /// `slot` and the publication `weir_<slot>`, both created on a fresh start.
    pub fn new(url: PgUrl, tables: &[&str], slot: &str) -> Result<PostgresCdcSource, PgError> {
        if tables.is_empty() {
            return Err(PgError::Config(
                "the CDC source needs at least one table".into(),
            ));
        }
        let valid = |s: &str| {
            !s.is_empty()
                && s.len() <= 60
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if !valid(slot) {
            return Err(PgError::Config(format!(
                "slot name `{slot}`: use 1 to 60 lowercase letters, digits and underscores"
            )));
        }
        let tables = tables
            .iter()
            .map(|t| split_name(t).map(|(s, n)| format!("{s}.{n}")))
            .collect::<Result<_, _>>()?;
        Ok(PostgresCdcSource {
            url,
            tables,
            slot: slot.to_string(),
            publication: format!("weir_{slot}"),
            chunk_size: 10_000,
            reader: None,
        })
    }

    /// Rows per snapshot chunk (default 10,000).
    pub fn chunk_size(mut self, rows: usize) -> PostgresCdcSource {
        self.chunk_size = rows.max(1);
        self
    }
}

impl SourceFunction<Change> for PostgresCdcSource {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        // A subtask that restores no position (or, on a fresh start, is not subtask 0) reads
        // nothing: a slot has one reader.
        let position = match restored {
            None if ctx.index == 0 => None,
            None => return Ok(()),
            Some(elements) => match elements.as_slice() {
                [] => return Ok(()),
                [one] => Some(Position::decode(one).map_err(TaskError::BadInput)?),
                _ => {
                    return Err(TaskError::BadInput(
                        "a PostgreSQL CDC source subtask was given several positions".into(),
                    ))
                }
            },
        };
        self.reader = Some(Box::new(Reader::open(self, position)?));
        Ok(())
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<Change>,
        max: usize,
    ) -> Result<SourceStatus, TaskError> {
        let Some(reader) = self.reader.as_deref_mut() else {
            return Ok(SourceStatus::Idle);
        };
        reader.poll(batch, max)?;
        Ok(if batch.is_empty() {
            SourceStatus::Idle
        } else {
            SourceStatus::Emitted
        })
    }

    fn snapshot_started(&mut self, checkpoint: CheckpointId) {
        if let Some(reader) = self.reader.as_deref_mut() {
            reader.snapshot_started(checkpoint);
        }
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(match self.reader.as_deref_mut() {
            Some(reader) => vec![reader.position().encode()],
            None => Vec::new(),
        })
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        if let Some(reader) = self.reader.as_deref_mut() {
            reader.completed(checkpoint);
        }
        Ok(())
    }
}
