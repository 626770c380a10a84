//! Where a job starts from, and whether that fits the job.
//!
//! Every start is a restore like any other. Before the first attempt, `plan` decides the
//! start point once: the checkpoint ZooKeeper recorded (a new leader of a running job), the
//! job's own latest checkpoint (`--resume`), a savepoint or another run's retained checkpoint
//! (`--from-savepoint`), or nothing; it refuses a snapshot that does not fit the job, and keeps
//! claim mode's promise (see `weir_storage::claim`). Each attempt then hands every subtask its
//! share of that state (`state`).
//!
//! A snapshot the job does not own is read but never referenced: the keyed state read from it
//! is detached from its shared files, so the job's first checkpoint is written in full.

mod state;

pub(crate) use state::read_states;
pub use state::{read_keyed_state, read_keyed_state_in};

use weir_checkpoint::CompletedCheckpointStore;
use weir_core::CheckpointId;
use weir_storage::{CheckpointMetadata, CheckpointStorage};

use crate::config::{ClaimMode, ExecutionConfig, StartMode};
use crate::error::JobError;
use crate::graph::JobGraph;
use crate::ha::HighAvailabilityServices;

/// Where an attempt's state comes from.
#[derive(Clone, Copy)]
pub struct Restore<'a> {
    pub storage: &'a CheckpointStorage,
    pub metadata: &'a CheckpointMetadata,
    /// The directory of the snapshot the state comes from when the job does not own it (a
    /// savepoint, or a retained checkpoint given with `--from-savepoint`).
    pub savepoint: Option<&'a std::path::Path>,
}

/// Where a job starts, decided once before its first attempt.
pub(crate) struct Plan {
    /// The job's own checkpoint the first attempt restores from.
    pub latest: Option<CheckpointMetadata>,
    /// The job's older retained checkpoints, for the completed checkpoint store.
    pub older: Vec<CheckpointMetadata>,
    /// A snapshot the job does not own that the first attempt restores from instead.
    pub savepoint: Option<(CheckpointStorage, CheckpointMetadata)>,
    /// The job's checkpoint ids continue above this one.
    pub max_id: CheckpointId,
    /// The completed checkpoint store recovered from ZooKeeper.
    pub ha_store: Option<Box<dyn CompletedCheckpointStore>>,
    /// The job's storage while it holds a claim on the snapshot it starts from.
    pub claimed: Option<CheckpointStorage>,
}

impl Plan {
    /// The id of the checkpoint or savepoint the job starts from.
    pub fn restored_from(&self) -> Option<CheckpointId> {
        self.latest
            .as_ref()
            .or(self.savepoint.as_ref().map(|(_, m)| m))
            .map(|m| m.checkpoint.id)
    }
}

/// Decides where the job starts, in its storage `storage`. With `ha`, the job carries on
/// from what ZooKeeper recorded; only a job's first leader (nothing recorded yet) applies the
/// start mode. Deletes what never completed, and what ZooKeeper no longer retains.
pub(crate) fn plan<'h>(
    graph: &JobGraph,
    config: &ExecutionConfig,
    storage: &CheckpointStorage,
    ha: Option<&mut (dyn HighAvailabilityServices + 'h)>,
) -> Result<Plan, JobError> {
    // Ids continue above every checkpoint directory ever created, complete or not.
    let max_id = storage.max_checkpoint_id()?.unwrap_or_default();
    let mut ha_store = None;
    let start = match ha {
        Some(ha) => {
            let (store, evicted) =
                ha.completed_checkpoint_store(storage, config.checkpoint.num_retained)?;
            for discard in evicted {
                storage.discard_checkpoint(discard.checkpoint)?;
                for path in discard.shared_paths {
                    storage.discard_file(&path)?;
                }
            }
            let recorded = store.latest().map(|c| c.id);
            ha_store = Some(store);
            match recorded {
                Some(id) => StartPoint {
                    latest: Some(storage.read_metadata(id)?),
                    older: Vec::new(),
                },
                None => start_point(storage, config.start)?,
            }
        }
        None => start_point(storage, config.start)?,
    };
    for id in storage.discard_incomplete()? {
        tracing::info!(checkpoint = %id, "deleted the files of a checkpoint that never completed");
    }
    if let Some(latest) = &start.latest {
        check_restorable(graph, latest, config.allow_non_restored_state)?;
        tracing::info!(checkpoint = %latest.checkpoint.id, "restoring from checkpoint");
    }
    let savepoint = open_savepoint(graph, config, &start)?;
    let max_id = max_id.max(
        savepoint
            .as_ref()
            .map(|(_, m)| m.checkpoint.id)
            .unwrap_or_default(),
    );
    let claimed = claim(storage, config, &start, savepoint.is_some(), max_id)?;
    Ok(Plan {
        latest: start.latest,
        older: start.older,
        savepoint,
        max_id,
        ha_store,
        claimed,
    })
}

/// The checkpoint a job starts from, if any, and the older ones still retained.
pub(crate) struct StartPoint {
    pub latest: Option<CheckpointMetadata>,
    pub older: Vec<CheckpointMetadata>,
}

/// Applies the start mode to the storage.
pub(crate) fn start_point(
    storage: &CheckpointStorage,
    mode: StartMode,
) -> Result<StartPoint, JobError> {
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

/// Settles a claim an earlier run left (killed after its first checkpoint completed, before
/// deleting the claimed snapshot), and records this run's claim in claim mode. Returns the
/// storage to settle it in once this run's first checkpoint completed.
fn claim(
    storage: &CheckpointStorage,
    config: &ExecutionConfig,
    start: &StartPoint,
    from_savepoint: bool,
    max_id: CheckpointId,
) -> Result<Option<CheckpointStorage>, JobError> {
    if let Some(latest) = &start.latest {
        // Only clean-up depends on the claim: a damaged one does not stop the job.
        match weir_storage::claim::settle(storage, latest.checkpoint.id) {
            Ok(Some(path)) => {
                tracing::info!(path = %path.display(), "deleted the snapshot an earlier run claimed")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not settle the claim of an earlier run; its snapshot stays until deleted by hand")
            }
        }
    }
    let (true, ClaimMode::Claim, Some(path)) =
        (from_savepoint, config.claim_mode, &config.from_savepoint)
    else {
        return Ok(None);
    };
    let snapshot = std::fs::canonicalize(path)
        .map_err(|e| JobError::Restore(format!("cannot claim {}: {e}", path.display())))?;
    weir_storage::claim::record(
        storage,
        &weir_storage::claim::Claim {
            snapshot,
            first_checkpoint: CheckpointId(max_id.0 + 1),
        },
    )?;
    Ok(Some(storage.clone()))
}

/// Opens the savepoint the job starts from, if any, and checks that it fits the job.
fn open_savepoint(
    graph: &JobGraph,
    config: &ExecutionConfig,
    start: &StartPoint,
) -> Result<Option<(CheckpointStorage, weir_storage::CheckpointMetadata)>, JobError> {
    let Some(path) = &config.from_savepoint else {
        return Ok(None);
    };
    if let Some(latest) = &start.latest {
        // Resuming a job that was started from a savepoint: its own checkpoints hold all it
        // did since, the savepoint is no longer needed (and in claim mode may be gone).
        tracing::info!(
            checkpoint = %latest.checkpoint.id,
            savepoint = %path.display(),
            "resuming from the job's own checkpoint, not from the savepoint it started from"
        );
        return Ok(None);
    }
    let (storage, metadata) = weir_storage::savepoint::open_savepoint(path)
        .map_err(|e| JobError::Restore(format!("cannot restore from {}: {e}", path.display())))?;
    check_restorable(graph, &metadata, config.allow_non_restored_state)?;
    tracing::info!(path = %path.display(), checkpoint = %metadata.checkpoint.id, "restoring from savepoint");
    Ok(Some((storage, metadata)))
}

/// Checks that a snapshot fits the job: the same max parallelism, channel state only of
/// operators at the parallelism it was taken at, and state only for operator uids the job
/// has — unless skipping unmatched state was allowed.
fn check_restorable(
    graph: &JobGraph,
    metadata: &weir_storage::CheckpointMetadata,
    allow_non_restored_state: bool,
) -> Result<(), JobError> {
    if metadata.max_parallelism != graph.max_parallelism {
        return Err(JobError::Restore(format!(
            "checkpoint {} was taken with pipeline.max-parallelism {}, the job has {}; changing it would move every key, so it is refused",
            metadata.checkpoint.id, metadata.max_parallelism, graph.max_parallelism
        )));
    }
    // Refused here, before any attempt: on a cluster, each task manager would otherwise meet
    // it only while deploying, and the job would restart in vain.
    for node in &graph.nodes {
        state::subtasks_with_channel_state(metadata, node)?;
    }
    let unmatched: Vec<&str> = metadata
        .operators
        .iter()
        .filter(|op| !graph.nodes.iter().any(|n| n.uid == op.uid))
        .filter(|op| {
            metadata
                .checkpoint
                .subtask_states
                .iter()
                .any(|(s, st)| s.operator == op.id && !st.handles.is_empty())
        })
        .map(|op| op.uid.as_str())
        .collect();
    if unmatched.is_empty() {
        return Ok(());
    }
    if allow_non_restored_state {
        tracing::warn!(uids = ?unmatched, "skipping state of operators no longer in the job");
        return Ok(());
    }
    Err(JobError::Restore(format!(
        "checkpoint {} holds state for operator uid(s) not in this job: {}; pass --allow-non-restored-state to start without it",
        metadata.checkpoint.id,
        unmatched.join(", ")
    )))
}
