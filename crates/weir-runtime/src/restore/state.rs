//! Each subtask's share of a snapshot: keyed state of the key groups it owns, merged from
//! every old subtask whose range overlaps them, and its round-robin share of operator list
//! state (union state goes to every subtask). Read on a few threads at once; every file's
//! checksum is verified.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use weir_core::{HandleKind, KeyGroupRange, OperatorId, StateHandle, SubtaskId, SubtaskState};
use weir_state::{
    is_lsm_manifest, is_manifest, redistribute_operator_state, KeyedManifest, KeyedSnapshotReader,
    LsmManifest, OperatorStateSnapshot,
};
use weir_storage::{CheckpointLayout, CheckpointMetadata, CheckpointStorage, StorageError};

use crate::error::JobError;
use crate::graph::{JobGraph, Node};
use crate::operator::RestoredState;
use crate::restore::Restore;

/// Reads and assigns the state of subtask `index` of `node` (at the node's current
/// parallelism) from `metadata`: keyed state of the key groups it now owns (see
/// [`read_keyed_state`]), and its share of the operator state redistributed round-robin. Every
/// file's checksum is verified; an error names the checkpoint and the file.
///
/// `owned` says whether the snapshot is one of the job's own checkpoints. If not (a savepoint,
/// or a retained checkpoint of another run), the keyed state is detached from its shared files
/// so that the job's first checkpoint is written in full.
// Invariant: a job never references the files of a snapshot it does not own; in no-claim
// mode the user may delete it as soon as the first checkpoint completed, in claim mode Weir
// deletes it then.
///
/// RocksDB table files are fetched into a directory under `scratch` to be read; with
/// `in_place` (the job's backend is RocksDB; the job's number of key groups), the database of
/// the old subtask that shares the most key groups with this one is fetched there to be opened
/// in place (see [`RestoredState::native`]), the others read out.
#[allow(clippy::too_many_arguments)]
pub fn subtask_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    node: &Node,
    index: u32,
    key_groups: KeyGroupRange,
    owned: bool,
    scratch: &Path,
    in_place: Option<u32>,
) -> Result<RestoredState, JobError> {
    let id = node.id();
    let mut native = None;
    let target = in_place.map(|max_parallelism| InPlace {
        owned,
        max_parallelism,
        slot: &mut native,
    });
    let mut keyed = read_keyed(storage, metadata, id, key_groups, scratch, target)?;
    if !owned {
        if let Some(reader) = &mut keyed {
            reader.detach_from_shared_files();
        }
    }
    let mut operator = Vec::new();
    let mut saw_operator_state = false;
    for state in subtask_states(metadata, id) {
        for handle in &state.handles {
            if handle.kind == HandleKind::Operator {
                saw_operator_state = true;
                let bytes = storage
                    .read_state_file(handle)
                    .map_err(|e| located(storage, metadata, e))?;
                operator.push(
                    OperatorStateSnapshot::decode(&bytes)
                        .map_err(|e| unusable(storage, metadata, handle, e))?,
                );
            }
        }
    }
    let operator = if saw_operator_state {
        redistribute_operator_state(operator, node.parallelism)
            .into_iter()
            .nth(index as usize)
    } else {
        None
    };
    #[cfg(not(feature = "rocksdb"))]
    let _: Option<std::convert::Infallible> = native;
    Ok(RestoredState {
        keyed,
        operator,
        #[cfg(feature = "rocksdb")]
        native,
        channels: channel_state(storage, metadata, node, index)?,
    })
}

/// The handle of the channel state `state` holds, if any.
fn channel_handle(state: &SubtaskState) -> Option<StateHandle> {
    state
        .handles
        .iter()
        .find(|h| h.kind == HandleKind::Channels)
        .cloned()
}

/// The old subtasks of `node` in `metadata`, if they hold channel state (an unaligned
/// checkpoint's in-flight data). In-flight data belongs to channels that exist only at the
/// parallelism it was taken at: at another, the restore is refused.
pub(super) fn subtasks_with_channel_state<'m>(
    metadata: &'m CheckpointMetadata,
    node: &Node,
) -> Result<Option<Vec<(&'m SubtaskId, &'m SubtaskState)>>, JobError> {
    let id = node.id();
    let old: Vec<(&SubtaskId, &SubtaskState)> = metadata
        .checkpoint
        .subtask_states
        .iter()
        .filter(|(s, _)| s.operator == id)
        .collect();
    if !old.iter().any(|(_, state)| channel_handle(state).is_some()) {
        return Ok(None);
    }
    if old.len() != node.parallelism as usize {
        return Err(JobError::Restore(format!(
            "checkpoint {} is an unaligned checkpoint holding in-flight data of '{}' at parallelism {}, which restores only at that parallelism, not {}; take a savepoint (always aligned) and start from it to change the parallelism",
            metadata.checkpoint.id,
            node.uid,
            old.len(),
            node.parallelism
        )));
    }
    Ok(Some(old))
}

/// The channel state subtask `index` of `node` restores: that of the old subtask of the same
/// index, wherever it ran and wherever this one runs.
fn channel_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    node: &Node,
    index: u32,
) -> Result<Option<Vec<u8>>, JobError> {
    let Some(old) = subtasks_with_channel_state(metadata, node)? else {
        return Ok(None);
    };
    let Some(handle) = old
        .iter()
        .find(|(s, _)| s.index == index)
        .and_then(|(_, state)| channel_handle(state))
    else {
        return Ok(None);
    };
    storage
        .read_state_file(&handle)
        .map(Some)
        .map_err(|e| located(storage, metadata, e))
}

/// Where a subtask's RocksDB database restored in place goes (see [`subtask_state`]).
struct InPlace<'a> {
    owned: bool,
    max_parallelism: u32,
    slot: &'a mut Option<NativeState>,
}

/// A database restored in place: with the RocksDB backend, its fetched files.
#[cfg(feature = "rocksdb")]
type NativeState = weir_state::lsm::NativeState;
/// Without the `rocksdb` feature there is never one.
#[cfg(not(feature = "rocksdb"))]
type NativeState = std::convert::Infallible;

/// The keyed state of operator `operator` for the key groups `key_groups` in checkpoint
/// `metadata`, merged from every old subtask whose range overlaps them: from full snapshots,
/// or from incremental manifests and the shared files they chain. `None` if the operator has
/// no keyed state there. Every file's checksum is verified; an error names the checkpoint and
/// the file.
///
/// RocksDB table files are fetched into a directory under `state.backend.rocksdb.localdir` as
/// the environment sets it (the system's temporary directory by default).
pub fn read_keyed_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    operator: OperatorId,
    key_groups: KeyGroupRange,
) -> Result<Option<KeyedSnapshotReader>, JobError> {
    let scratch = weir_core::config::StateBackendConfig::from_env()
        .map(|c| c.rocksdb_local_dir)
        .unwrap_or_else(|_| std::env::temp_dir());
    read_keyed_state_in(storage, metadata, operator, key_groups, &scratch)
}

/// Like [`read_keyed_state`], fetching RocksDB table files into a directory under `scratch`.
pub fn read_keyed_state_in(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    operator: OperatorId,
    key_groups: KeyGroupRange,
    scratch: &Path,
) -> Result<Option<KeyedSnapshotReader>, JobError> {
    read_keyed(storage, metadata, operator, key_groups, scratch, None)
}

/// [`read_keyed_state_in`]; with `in_place`, the RocksDB manifest of the old subtask sharing
/// the most key groups with `key_groups` is fetched to be opened in place (into
/// `in_place.slot`) rather than read out; the reader then holds the others.
fn read_keyed(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    operator: OperatorId,
    key_groups: KeyGroupRange,
    scratch: &Path,
    mut in_place: Option<InPlace<'_>>,
) -> Result<Option<KeyedSnapshotReader>, JobError> {
    let checkpoint = metadata.checkpoint.id;
    // The old subtask sharing the most key groups with this one: if its state is a RocksDB
    // database, that one opens in place and the others are read out into it.
    let chosen = in_place
        .as_ref()
        .and_then(|_| most_shared(metadata, operator, key_groups));
    let mut opened_in_place = None;
    let mut keyed = Vec::new();
    for state in subtask_states(metadata, operator) {
        // A subtask's keyed state may come in two parts with tables of their own: its RocksDB
        // tables and the tables kept on the heap beside them (the timers).
        let mut subtask: Option<KeyedSnapshotReader> = None;
        for handle in &state.handles {
            match handle.kind {
                // Shared files and table files (a native savepoint's are its own) are read
                // through the manifest that names them.
                HandleKind::Keyed { .. }
                    if handle.shared || CheckpointLayout::is_table_file(&handle.path) => {}
                HandleKind::Keyed { key_groups: old }
                    if old.start < key_groups.end && key_groups.start < old.end =>
                {
                    let bytes = storage
                        .read_state_file(handle)
                        .map_err(|e| located(storage, metadata, e))?;
                    let unusable = |e| unusable(storage, metadata, handle, e);
                    let reader = if is_manifest(&bytes) {
                        let manifest = KeyedManifest::decode(&bytes).map_err(unusable)?;
                        let files = read_chained_files(storage, &manifest, state, key_groups)
                            .map_err(|e| located(storage, metadata, e))?;
                        manifest.reader(key_groups, files).map_err(unusable)?
                    } else if is_lsm_manifest(&bytes) {
                        let manifest = LsmManifest::decode(&bytes).map_err(unusable)?;
                        if let Some(target) = in_place.as_mut().filter(|t| {
                            Some(manifest.key_groups) == chosen
                                && manifest.max_parallelism == t.max_parallelism
                        }) {
                            opened_in_place = Some(manifest.key_groups);
                            *target.slot = Some(
                                fetch_lsm(
                                    storage,
                                    metadata,
                                    &manifest,
                                    state,
                                    target.owned,
                                    scratch,
                                )
                                .map_err(unusable)?,
                            );
                            continue;
                        }
                        read_lsm(storage, metadata, &manifest, state, key_groups, scratch)
                            .map_err(unusable)?
                    } else {
                        KeyedSnapshotReader::decode_vec(bytes).map_err(unusable)?
                    };
                    match &mut subtask {
                        None => subtask = Some(reader),
                        Some(first) => first.add_tables(reader).map_err(unusable)?,
                    }
                }
                _ => {}
            }
        }
        keyed.extend(subtask);
    }
    if keyed.is_empty() {
        return Ok(None);
    }
    let reader = KeyedSnapshotReader::merge(keyed)
        .map_err(|e| JobError::Restore(format!("checkpoint {checkpoint}: {e}")))?;
    // The key groups the database opened in place holds need not be in the reader.
    let (before, after) = match opened_in_place {
        Some(held) => (
            KeyGroupRange::new(
                key_groups.start,
                held.start.clamp(key_groups.start, key_groups.end),
            ),
            KeyGroupRange::new(
                held.end.clamp(key_groups.start, key_groups.end),
                key_groups.end,
            ),
        ),
        None => (
            key_groups,
            KeyGroupRange::new(key_groups.end, key_groups.end),
        ),
    };
    for part in [before, after].into_iter().filter(|r| !r.is_empty()) {
        reader.check_covers(part).map_err(|e| {
            let uid = metadata
                .operators
                .iter()
                .find(|o| o.id == operator)
                .map_or_else(|| operator.to_string(), |o| o.uid.clone());
            JobError::Restore(format!(
                "checkpoint {checkpoint} lacks keyed state of '{uid}' for key groups {key_groups}: {e}"
            ))
        })?;
    }
    Ok(Some(reader))
}

/// The key groups of the old subtask of `operator` that shares the most key groups with
/// `key_groups` (the first of equals), if any shares one.
fn most_shared(
    metadata: &CheckpointMetadata,
    operator: OperatorId,
    key_groups: KeyGroupRange,
) -> Option<KeyGroupRange> {
    let shared = |old: KeyGroupRange| {
        old.end
            .min(key_groups.end)
            .saturating_sub(old.start.max(key_groups.start))
    };
    subtask_states(metadata, operator)
        .flat_map(|state| &state.handles)
        .filter_map(|handle| match handle.kind {
            HandleKind::Keyed { key_groups: old } if !handle.shared && shared(old) > 0 => Some(old),
            _ => None,
        })
        .fold(None, |best: Option<KeyGroupRange>, old| match best {
            Some(b) if shared(b) >= shared(old) => Some(b),
            _ => Some(old),
        })
}

fn subtask_states(
    metadata: &CheckpointMetadata,
    operator: OperatorId,
) -> impl Iterator<Item = &SubtaskState> {
    let first = weir_core::SubtaskId::new(operator, 0);
    let last = weir_core::SubtaskId::new(operator, u32::MAX);
    metadata
        .checkpoint
        .subtask_states
        .range(first..=last)
        .map(|(_, s)| s)
}

fn located(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    e: StorageError,
) -> JobError {
    JobError::Storage(e.in_checkpoint(metadata.checkpoint.id.0, &storage.root().to_string()))
}

fn unusable(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    handle: &StateHandle,
    e: weir_state::StateError,
) -> JobError {
    JobError::Restore(format!(
        "checkpoint {}: {} is unusable: {e}",
        metadata.checkpoint.id,
        storage.display_state(handle)
    ))
}

/// Copies (and verifies) a table file of `state`'s native RocksDB snapshot to a local path, a
/// part at a time; an error names the checkpoint and the file.
#[cfg(feature = "rocksdb")]
fn table_files<'a>(
    storage: &'a CheckpointStorage,
    metadata: &'a CheckpointMetadata,
    state: &'a SubtaskState,
) -> impl FnMut(&weir_state::LsmFile, &Path) -> Result<(), String> + 'a {
    move |file, dest| {
        let handle = shared_handle(state, &file.file);
        storage
            .fetch_state_file(&handle, dest)
            .map_err(|e| located(storage, metadata, e).to_string())
    }
}

/// The key groups `range` of a native RocksDB snapshot: its table files are read (and
/// verified) into a directory under `scratch`, opened, and read out.
#[cfg(feature = "rocksdb")]
fn read_lsm(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    manifest: &LsmManifest,
    state: &SubtaskState,
    range: KeyGroupRange,
    scratch: &Path,
) -> Result<KeyedSnapshotReader, weir_state::StateError> {
    let mut fetch = table_files(storage, metadata, state);
    weir_state::lsm::read_native(manifest, range, scratch, &mut fetch)
}

/// The files of the native RocksDB snapshot `manifest`, fetched (and verified) into a
/// directory under `scratch` to be opened in place.
#[cfg(feature = "rocksdb")]
fn fetch_lsm(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    manifest: &LsmManifest,
    state: &SubtaskState,
    owned: bool,
    scratch: &Path,
) -> Result<NativeState, weir_state::StateError> {
    let mut fetch = table_files(storage, metadata, state);
    let checkpoint = metadata.checkpoint.id.0;
    weir_state::lsm::fetch_native(manifest, checkpoint, owned, scratch, &mut fetch)
}

/// Without the RocksDB backend nothing is restored in place (the caller never asks).
#[cfg(not(feature = "rocksdb"))]
fn fetch_lsm(
    _storage: &CheckpointStorage,
    _metadata: &CheckpointMetadata,
    _manifest: &LsmManifest,
    _state: &SubtaskState,
    _owned: bool,
    _scratch: &Path,
) -> Result<NativeState, weir_state::StateError> {
    Err(weir_state::StateError::Backend(
        "this build of Weir has no RocksDB state backend".into(),
    ))
}

/// Without the RocksDB backend, a native RocksDB snapshot cannot be read.
#[cfg(not(feature = "rocksdb"))]
fn read_lsm(
    _storage: &CheckpointStorage,
    _metadata: &CheckpointMetadata,
    _manifest: &LsmManifest,
    _state: &SubtaskState,
    _range: KeyGroupRange,
    _scratch: &Path,
) -> Result<KeyedSnapshotReader, weir_state::StateError> {
    Err(weir_state::StateError::Backend(
        "it holds the table files of the RocksDB state backend, which this build of Weir lacks: \
         build it with `--features rocksdb`, or restore a savepoint (savepoints of either \
         backend restore into the other)"
            .into(),
    ))
}

/// The handle of a shared file among a subtask's handles: by path or, for a copy under another
/// name (a savepoint), by size and checksum.
fn shared_handle(state: &SubtaskState, file: &weir_state::SharedStateFile) -> StateHandle {
    state
        .handles
        .iter()
        .find(|h| h.path == file.path)
        .or_else(|| {
            state
                .handles
                .iter()
                .find(|h| h.size == file.size && h.checksum == file.checksum)
        })
        .cloned()
        .unwrap_or_else(|| StateHandle {
            path: file.path.clone(),
            size: file.size,
            checksum: file.checksum,
            kind: HandleKind::Operator,
            shared: true,
            inline: None,
        })
}

/// Reads (and verifies) the shared files a manifest chains for the key groups `range`. Each is
/// found among the subtask's handles by path or, for a copy under another name (a savepoint),
/// by size and checksum.
fn read_chained_files(
    storage: &CheckpointStorage,
    manifest: &KeyedManifest,
    state: &SubtaskState,
    range: KeyGroupRange,
) -> Result<HashMap<String, Vec<u8>>, StorageError> {
    let mut files = HashMap::new();
    for file in manifest.files_for(range) {
        let handle = shared_handle(state, file);
        let bytes = storage.read_state_file(&handle)?;
        files.insert(file.path.clone(), bytes);
    }
    Ok(files)
}

/// Reads the state of every subtask of `graph` from `metadata`, by subtask, on a few threads
/// at once: the files of a large state are read side by side (each read waits on the disk),
/// then each subtask decodes its own in its thread.
/// Only the subtasks that run in this process are read. The first error in that order is
/// returned.
pub(crate) fn read_states(
    graph: &JobGraph,
    restore: Restore<'_>,
    is_local: &dyn Fn(SubtaskId) -> bool,
    scratch: &Path,
    in_place: bool,
) -> Result<HashMap<SubtaskId, RestoredState>, JobError> {
    let in_place = in_place.then_some(graph.max_parallelism);
    let Restore {
        storage,
        metadata,
        savepoint,
    } = restore;
    let subtasks: Vec<(&crate::graph::Node, u32)> = graph
        .nodes
        .iter()
        .flat_map(|node| (0..node.parallelism).map(move |index| (node, index)))
        .filter(|(node, index)| is_local(SubtaskId::new(node.id(), *index)))
        .collect();
    let readers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
        .min(subtasks.len().max(1));
    let next = AtomicUsize::new(0);
    let read = |i: usize| {
        let (node, index) = subtasks[i];
        let key_groups = KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
        let owned = savepoint.is_none();
        (
            i,
            subtask_state(
                storage, metadata, node, index, key_groups, owned, scratch, in_place,
            ),
        )
    };
    let mut results: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..readers)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= subtasks.len() {
                            return mine;
                        }
                        mine.push(read(i));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    results
        .into_iter()
        .map(|(i, r)| {
            let (node, index) = subtasks[i];
            r.map(|state| (SubtaskId::new(node.id(), index), state))
        })
        .collect()
}
