//! The snapshot side of a RocksDB table: its key groups read from the snapshot's RocksDB
//! checkpoint and written in Weir's snapshot format, the heap backend's.

use super::materialize::Materialization;
use super::restore::RestoredDb;
use super::store::{backend_error, family_name};
use super::tier::key_group_prefix;
use crate::encode_buffer::EncodeBuffer;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::expiry::Expiry;
use crate::frozen_table::FrozenTable;
use rocksdb::{Direction, IteratorMode, ReadOptions};
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// Where a [`LsmFrozen`] table reads its key groups from.
pub(crate) enum Source {
    /// A snapshot of the live database, materialized on first read.
    Snapshot(Arc<Materialization>),
    /// A database restored from a native checkpoint, opened read-only.
    Restored(Arc<RestoredDb>),
}

/// One table of a snapshot of RocksDB state. Its key groups are written in full, every time:
/// the snapshot format does not know which changed.
pub(crate) struct LsmFrozen {
    name: Arc<str>,
    kind: TableKind,
    max_parallelism: u32,
    range: KeyGroupRange,
    epoch: u64,
    source: Source,
    /// Entries this finds expired are left out (a table with a time to live whose full
    /// snapshots clean up).
    expiry: Option<Expiry>,
}

impl LsmFrozen {
    pub(crate) fn new(
        name: Arc<str>,
        kind: TableKind,
        max_parallelism: u32,
        range: KeyGroupRange,
        epoch: u64,
        source: Source,
    ) -> Self {
        LsmFrozen {
            name,
            kind,
            max_parallelism,
            range,
            epoch,
            source,
            expiry: None,
        }
    }

    /// Leaves out of the encoding the entries `expiry` finds expired.
    pub(crate) fn with_expiry(mut self, expiry: Option<Expiry>) -> Self {
        self.expiry = expiry;
        self
    }
}

impl FrozenTable for LsmFrozen {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> TableKind {
        self.kind
    }

    fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn is_dirty(&self, key_group: u32) -> bool {
        self.range.contains(key_group)
    }

    fn snapshot_epoch(&self) -> u64 {
        self.epoch
    }

    fn last_modified_epoch(&self, key_group: u32) -> Option<u64> {
        self.range.contains(key_group).then_some(self.epoch)
    }

    fn encode_key_group(&self, key_group: u32, out: &mut EncodeBuffer) -> Result<(), StateError> {
        let error = |reason: String| {
            StateError::Encode(format!(
                "state table '{}', key group {key_group}: {reason}",
                self.name
            ))
        };
        if !self.range.contains(key_group) {
            return Err(error(format!(
                "outside the table's key groups {}",
                self.range
            )));
        }
        let view;
        let db = match &self.source {
            Source::Snapshot(round) => {
                view = round.materialize()?;
                view.db()?
            }
            Source::Restored(restored) => restored.db(),
        };
        let family = db.cf_handle(&family_name(&self.name)).ok_or_else(|| {
            backend_error(format!(
                "the RocksDB checkpoint has no column family for state table '{}'",
                self.name
            ))
        })?;
        let start = key_group_prefix(key_group);
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(key_group_prefix(key_group + 1).to_vec());
        options.fill_cache(false);
        let count_at = out.count_placeholder();
        let mut count = 0;
        for item in db.iterator_cf_opt(
            family,
            options,
            IteratorMode::From(&start, Direction::Forward),
        ) {
            let (key, value) =
                item.map_err(|e| backend_error(format!("RocksDB read failed: {e}")))?;
            if self.expiry.is_some_and(|expiry| expiry.is_expired(&value)) {
                continue;
            }
            // Both are stored as the snapshot format writes them: the postcard bytes of the key
            // and the entry's encoding.
            out.bytes().extend_from_slice(&key[2..]);
            out.bytes().extend_from_slice(&value);
            out.entry_end();
            count += 1;
        }
        out.set_count(count_at, count).map_err(error)
    }

    fn encode_key_group_delta(
        &self,
        key_group: u32,
        _since_epoch: u64,
        _out: &mut EncodeBuffer,
    ) -> Result<(), StateError> {
        Err(StateError::Encode(format!(
            "state table '{}', key group {key_group}: RocksDB tables are written in full",
            self.name
        )))
    }

    fn num_entries(&self) -> usize {
        0
    }
}
