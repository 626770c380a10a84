//! The local executor: deploys a [`JobGraph`] as threads in this process — one task loop per
//! subtask, a pool of snapshot workers and the coordinator's driver — and runs it to the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_checkpoint::{
    CheckpointCoordinator, CheckpointIdCounter, CheckpointStats, CompletedCheckpointStore, Discard,
    JobStatus, JobVertices, StandaloneCheckpointIdCounter,
};
use weir_core::config::CheckpointConfig;
use weir_core::{CheckpointId, Clock, JobId, SystemClock};
use weir_storage::{CheckpointStorage, OperatorMetadata};

use crate::control::{CoordinatorMessage, TaskControl};
use crate::deploy::{shut_down, subtask_ids, Deployer, LocalDeployer, Restore};
use crate::driver::{spawn_driver, DriverSetup};
use crate::error::JobError;
use crate::graph::JobGraph;
use crate::handle::JobHandle;
use crate::injection::FailureInjection;
use crate::restart::{RestartDecision, RestartStrategy, RestartTracker};
use crate::restore::{start_point, StartMode};
use crate::snapshot::SnapshotWorkers;
use crate::supervise::{count_checkpoint, late_failure, sleep_unless_stopped, Outcome, Watch};

/// How to run a job.
#[derive(Clone, Debug)]
pub struct ExecutionConfig {
    pub checkpoint: CheckpointConfig,
    pub start: StartMode,
    /// Records per batch.
    pub batch_size: usize,
    /// Batches a channel holds before its producer blocks.
    pub channel_capacity: usize,
    /// The longest a record waits in a partly filled batch.
    pub buffer_timeout: Duration,
    /// Workers for the asynchronous part of snapshots (see [`crate::snapshot`]). A worker spends
    /// much of a snapshot waiting on `fsync`; while every worker waits, the next subtask's
    /// frozen key groups wait with them, and the task's writes to those take the slower
    /// copy-on-write path. Four workers keep one free for encoding in practice.
    pub snapshot_threads: usize,
    pub restart: RestartStrategy,
    pub failure_injection: Option<FailureInjection>,
    /// Where savepoints go when a request names no directory.
    pub savepoint_dir: Option<std::path::PathBuf>,
    /// Start from this savepoint (or retained checkpoint directory).
    pub from_savepoint: Option<std::path::PathBuf>,
    /// Skip state whose operator uid is no longer in the job, instead of refusing to start.
    pub allow_non_restored_state: bool,
    pub claim_mode: ClaimMode,
}

/// Who owns the snapshot a job was started from (Flink's restore modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClaimMode {
    /// The snapshot stays the user's: never deleted, never referenced after the first
    /// checkpoint (which is a full one).
    #[default]
    NoClaim,
    /// Weir takes the snapshot over and deletes it once a newer checkpoint completed.
    Claim,
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        ExecutionConfig {
            checkpoint: CheckpointConfig::default(),
            start: StartMode::New,
            batch_size: 1024,
            channel_capacity: 8,
            buffer_timeout: Duration::from_millis(100),
            snapshot_threads: 4,
            restart: RestartStrategy::None,
            failure_injection: None,
            savepoint_dir: None,
            from_savepoint: None,
            allow_non_restored_state: false,
            claim_mode: ClaimMode::NoClaim,
        }
    }
}

/// Asks a running job to stop cleanly (a final checkpoint, then the sources end) or to
/// cancel (no final checkpoint).
#[derive(Clone, Debug, Default)]
pub struct StopHandle {
    stop: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
}

impl StopHandle {
    pub fn new() -> StopHandle {
        StopHandle::default()
    }
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
    /// Stop or cancel was asked for.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.is_cancelled()
    }
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

/// The last completed checkpoint, as progress shows it.
#[derive(Clone, Copy, Debug)]
pub struct LastCheckpoint {
    pub id: CheckpointId,
    pub duration_ms: u64,
    pub size_bytes: u64,
}

/// A running job's progress, reported about twice a second.
#[derive(Clone, Debug)]
pub struct JobProgress {
    pub elapsed: Duration,
    /// Records emitted by all sources.
    pub records: u64,
    /// Source records per second over the last report interval.
    pub records_per_second: f64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub last_checkpoint: Option<LastCheckpoint>,
}

/// How a job ended.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub job_name: String,
    pub elapsed: Duration,
    pub records: u64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub last_checkpoint: Option<LastCheckpoint>,
    pub restored_from: Option<CheckpointId>,
    /// Restarts after failures.
    pub restarts: u32,
    /// Per restart: milliseconds from the failure to the first record processed after it.
    pub recovery_ms: Vec<u64>,
    /// The job was cancelled (no final checkpoint).
    pub cancelled: bool,
    /// Completed checkpoints left in storage, oldest first.
    pub retained: Vec<CheckpointId>,
    pub stats: CheckpointStats,
}

/// Runs `graph` to completion (bounded input, or a stop request) in this process. A failing
/// subtask fails the current attempt: every subtask is cancelled and, as the restart strategy
/// allows, the job is redeployed from its latest completed checkpoint.
pub fn execute(
    graph: &JobGraph,
    config: &ExecutionConfig,
    stop: &StopHandle,
    progress: &mut dyn FnMut(&JobProgress),
) -> Result<JobSummary, JobError> {
    let handle = JobHandle::new(graph, &config.checkpoint, stop.clone());
    execute_job(graph, config, &handle, progress)
}

/// Like [`execute`], observed and controlled through `handle` (REST, metrics, CLI).
pub fn execute_job(
    graph: &JobGraph,
    config: &ExecutionConfig,
    handle: &JobHandle,
    progress: &mut dyn FnMut(&JobProgress),
) -> Result<JobSummary, JobError> {
    execute_with(graph, config, handle, progress, &mut LocalDeployer, None)
}

/// Where a job's checkpoint ids and completed checkpoints are kept when they must outlive the
/// job manager (high availability: ZooKeeper). Without, ids are seeded from checkpoint storage
/// and completed checkpoints found there.
pub trait HighAvailabilityServices {
    /// The id counter, which must hand out ids above `max_id` (the highest in storage).
    fn checkpoint_id_counter(
        &mut self,
        max_id: CheckpointId,
    ) -> Result<Box<dyn CheckpointIdCounter>, JobError>;
    /// The completed checkpoint store as recorded, and what to delete for checkpoints beyond
    /// `num_retained`. The job restores from its latest checkpoint.
    fn completed_checkpoint_store(
        &mut self,
        storage: &CheckpointStorage,
        num_retained: u32,
    ) -> Result<(Box<dyn CompletedCheckpointStore>, Vec<Discard>), JobError>;
}

/// Like [`execute_job`], with the attempts deployed by `deployer` (in cluster mode: on the
/// task managers). Everything else — the coordinator, restarts, recovery — is the same code.
pub fn execute_with(
    graph: &JobGraph,
    config: &ExecutionConfig,
    handle: &JobHandle,
    progress: &mut dyn FnMut(&JobProgress),
    deployer: &mut dyn Deployer,
    ha: Option<&mut dyn HighAvailabilityServices>,
) -> Result<JobSummary, JobError> {
    let result = run_job(graph, config, handle, progress, deployer, ha);
    match &result {
        Ok(summary) if summary.cancelled => handle.set_status(JobStatus::Cancelled),
        Ok(_) => handle.set_status(JobStatus::Finished),
        Err(e) => {
            handle.set_failure(e.to_string());
            handle.set_status(JobStatus::Failed);
        }
    }
    result
}

fn run_job(
    graph: &JobGraph,
    config: &ExecutionConfig,
    handle: &JobHandle,
    progress: &mut dyn FnMut(&JobProgress),
    deployer: &mut dyn Deployer,
    mut ha: Option<&mut dyn HighAvailabilityServices>,
) -> Result<JobSummary, JobError> {
    let stop = handle.stop_handle();
    graph.validate()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let storage = CheckpointStorage::open_configured(&config.checkpoint, &graph.name)?;
    // Ids continue above every checkpoint directory ever created, complete or not.
    let max_id = storage.max_checkpoint_id()?.unwrap_or_default();
    // In HA mode the job carries on from what ZooKeeper recorded; only a job's first leader
    // (nothing recorded yet) applies the start mode.
    let mut ha_store = None;
    let start = match ha.as_deref_mut() {
        Some(ha) => {
            let (store, evicted) =
                ha.completed_checkpoint_store(&storage, config.checkpoint.num_retained)?;
            for discard in evicted {
                storage.discard_checkpoint(discard.checkpoint)?;
                for path in discard.shared_paths {
                    storage.discard_file(&path)?;
                }
            }
            let recorded = store.latest().map(|c| c.id);
            ha_store = Some(store);
            match recorded {
                Some(id) => crate::restore::StartPoint {
                    latest: Some(storage.read_metadata(id)?),
                    older: Vec::new(),
                },
                None => start_point(&storage, config.start)?,
            }
        }
        None => start_point(&storage, config.start)?,
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
    let claimed = claim(&storage, config, &start, savepoint.is_some(), max_id)?;
    let restored_from = start
        .latest
        .as_ref()
        .or(savepoint.as_ref().map(|(_, m)| m))
        .map(|m| m.checkpoint.id);

    let (coordinator_tx, coordinator_rx) = crossbeam_channel::unbounded();
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let workers = SnapshotWorkers::start(
        config.snapshot_threads,
        storage.clone(),
        coordinator_tx.clone(),
        &config.checkpoint,
    );

    let job = JobId::from_name(&graph.name);
    let (sources, all) = subtask_ids(graph);
    let vertices = JobVertices {
        sources: sources.clone(),
        all,
    };
    // A store recovered from ZooKeeper holds its checkpoints already.
    let recovered = ha_store.as_ref().is_some_and(|s| s.latest().is_some());
    let mut coordinator = match ha_store {
        Some(store) => {
            CheckpointCoordinator::with_store(job, config.checkpoint.clone(), vertices, store)
        }
        None => CheckpointCoordinator::new(job, config.checkpoint.clone(), vertices),
    };
    let mut retained: Vec<_> = start.older.into_iter().map(|m| m.checkpoint).collect();
    let mut restore_from = start.latest;
    if !recovered {
        retained.extend(restore_from.as_ref().map(|m| m.checkpoint.clone()));
    }
    if recovered || !retained.is_empty() {
        // Restoring may evict checkpoints beyond num-retained (e.g. after lowering it).
        for action in coordinator.restore(retained, clock.now_ms()) {
            if let weir_checkpoint::Action::DiscardCheckpoint {
                checkpoint,
                shared_paths,
            } = action
            {
                storage.discard_checkpoint(checkpoint)?;
                for path in shared_paths {
                    storage.discard_file(&path)?;
                }
            }
        }
    }
    let driver = spawn_driver(
        DriverSetup {
            job,
            job_name: graph.name.clone(),
            max_parallelism: graph.max_parallelism,
            operators: graph
                .nodes
                .iter()
                .map(|n| OperatorMetadata {
                    uid: n.uid.clone(),
                    id: n.id(),
                    parallelism: n.parallelism,
                })
                .collect(),
            sources,
            checkpoint_timeout: config.checkpoint.timeout,
            savepoint_dir: config.savepoint_dir.clone(),
        },
        coordinator,
        match ha {
            Some(ha) => ha.checkpoint_id_counter(max_id)?,
            None => Box::new(StandaloneCheckpointIdCounter::starting_after(max_id)),
        },
        storage.clone(),
        clock.clone(),
        coordinator_rx,
        handle.clone(),
        events_tx.clone(),
    );
    handle.set_coordinator(Some(coordinator_tx.clone()));

    let mut restarts = RestartTracker::new(config.restart.clone());
    let mut watch = Watch::new();
    watch.claimed = claimed;
    let mut recovery: Option<(Instant, u32)> = None;
    let mut attempt = 0;
    let mut cancelled = false;
    let result = loop {
        let restore = match (&restore_from, &savepoint) {
            (Some(metadata), _) => Some(Restore {
                storage: &storage,
                metadata,
                savepoint: None,
            }),
            (None, Some((storage, metadata))) => Some(Restore {
                storage,
                metadata,
                savepoint: config.from_savepoint.as_deref(),
            }),
            (None, None) => None,
        };
        workers.begin_attempt(attempt);
        let deployed = match deployer.deploy(
            graph,
            config,
            restore,
            attempt,
            &coordinator_tx,
            &events_tx,
            &workers,
        ) {
            Ok(d) => d,
            Err(e) => break Err(e),
        };
        let _ = coordinator_tx.send(CoordinatorMessage::JobStatus(JobStatus::Running));
        handle.set_attempt(attempt, restarts.restarts(), deployed.metrics.clone());
        handle.set_status(JobStatus::Running);
        let outcome = watch.attempt(
            &deployed,
            &events_rx,
            &coordinator_tx,
            stop,
            progress,
            &mut recovery,
        );
        let failure = match outcome {
            Outcome::Finished => {
                // The final checkpoint completed (or the user's stop took none): let the
                // subtasks take their completion notices, then shut them down.
                shut_down(deployed, TaskControl::Shutdown);
                match late_failure(&events_rx, &mut watch) {
                    None => break Ok(()),
                    Some(failure) => failure,
                }
            }
            Outcome::Cancelled => {
                workers.cancel_attempt(attempt);
                shut_down(deployed, TaskControl::Cancel);
                cancelled = true;
                break Ok(());
            }
            Outcome::Failed(failure) => {
                let _ = coordinator_tx.send(CoordinatorMessage::JobStatus(JobStatus::Restarting));
                handle.set_status(JobStatus::Restarting);
                // Snapshots still queued for the failed attempt are not written: their
                // checkpoints are aborted and nothing would delete their files.
                workers.cancel_attempt(attempt);
                shut_down(deployed, TaskControl::Cancel);
                failure
            }
        };
        // Invariant: the attempt restores what the coordinator completed — not a checkpoint
        // whose metadata was still being written — and sees no event of the failed attempt.
        let (reply, latest) = crossbeam_channel::bounded(1);
        let _ = coordinator_tx.send(CoordinatorMessage::Sync(reply));
        let latest = latest.recv().ok().flatten();
        for event in events_rx.try_iter() {
            count_checkpoint(&mut watch.progress, event);
        }
        if !failure.recoverable {
            break Err(failure.cause);
        }
        let delay = match restarts.on_failure(clock.now_ms()) {
            RestartDecision::GiveUp => {
                tracing::error!(cause = %failure.cause, "the restart strategy gave up");
                break Err(failure.cause);
            }
            RestartDecision::RestartAfter(delay) => delay,
        };
        if !sleep_unless_stopped(delay, stop) {
            tracing::warn!("stopped while waiting to restart; the latest checkpoint stands");
            break Ok(());
        }
        restore_from = match latest.map(|id| storage.read_metadata(id)) {
            None => None,
            Some(Ok(metadata)) => Some(metadata),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the latest checkpoint is unusable; looking for an older one");
                match storage.find_latest() {
                    Ok(found) => found.metadata,
                    Err(e) => break Err(e.into()),
                }
            }
        };
        attempt += 1;
        tracing::warn!(
            attempt,
            checkpoint = restore_from.as_ref().map(|m| m.checkpoint.id.0),
            delay_ms = delay.as_millis() as u64,
            cause = %failure.cause,
            "restarting the job from its latest checkpoint"
        );
        recovery = Some((failure.at, attempt));
    };

    let drain = result.is_ok() && !cancelled;
    handle.set_coordinator(None);
    let _ = coordinator_tx.send(CoordinatorMessage::Shutdown { drain });
    let stats = driver.join();
    if let Ok(s) = &stats {
        handle.set_final_stats(s.clone());
    }
    drop(coordinator_tx);
    workers.join();
    for event in events_rx.try_iter() {
        count_checkpoint(&mut watch.progress, event);
    }
    result?;
    let stats =
        stats.map_err(|_| JobError::Failed("the checkpoint coordinator panicked".into()))?;
    let p = watch.progress;
    Ok(JobSummary {
        job_name: graph.name.clone(),
        elapsed: watch.started.elapsed(),
        records: p.records,
        checkpoints_completed: p.checkpoints_completed,
        checkpoints_failed: p.checkpoints_failed,
        last_checkpoint: p.last_checkpoint,
        restored_from,
        restarts: restarts.restarts(),
        cancelled,
        recovery_ms: watch.recovery_ms,
        retained: storage.list_completed()?,
        stats,
    })
}

/// Settles a claim an earlier run left (killed after its first checkpoint completed, before
/// deleting the claimed snapshot), and records this run's claim in claim mode. Returns the
/// storage to settle it in once this run's first checkpoint completed.
fn claim(
    storage: &CheckpointStorage,
    config: &ExecutionConfig,
    start: &crate::restore::StartPoint,
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
    start: &crate::restore::StartPoint,
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

/// Checks that a snapshot fits the job: the same max parallelism, and state only for operator
/// uids the job has — unless skipping unmatched state was allowed.
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
