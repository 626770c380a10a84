//! Starting a job over its checkpoint directory: refuse to overwrite by accident, discard on
//! `--fresh`, or find the checkpoint to resume from and hand each subtask its share of it.

use std::collections::HashMap;
use weir_core::{HandleKind, KeyGroupRange, OperatorId, StateHandle, SubtaskState};
use weir_state::{
    is_manifest, redistribute_operator_state, KeyedManifest, KeyedSnapshotReader,
    OperatorStateSnapshot,
};
use weir_storage::{CheckpointMetadata, CheckpointStorage, StorageError};

use crate::error::JobError;
use crate::graph::{JobGraph, Node};
use crate::operator::RestoredState;

/// What to do with checkpoints already in the job's checkpoint directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// Start new; refuse if checkpoints exist (nobody loses state by accident).
    New,
    /// Delete existing checkpoints, then start new.
    Fresh,
    /// Continue from the latest intact checkpoint.
    Resume,
}

/// The checkpoint a job starts from, if any, and the older ones still retained.
pub struct StartPoint {
    pub latest: Option<CheckpointMetadata>,
    pub older: Vec<CheckpointMetadata>,
}

/// Applies the start mode to the storage.
pub fn start_point(storage: &CheckpointStorage, mode: StartMode) -> Result<StartPoint, JobError> {
    let none = StartPoint {
        latest: None,
        older: Vec::new(),
    };
    match mode {
        StartMode::New => {
            let existing = storage.list_completed()?;
            if let Some(newest) = existing.last() {
                return Err(JobError::Restore(format!(
                    "{} holds {} checkpoint(s) of this job (newest: chk-{newest}); pass --resume to continue from the latest one, or --fresh to delete them and start over",
                    storage.root(),
                    existing.len()
                )));
            }
            Ok(none)
        }
        StartMode::Fresh => {
            storage.discard_all()?;
            Ok(none)
        }
        StartMode::Resume => {
            let found = storage.find_latest()?;
            for (id, error) in &found.skipped {
                tracing::warn!("checkpoint {id} is unusable: {error}");
            }
            match found.metadata {
                Some(latest) => {
                    if let Some((newest, _)) = found.skipped.first() {
                        tracing::warn!(
                            "falling back from checkpoint {newest} to the previous retained checkpoint {}",
                            latest.checkpoint.id
                        );
                    }
                    Ok(StartPoint {
                        latest: Some(latest),
                        older: found.older,
                    })
                }
                None if found.skipped.is_empty() => {
                    tracing::info!(dir = %storage.root(), "no completed checkpoint to resume from; starting from the beginning");
                    Ok(none)
                }
                None => {
                    let reasons: Vec<String> = found
                        .skipped
                        .iter()
                        .map(|(id, e)| format!("checkpoint {id}: {e}"))
                        .collect();
                    Err(JobError::Restore(format!(
                        "no usable checkpoint in {}; nothing was changed. {}",
                        storage.root(),
                        reasons.join("; ")
                    )))
                }
            }
        }
    }
}

/// Checks that a checkpoint fits the job: same max parallelism, every uid with state known.
pub fn check_compatible(graph: &JobGraph, metadata: &CheckpointMetadata) -> Result<(), JobError> {
    if metadata.max_parallelism != graph.max_parallelism {
        return Err(JobError::Restore(format!(
            "checkpoint {} was taken with pipeline.max-parallelism {}, the job now has {}; changing it would move every key",
            metadata.checkpoint.id, metadata.max_parallelism, graph.max_parallelism
        )));
    }
    let unmatched: Vec<&str> = metadata
        .operators
        .iter()
        .filter(|op| {
            metadata
                .checkpoint
                .subtask_states
                .iter()
                .any(|(s, st)| s.operator == op.id && !st.handles.is_empty())
        })
        .filter(|op| !graph.nodes.iter().any(|n| n.uid == op.uid))
        .map(|op| op.uid.as_str())
        .collect();
    if !unmatched.is_empty() {
        return Err(JobError::Restore(format!(
            "checkpoint {} holds state for operator uid(s) not in this job: {}",
            metadata.checkpoint.id,
            unmatched.join(", ")
        )));
    }
    Ok(())
}

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
pub fn subtask_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    node: &Node,
    index: u32,
    key_groups: KeyGroupRange,
    owned: bool,
) -> Result<RestoredState, JobError> {
    let id = node.id();
    let mut keyed = read_keyed_state(storage, metadata, id, key_groups)?;
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
    Ok(RestoredState { keyed, operator })
}

/// The keyed state of operator `operator` for the key groups `key_groups` in checkpoint
/// `metadata`, merged from every old subtask whose range overlaps them: from full snapshots,
/// or from incremental manifests and the shared files they chain. `None` if the operator has
/// no keyed state there. Every file's checksum is verified; an error names the checkpoint and
/// the file.
pub fn read_keyed_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    operator: OperatorId,
    key_groups: KeyGroupRange,
) -> Result<Option<KeyedSnapshotReader>, JobError> {
    let checkpoint = metadata.checkpoint.id;
    let mut keyed = Vec::new();
    for state in subtask_states(metadata, operator) {
        for handle in &state.handles {
            match handle.kind {
                // Shared files are read through the manifest that chains them.
                HandleKind::Keyed { .. } if handle.shared => {}
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
                    } else {
                        KeyedSnapshotReader::decode_vec(bytes).map_err(unusable)?
                    };
                    keyed.push(reader);
                }
                _ => {}
            }
        }
    }
    if keyed.is_empty() {
        return Ok(None);
    }
    let reader = KeyedSnapshotReader::merge(keyed)
        .map_err(|e| JobError::Restore(format!("checkpoint {checkpoint}: {e}")))?;
    reader.check_covers(key_groups).map_err(|e| {
        let uid = metadata
            .operators
            .iter()
            .find(|o| o.id == operator)
            .map_or_else(|| operator.to_string(), |o| o.uid.clone());
        JobError::Restore(format!(
            "checkpoint {checkpoint} lacks keyed state of '{uid}' for key groups {key_groups}: {e}"
        ))
    })?;
    Ok(Some(reader))
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
        let handle = state
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
            });
        let bytes = storage.read_state_file(&handle)?;
        files.insert(file.path.clone(), bytes);
    }
    Ok(files)
}
