//! A frozen, immutable view of one keyed state table, taken by the synchronous snapshot phase.

use crate::encode_buffer::EncodeBuffer;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use weir_core::KeyGroupRange;

/// A frozen view of one keyed state table, produced by
/// [`KeyedStateSet::snapshot`](crate::KeyedStateSet::snapshot) on the task thread and consumed
/// by [`encode_keyed_snapshot`](crate::encode_keyed_snapshot) on an asynchronous snapshot worker.
///
/// It shares the table's per-key-group maps copy-on-write, so it always shows the contents as of
/// the snapshot, whatever the task writes afterwards.
///
/// *Epochs* support incremental checkpoints: a table counts its snapshots, starting at 0, and
/// remembers for each key group the epoch in which it was last written. A view with
/// `snapshot_epoch() == e` holds every write made before snapshot `e`. A key group's contents in
/// this view equal those in an earlier view with epoch `e'` exactly when
/// `last_modified_epoch(group) <= e'`, so a checkpoint can reuse the bytes written for `e'` (if
/// that checkpoint completed) instead of writing the group again, and otherwise write only the
/// changes ([`FrozenTable::encode_key_group_delta`]). After `init` every key group counts as
/// modified; a restore puts the restored entries in the current epoch and starts the next one.
///
/// ```
/// use weir_state::*;
///
/// let mut state = ValueState::<u64, u64>::new("v");
/// state.init(8, KeyGroupRange::new(0, 8));
/// let mut first = Vec::new();
/// state.snapshot(&mut first);
/// assert!((0..8).all(|g| first[0].is_dirty(g)));
///
/// let key = CurrentKey::new(&1, 8);
/// state.set(&key, 1);
/// let mut second = Vec::new();
/// state.snapshot(&mut second);
/// let dirty: Vec<u32> = (0..8).filter(|&g| second[0].is_dirty(g)).collect();
/// assert_eq!(dirty, [key.key_group]);
/// assert_eq!(second[0].snapshot_epoch(), 1);
/// ```
pub trait FrozenTable: Send {
    /// The table's name, unique within its operator.
    fn name(&self) -> &str;
    fn kind(&self) -> TableKind;
    /// The key groups this view holds: the subtask's range.
    fn key_groups(&self) -> KeyGroupRange;
    /// The number of key groups of the job (`pipeline.max-parallelism`).
    fn max_parallelism(&self) -> u32;
    /// Whether `key_group` changed since the previous snapshot (always true for the first
    /// snapshot). False for a key group outside [`FrozenTable::key_groups`].
    fn is_dirty(&self, key_group: u32) -> bool;
    /// The epoch of this snapshot (see the trait documentation).
    fn snapshot_epoch(&self) -> u64;
    /// The epoch in which `key_group` was last modified, or `None` outside the range.
    fn last_modified_epoch(&self, key_group: u32) -> Option<u64>;
    /// Appends the serialised entries of `key_group` to `out`. Errors if a value fails to
    /// serialise or the key group lies outside [`FrozenTable::key_groups`].
    fn encode_key_group(&self, key_group: u32, out: &mut EncodeBuffer) -> Result<(), StateError>;
    /// Appends the changes of `key_group` since the view with epoch `since_epoch` to `out`: the
    /// keys removed since, then the entries written since, each as `count` followed by the keys
    /// or `key, entry` pairs. Restoring applies the removals, then the entries, on top of the
    /// key group as of `since_epoch`, so a key removed and written again since may be among
    /// both, and a key removed more than once may be removed more than once. Errors if
    /// `since_epoch` is [`TOMBSTONE_EPOCHS`](crate::TOMBSTONE_EPOCHS) or more epochs older than
    /// this view, whose removals are no longer all known.
    fn encode_key_group_delta(
        &self,
        key_group: u32,
        since_epoch: u64,
        out: &mut EncodeBuffer,
    ) -> Result<(), StateError>;
    /// The number of keys in the view (of the key groups not released).
    fn num_entries(&self) -> usize;
    /// Lets go of `key_group`'s contents once the snapshot no longer needs them (encoded, or
    /// reused from an earlier checkpoint): while a view holds a key group, the task's writes
    /// to it take the slower copy-on-write path. Encoding it afterwards is an error. The
    /// default keeps everything until the view is dropped.
    fn release_key_group(&mut self, _key_group: u32) {}
}
