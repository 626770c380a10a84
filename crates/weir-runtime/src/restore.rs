//! Starting a job over its checkpoint directory: refuse to overwrite by accident, discard on
//! `--fresh`, or find the checkpoint to resume from and hand each subtask its share of it.

use weir_core::{HandleKind, KeyGroupRange};
use weir_state::{redistribute_operator_state, KeyedSnapshotReader, OperatorStateSnapshot};
use weir_storage::{CheckpointMetadata, CheckpointStorage};

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
                    storage.root().display(),
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
                tracing::warn!(checkpoint = %id, %error, "skipping unusable checkpoint");
            }
            match found.metadata {
                Some(latest) => {
                    if !found.skipped.is_empty() {
                        tracing::warn!(checkpoint = %latest.checkpoint.id, "falling back to an older checkpoint");
                    }
                    Ok(StartPoint {
                        latest: Some(latest),
                        older: found.older,
                    })
                }
                None if found.skipped.is_empty() => {
                    tracing::info!(dir = %storage.root().display(), "no completed checkpoint to resume from; starting from the beginning");
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
                        storage.root().display(),
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
/// parallelism) from `metadata`: keyed state of the key groups it now owns, and its share of
/// the operator state redistributed round-robin.
pub fn subtask_state(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    node: &Node,
    index: u32,
    key_groups: KeyGroupRange,
) -> Result<RestoredState, JobError> {
    let id = node.id();
    let mut keyed = Vec::new();
    let mut operator = Vec::new();
    let mut saw_operator_state = false;
    let first = weir_core::SubtaskId::new(id, 0);
    let last = weir_core::SubtaskId::new(id, u32::MAX);
    for state in metadata
        .checkpoint
        .subtask_states
        .range(first..=last)
        .map(|(_, s)| s)
    {
        for handle in &state.handles {
            match handle.kind {
                HandleKind::Keyed { key_groups: old }
                    if old.start < key_groups.end && key_groups.start < old.end =>
                {
                    let bytes = storage.read_state_file(handle)?;
                    keyed.push(KeyedSnapshotReader::decode(&bytes).map_err(|e| {
                        JobError::Restore(format!(
                            "{} in checkpoint {}: {e}",
                            handle.path, metadata.checkpoint.id
                        ))
                    })?);
                }
                HandleKind::Keyed { .. } => {}
                HandleKind::Operator => {
                    saw_operator_state = true;
                    let bytes = storage.read_state_file(handle)?;
                    operator.push(OperatorStateSnapshot::decode(&bytes).map_err(|e| {
                        JobError::Restore(format!(
                            "{} in checkpoint {}: {e}",
                            handle.path, metadata.checkpoint.id
                        ))
                    })?);
                }
            }
        }
    }
    let keyed = if keyed.is_empty() {
        None
    } else {
        let reader =
            KeyedSnapshotReader::merge(keyed).map_err(|e| JobError::Restore(e.to_string()))?;
        reader.check_covers(key_groups).map_err(|e| {
            JobError::Restore(format!(
                "checkpoint {} lacks keyed state of '{}' for key groups {key_groups}: {e}",
                metadata.checkpoint.id, node.uid
            ))
        })?;
        Some(reader)
    };
    let operator = if saw_operator_state {
        redistribute_operator_state(operator, node.parallelism)
            .into_iter()
            .nth(index as usize)
    } else {
        None
    };
    Ok(RestoredState { keyed, operator })
}
