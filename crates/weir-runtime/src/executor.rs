//! The local executor: deploys a [`JobGraph`] as threads in this process — one task loop per
//! subtask, a pool of snapshot workers and the coordinator's driver — and runs it to the end.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_checkpoint::{
    CheckpointCoordinator, CheckpointStats, JobStatus, JobVertices, StandaloneCheckpointIdCounter,
};
use weir_core::config::CheckpointConfig;
use weir_core::{CheckpointId, Clock, JobId, KeyGroupRange, SubtaskId, SystemClock};
use weir_storage::{CheckpointStorage, OperatorMetadata};

use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::driver::{spawn_driver, DriverSetup};
use crate::error::{JobError, TaskError};
use crate::graph::{Erased, JobGraph, NodeRole};
use crate::handle::JobHandle;
use crate::injection::FailureInjection;
use crate::metrics::SubtaskMetrics;
use crate::operator::{OperatorContext, RestoredState};
use crate::restart::{RestartDecision, RestartStrategy, RestartTracker};
use crate::restore::{start_point, subtask_state, StartMode};
use crate::snapshot::SnapshotWorkers;
use crate::task::TaskRuntime;

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
            snapshot_threads: 2,
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

struct Deployed {
    attempt: u32,
    metrics: Vec<(SubtaskId, usize, u32, Arc<SubtaskMetrics>)>,
    uids: HashMap<SubtaskId, String>,
    threads: Vec<(SubtaskId, JoinHandle<()>)>,
    controls: HashMap<SubtaskId, Sender<TaskControl>>,
    source_metrics: Vec<Arc<SubtaskMetrics>>,
    sources: Vec<SubtaskId>,
    all: Vec<SubtaskId>,
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
    let result = run_job(graph, config, handle, progress);
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
) -> Result<JobSummary, JobError> {
    let stop = handle.stop_handle();
    graph.validate()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let storage = CheckpointStorage::open_configured(&config.checkpoint, &graph.name)?;
    // Ids continue above every checkpoint directory ever created, complete or not.
    let max_id = storage.max_checkpoint_id()?.unwrap_or_default();
    let start = start_point(&storage, config.start)?;
    for id in storage.discard_incomplete()? {
        tracing::info!(checkpoint = %id, "deleted the files of a checkpoint that never completed");
    }
    if let Some(latest) = &start.latest {
        check_restorable(graph, latest, config.allow_non_restored_state)?;
        tracing::info!(checkpoint = %latest.checkpoint.id, "restoring from checkpoint");
    }
    let savepoint = open_savepoint(graph, config, &start)?;
    let claimed = savepoint
        .as_ref()
        .filter(|_| config.claim_mode == ClaimMode::Claim)
        .and_then(|_| config.from_savepoint.clone());
    let max_id = max_id.max(
        savepoint
            .as_ref()
            .map(|(_, m)| m.checkpoint.id)
            .unwrap_or_default(),
    );
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
        config.checkpoint.incremental,
    );

    let job = JobId::from_name(&graph.name);
    let (sources, all) = subtask_ids(graph);
    let mut coordinator = CheckpointCoordinator::new(
        job,
        config.checkpoint.clone(),
        JobVertices {
            sources: sources.clone(),
            all,
        },
    );
    let mut retained: Vec<_> = start.older.into_iter().map(|m| m.checkpoint).collect();
    let mut restore_from = start.latest;
    retained.extend(restore_from.as_ref().map(|m| m.checkpoint.clone()));
    if !retained.is_empty() {
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
        Box::new(StandaloneCheckpointIdCounter::starting_after(max_id)),
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
        let deployed = match deploy(
            graph,
            config,
            restore_from
                .as_ref()
                .map(|m| (&storage, m))
                .or(savepoint.as_ref().map(|(s, m)| (s, m))),
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
                shut_down(deployed, TaskControl::Cancel);
                cancelled = true;
                break Ok(());
            }
            Outcome::Failed(failure) => {
                let _ = coordinator_tx.send(CoordinatorMessage::JobStatus(JobStatus::Restarting));
                handle.set_status(JobStatus::Restarting);
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

/// Why an attempt ended badly.
struct Failure {
    cause: JobError,
    recoverable: bool,
    at: Instant,
}

enum Outcome {
    Finished,
    Cancelled,
    Failed(Failure),
}

/// Why the sources are being stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// Bounded sources ran out: the final checkpoint must complete, or the attempt failed.
    EndOfInput,
    /// Someone asked the job to stop: without a final checkpoint the last one stands.
    Requested,
    /// Stop with a savepoint: if the savepoint fails, the job goes on (restarting from its
    /// latest checkpoint, as its sources have already ended).
    Savepoint,
}

/// Watches attempts of a job and keeps its progress across them.
struct Watch {
    started: Instant,
    progress: JobProgress,
    /// Records emitted by the sources of earlier attempts.
    records_before: u64,
    /// A claimed savepoint, deleted once the first checkpoint after it completed.
    claimed: Option<std::path::PathBuf>,
    recovery_ms: Vec<u64>,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            started: Instant::now(),
            progress: JobProgress {
                elapsed: Duration::ZERO,
                records: 0,
                records_per_second: 0.0,
                checkpoints_completed: 0,
                checkpoints_failed: 0,
                last_checkpoint: None,
            },
            records_before: 0,
            claimed: None,
            recovery_ms: Vec::new(),
        }
    }

    /// Watches one attempt until it finishes or fails, reporting progress.
    fn attempt(
        &mut self,
        deployed: &Deployed,
        events: &Receiver<JobEvent>,
        coordinator: &Sender<CoordinatorMessage>,
        stop: &StopHandle,
        progress: &mut dyn FnMut(&JobProgress),
        recovery: &mut Option<(Instant, u32)>,
    ) -> Outcome {
        let (mut exhausted, mut finished) = (0, 0);
        let mut stopping: Option<StopReason> = None;
        let mut final_checkpoint: Option<CheckpointId> = None;
        let mut final_outcome: Option<Result<(), String>> = None;
        let mut last_report = (Instant::now(), self.progress.records);
        let total = deployed.all.len();
        let failed = |cause: JobError, recoverable: bool| {
            Outcome::Failed(Failure {
                cause,
                recoverable,
                at: Instant::now(),
            })
        };
        let outcome = loop {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(JobEvent::SourceExhausted(_)) => {
                    exhausted += 1;
                    if exhausted == deployed.sources.len() && stopping.is_none() {
                        stopping = Some(StopReason::EndOfInput);
                        let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
                    }
                }
                Ok(JobEvent::TaskFinished(_)) => finished += 1,
                Ok(JobEvent::TaskFailed {
                    subtask,
                    error,
                    recoverable,
                }) => {
                    let cause = if recoverable {
                        JobError::TaskFailed {
                            uid: deployed.uid(subtask),
                            subtask: subtask.index,
                            error,
                        }
                    } else {
                        JobError::BadInput(format!(
                            "'{}' subtask {}: {error}",
                            deployed.uid(subtask),
                            subtask.index
                        ))
                    };
                    tracing::warn!(%cause, "attempt {} failed", deployed.attempt);
                    break failed(cause, recoverable);
                }
                Ok(JobEvent::JobFailed(reason)) => break failed(JobError::Failed(reason), true),
                Ok(JobEvent::FinalCheckpointTriggered { id, savepoint }) => {
                    final_checkpoint = Some(id);
                    if savepoint {
                        stopping = Some(StopReason::Savepoint);
                    } else if stopping.is_none() {
                        stopping = Some(StopReason::Requested);
                    }
                }
                Ok(JobEvent::FinalCheckpointFailed(reason)) => final_outcome = Some(Err(reason)),
                Ok(JobEvent::FirstRecordProcessed { attempt }) => {
                    if let Some((failed_at, a)) = *recovery {
                        if a == attempt {
                            let ms = failed_at.elapsed().as_millis() as u64;
                            tracing::warn!(attempt, recovery_ms = ms, "job recovered: {ms} ms from the failure to the first record processed");
                            self.recovery_ms.push(ms);
                            *recovery = None;
                        }
                    }
                }
                Ok(event) => {
                    if let (JobEvent::CheckpointCompleted { id, .. }, Some(path)) =
                        (&event, &self.claimed)
                    {
                        // Invariant: a claimed savepoint goes only once a newer checkpoint holds
                        // the job's whole state.
                        match std::fs::remove_dir_all(path) {
                            Ok(()) => {
                                tracing::info!(checkpoint = %id, path = %path.display(), "deleted the claimed savepoint")
                            }
                            Err(e) => {
                                tracing::warn!(path = %path.display(), error = %e, "could not delete the claimed savepoint")
                            }
                        }
                        self.claimed = None;
                    }
                    match &event {
                        JobEvent::CheckpointCompleted { id, .. }
                            if Some(*id) == final_checkpoint =>
                        {
                            final_outcome = Some(Ok(()))
                        }
                        JobEvent::CheckpointAborted { id, reason }
                            if Some(*id) == final_checkpoint =>
                        {
                            final_outcome = Some(Err(reason.clone()))
                        }
                        _ => {}
                    }
                    count_checkpoint(&mut self.progress, event);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    break failed(JobError::Failed("job event channel closed".into()), false)
                }
            }
            if finished == total {
                match (stopping, &final_outcome) {
                    (_, Some(Ok(()))) | (None, _) => break Outcome::Finished,
                    (Some(StopReason::Requested), Some(Err(reason))) => {
                        tracing::warn!(%reason, "stopped without a final checkpoint; the latest one stands");
                        break Outcome::Finished;
                    }
                    (Some(StopReason::EndOfInput), Some(Err(reason))) => {
                        let cause =
                            JobError::Failed(format!("the final checkpoint failed: {reason}"));
                        break failed(cause, true);
                    }
                    (Some(StopReason::Savepoint), Some(Err(reason))) => {
                        let cause =
                            JobError::Failed(format!("stop with savepoint failed: {reason}"));
                        break failed(cause, true);
                    }
                    (Some(_), None) => {} // its outcome is on the way
                }
            }
            if stop.is_cancelled() {
                break Outcome::Cancelled;
            }
            if stop.is_stopped() && stopping.is_none() {
                stopping = Some(StopReason::Requested);
                tracing::info!("stopping: taking a final checkpoint");
                let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
            }
            if last_report.0.elapsed() >= Duration::from_millis(500) {
                let p = &mut self.progress;
                p.records = self.records_before + deployed.source_records();
                p.records_per_second = p.records.saturating_sub(last_report.1) as f64
                    / last_report.0.elapsed().as_secs_f64();
                p.elapsed = self.started.elapsed();
                last_report = (Instant::now(), p.records);
                progress(p);
            }
        };
        self.records_before += deployed.source_records();
        self.progress.records = self.records_before;
        self.progress.elapsed = self.started.elapsed();
        outcome
    }
}

/// A subtask failure reported while the attempt was shutting down (e.g. a failed commit).
fn late_failure(events: &Receiver<JobEvent>, watch: &mut Watch) -> Option<Failure> {
    let mut failure = None;
    for event in events.try_iter() {
        match event {
            JobEvent::TaskFailed {
                error, recoverable, ..
            } if failure.is_none() => {
                failure = Some(Failure {
                    cause: JobError::Failed(error),
                    recoverable,
                    at: Instant::now(),
                })
            }
            other => count_checkpoint(&mut watch.progress, other),
        }
    }
    failure
}

/// Sends `control` (Shutdown or Cancel) to every subtask and waits for all of them.
fn shut_down(deployed: Deployed, control: TaskControl) {
    for tx in deployed.controls.values() {
        let _ = tx.send(control.clone());
    }
    for (_, t) in deployed.threads {
        let _ = t.join();
    }
}

/// Sleeps `delay`, waking early (and returning false) if the job is asked to stop.
fn sleep_unless_stopped(delay: Duration, stop: &StopHandle) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if stop.is_stopped() {
            return false;
        }
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.is_stopped()
}

/// The subtasks of the graph: (sources, all).
fn subtask_ids(graph: &JobGraph) -> (Vec<SubtaskId>, Vec<SubtaskId>) {
    let mut sources = Vec::new();
    let mut all = Vec::new();
    for node in &graph.nodes {
        for index in 0..node.parallelism {
            let id = SubtaskId::new(node.id(), index);
            all.push(id);
            if node.role == NodeRole::Source {
                sources.push(id);
            }
        }
    }
    (sources, all)
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
    if start.latest.is_some() {
        return Err(JobError::Restore(format!(
            "both --resume and --from-savepoint {} were given: choose one",
            path.display()
        )));
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

fn count_checkpoint(p: &mut JobProgress, event: JobEvent) {
    match event {
        JobEvent::CheckpointCompleted {
            id,
            duration_ms,
            size_bytes,
        } => {
            p.checkpoints_completed += 1;
            p.last_checkpoint = Some(LastCheckpoint {
                id,
                duration_ms,
                size_bytes,
            });
        }
        JobEvent::CheckpointAborted { .. } => p.checkpoints_failed += 1,
        _ => {}
    }
}

impl Deployed {
    fn uid(&self, subtask: SubtaskId) -> String {
        self.uids
            .get(&subtask)
            .cloned()
            .unwrap_or_else(|| subtask.operator.to_string())
    }

    fn source_records(&self) -> u64 {
        self.source_metrics.iter().map(|m| m.records_out()).sum()
    }
}

/// Creates every channel, writer and subtask of one attempt, and starts the subtask threads.
#[allow(clippy::too_many_arguments)]
fn deploy(
    graph: &JobGraph,
    config: &ExecutionConfig,
    restore: Option<(&CheckpointStorage, &weir_storage::CheckpointMetadata)>,
    attempt: u32,
    coordinator: &Sender<CoordinatorMessage>,
    events: &Sender<JobEvent>,
    workers: &SnapshotWorkers,
) -> Result<Deployed, JobError> {
    let n = graph.nodes.len();
    let mut inputs: Vec<Vec<Vec<Erased>>> = graph
        .nodes
        .iter()
        .map(|node| (0..node.parallelism).map(|_| Vec::new()).collect())
        .collect();
    let mut outputs: Vec<Vec<Vec<Erased>>> = inputs
        .iter()
        .map(|subtasks| subtasks.iter().map(|_| Vec::new()).collect())
        .collect();
    for edge in &graph.edges {
        let partition = graph.resolved_partition(edge);
        let consumers = graph.nodes[edge.to].parallelism as usize;
        for (i, producer_outputs) in outputs[edge.from].iter_mut().enumerate() {
            let targets = match partition {
                crate::partition::Partition::Forward => i..i + 1,
                _ => 0..consumers,
            };
            let mut channels = Vec::with_capacity(targets.len());
            for j in targets {
                let (sink, receiver) = (edge.channel)(config.channel_capacity);
                channels.push(sink);
                inputs[edge.to][j].push(receiver);
            }
            let writer = (edge.writer)(
                partition,
                channels,
                i,
                graph.max_parallelism,
                config.batch_size,
            );
            producer_outputs.push(writer);
        }
    }

    let mut deployed = Deployed {
        attempt,
        metrics: Vec::new(),
        uids: HashMap::new(),
        threads: Vec::new(),
        controls: HashMap::new(),
        source_metrics: Vec::new(),
        sources: Vec::new(),
        all: Vec::new(),
    };
    let mut bodies = Vec::new();
    let restore_start = Instant::now();
    for (node_index, node) in graph.nodes.iter().enumerate().take(n) {
        let uid: Arc<str> = Arc::from(node.uid.as_str());
        for index in 0..node.parallelism {
            let subtask = SubtaskId::new(node.id(), index);
            let key_groups =
                KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
            let restored = match restore {
                Some((storage, metadata)) => {
                    subtask_state(storage, metadata, node, index, key_groups)?
                }
                None => RestoredState::default(),
            };
            let (control_tx, control_rx) = crossbeam_channel::unbounded();
            let metrics = Arc::new(SubtaskMetrics::default());
            let rt = TaskRuntime {
                subtask,
                uid: uid.clone(),
                ctx: OperatorContext {
                    uid: node.uid.clone(),
                    name: node.name.clone(),
                    index,
                    parallelism: node.parallelism,
                    max_parallelism: graph.max_parallelism,
                    key_groups,
                },
                control: control_rx,
                coordinator: coordinator.clone(),
                events: events.clone(),
                snapshots: workers.sender(),
                metrics: metrics.clone(),
                batch_size: config.batch_size,
                channel_capacity: config.channel_capacity,
                buffer_timeout: config.buffer_timeout,
                mode: config.checkpoint.mode,
                restored,
                attempt,
                injector: config
                    .failure_injection
                    .as_ref()
                    .and_then(|f| f.for_subtask(&node.uid, index, attempt)),
                first_record_reported: false,
                in_flight: 0,
                snapshot_done: crossbeam_channel::unbounded(),
            };
            let ins = std::mem::take(&mut inputs[node_index][index as usize]);
            let outs = std::mem::take(&mut outputs[node_index][index as usize]);
            let body = (node.factory)(ins, outs, rt).map_err(|e| {
                JobError::InvalidJob(format!("cannot build '{}' subtask {index}: {e}", node.uid))
            })?;
            deployed.controls.insert(subtask, control_tx);
            deployed.uids.insert(subtask, node.uid.clone());
            deployed
                .metrics
                .push((subtask, node_index, index, metrics.clone()));
            deployed.all.push(subtask);
            if node.role == NodeRole::Source {
                deployed.sources.push(subtask);
                deployed.source_metrics.push(metrics);
            }
            bodies.push((subtask, format!("{}#{index}", node.uid), body));
        }
    }
    if let Some((_, metadata)) = restore {
        let bytes = metadata.checkpoint.state_size();
        let ms = restore_start.elapsed().as_millis() as u64;
        let rate = bytes as f64 / 1e6 / (ms.max(1) as f64 / 1000.0);
        tracing::info!(
            checkpoint = %metadata.checkpoint.id,
            bytes,
            ms,
            "restored {:.1} MB of state in {ms} ms ({rate:.0} MB/s)",
            bytes as f64 / 1e6
        );
    }
    // Invariant: the driver knows the new attempt before any of its subtasks can report, or it
    // would take their first messages for stale ones.
    let _ = coordinator.send(CoordinatorMessage::NewAttempt {
        attempt,
        controls: deployed.controls.clone(),
    });
    for (subtask, name, body) in bodies {
        let events = events.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let result = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
                    Ok(r) => r,
                    Err(panic) => Err(TaskError::Panic(panic_message(&panic))),
                };
                match result {
                    Ok(()) => {}
                    // A closed channel after a failure elsewhere is a consequence, not a cause.
                    Err(TaskError::ChannelClosed) => {}
                    Err(e) => {
                        let recoverable = !matches!(e, TaskError::BadInput(_));
                        tracing::debug!(%subtask, error = %e, "subtask failed");
                        let _ = events.send(JobEvent::TaskFailed {
                            subtask,
                            error: e.to_string(),
                            recoverable,
                        });
                    }
                }
            })
            .map_err(|e| JobError::Failed(format!("cannot start a subtask thread: {e}")))?;
        deployed.threads.push((subtask, thread));
    }
    Ok(deployed)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}
