//! The snapshot side of a keyed table ([`FrozenKeyGroups`]): its key groups as of a snapshot,
//! encoded in full or as the changes since an earlier one.

use crate::encode_buffer::EncodeBuffer;
use crate::entry_codec::TableKind;
use crate::entry_codec::{append, EntryCodec};
use crate::error::StateError;
use crate::expiry::Expiry;
use crate::frozen_table::FrozenTable;
use crate::group::{Group, TOMBSTONE_EPOCHS};
use crate::key::Key;
use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// The frozen view of a [`KeyGroupedMap`](super::KeyGroupedMap): shares its key groups as of
/// the snapshot.
pub(crate) struct FrozenKeyGroups<K, E, C> {
    pub(super) name: Arc<str>,
    pub(super) max_parallelism: u32,
    pub(super) range: KeyGroupRange,
    /// `None` once released ([`FrozenTable::release_key_group`]).
    pub(super) groups: Vec<Option<Arc<Group<K, E>>>>,
    pub(super) last_modified: Vec<u64>,
    pub(super) epoch: u64,
    /// Full encodes leave out the entries this finds expired (a table with a time to live
    /// whose full snapshots clean up).
    pub(super) expiry: Option<Expiry>,
    pub(super) codec: PhantomData<fn() -> C>,
}

impl<K, E, C> FrozenKeyGroups<K, E, C> {
    fn slot(&self, key_group: u32) -> Option<usize> {
        self.range
            .contains(key_group)
            .then(|| (key_group - self.range.start) as usize)
    }

    #[cfg(test)]
    pub(crate) fn shares_groups_with(&self, live: &super::KeyGroupedMap<K, E, C>) -> bool {
        self.groups.len() == live.groups.len()
            && self
                .groups
                .iter()
                .zip(&live.groups)
                .all(|(a, b)| a.as_ref().is_some_and(|a| b.base.is(a)))
    }
}

impl<K: Key, E: Clone + Send + Sync + 'static, C: EntryCodec<Entry = E>> FrozenTable
    for FrozenKeyGroups<K, E, C>
{
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> TableKind {
        C::KIND
    }

    fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn is_dirty(&self, key_group: u32) -> bool {
        self.last_modified_epoch(key_group) == Some(self.epoch)
    }

    fn snapshot_epoch(&self) -> u64 {
        self.epoch
    }

    fn last_modified_epoch(&self, key_group: u32) -> Option<u64> {
        self.slot(key_group).map(|i| self.last_modified[i])
    }

    fn encode_key_group(&self, key_group: u32, out: &mut EncodeBuffer) -> Result<(), StateError> {
        let error = |reason: String| self.encode_error(key_group, reason);
        let entries = &self.group(key_group)?.entries;
        let Some(expiry) = self.expiry else {
            append(&(entries.len() as u64), out.bytes()).map_err(|e| error(e.to_string()))?;
            for (key, entry) in entries.iter() {
                encode_entry::<K, E, C>(key, entry, out).map_err(error)?;
            }
            return Ok(());
        };
        // Each entry is encoded, then taken back if it expired: the count is set once known.
        let count_at = out.count_placeholder();
        let mut count = 0;
        for (key, entry) in entries.iter() {
            let start = out.bytes().len();
            append(key, out.bytes()).map_err(|e| error(format!("key: {e}")))?;
            let value_at = out.bytes().len();
            C::encode(entry, out.bytes()).map_err(|e| error(format!("value: {e}")))?;
            if expiry.is_expired(&out.bytes()[value_at..]) {
                out.bytes().truncate(start);
            } else {
                out.entry_end();
                count += 1;
            }
        }
        out.set_count(count_at, count).map_err(error)
    }

    fn encode_key_group_delta(
        &self,
        key_group: u32,
        since_epoch: u64,
        out: &mut EncodeBuffer,
    ) -> Result<(), StateError> {
        let error = |reason: String| self.encode_error(key_group, reason);
        let group = self.group(key_group)?;
        if self.epoch.saturating_sub(since_epoch) >= TOMBSTONE_EPOCHS {
            return Err(error(format!(
                "a delta since epoch {since_epoch} needs removals older than the {TOMBSTONE_EPOCHS} epochs kept"
            )));
        }
        // Removals are in the order of their epochs: the ones since `since_epoch` are a suffix,
        // found without a look at the others or at the entries. A key removed and written again
        // since is among both the removals and the entries (it may be removed more than once
        // too): a restore applies removals first, so it ends as written.
        let first = group.removed.partition_point(|(_, e)| *e <= since_epoch);
        let removed = group.removed.range(first..);
        append(&(removed.len() as u64), out.bytes()).map_err(|e| error(e.to_string()))?;
        for (key, _) in removed {
            append(key, out.bytes()).map_err(|e| error(format!("key: {e}")))?;
            out.entry_end();
        }
        // Picked by their epochs alone (the group may be large and mostly unchanged) and encoded
        // in one pass, their count set once known.
        let count_at = out.count_placeholder();
        let mut count = 0;
        for (key, entry) in group.entries.written_after(since_epoch) {
            encode_entry::<K, E, C>(key, entry, out).map_err(error)?;
            count += 1;
        }
        out.set_count(count_at, count).map_err(error)
    }

    fn num_entries(&self) -> usize {
        self.groups.iter().flatten().map(|g| g.entries.len()).sum()
    }

    fn release_key_group(&mut self, key_group: u32) {
        if let Some(i) = self.slot(key_group) {
            self.groups[i] = None;
        }
    }
}

/// Appends one `key, entry` to `out`, which may start a new chunk after it.
#[inline]
fn encode_entry<K: Key, E, C: EntryCodec<Entry = E>>(
    key: &K,
    entry: &E,
    out: &mut EncodeBuffer,
) -> Result<(), String> {
    append(key, out.bytes()).map_err(|e| format!("key: {e}"))?;
    C::encode(entry, out.bytes()).map_err(|e| format!("value: {e}"))?;
    out.entry_end();
    Ok(())
}

impl<K, E, C> FrozenKeyGroups<K, E, C> {
    fn encode_error(&self, key_group: u32, reason: String) -> StateError {
        StateError::Encode(format!(
            "state table '{}', key group {key_group}: {reason}",
            self.name
        ))
    }

    fn group(&self, key_group: u32) -> Result<&Group<K, E>, StateError> {
        let i = self.slot(key_group).ok_or_else(|| {
            self.encode_error(
                key_group,
                format!("outside the table's key groups {}", self.range),
            )
        })?;
        self.groups[i].as_deref().ok_or_else(|| {
            self.encode_error(key_group, "already released by this snapshot".to_string())
        })
    }
}
