//! The local executor: deploys a [`JobGraph`] as threads in this process — one task loop per
//! subtask, a pool of snapshot workers and the coordinator's driver — and runs it to the end.

use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;
use weir_checkpoint::{
    Action, CheckpointCoordinator, CheckpointIdCounter, JobStatus, JobVertices,
    StandaloneCheckpointIdCounter,
};
use weir_core::{Clock, JobId, SubtaskId, SystemClock};
use weir_storage::{CheckpointMetadata, CheckpointStorage, OperatorMetadata};

use crate::config::ExecutionConfig;
use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::deploy::{shut_down, subtask_ids, Deployer, LocalDeployer};
use crate::driver::{spawn_driver, DriverSetup};
use crate::error::JobError;
use crate::graph::JobGraph;
use crate::ha::HighAvailabilityServices;
use crate::handle::{JobHandle, StopHandle};
use crate::progress::{JobProgress, JobSummary};
use crate::restart::{RestartDecision, RestartTracker};
use crate::restore::{Plan, Restore};
use crate::snapshot::SnapshotWorkers;
use crate::supervise::{count_checkpoint, late_failure, sleep_unless_stopped, Outcome, Watch};

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
    graph.validate()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let storage = CheckpointStorage::open_configured(&config.checkpoint, &graph.name)?;
    let mut plan = crate::restore::plan(graph, config, &storage, ha.as_deref_mut())?;
    let restored_from = plan.restored_from();
    let (coordinator_tx, coordinator_rx) = crossbeam_channel::unbounded();
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let workers = SnapshotWorkers::start(
        config.snapshot_threads,
        storage.clone(),
        coordinator_tx.clone(),
        &config.checkpoint,
    );
    let (sources, all) = subtask_ids(graph);
    let vertices = JobVertices {
        sources: sources.clone(),
        all,
    };
    let coordinator =
        restored_coordinator(graph, config, vertices, &storage, &mut plan, clock.as_ref())?;
    let counter: Box<dyn CheckpointIdCounter> = match ha {
        Some(ha) => ha.checkpoint_id_counter(plan.max_id)?,
        None => Box::new(StandaloneCheckpointIdCounter::starting_after(plan.max_id)),
    };
    let driver = spawn_driver(
        driver_setup(graph, config, sources),
        coordinator,
        counter,
        storage.clone(),
        clock.clone(),
        coordinator_rx,
        handle.clone(),
        events_tx.clone(),
    );
    handle.set_coordinator(Some(coordinator_tx.clone()));
    handle.set_state_backend(config.state_backend.kind);

    let attempts = Attempts {
        graph,
        config,
        handle,
        storage: &storage,
        savepoint: plan.savepoint.as_ref(),
        clock: clock.as_ref(),
        coordinator: &coordinator_tx,
        events_tx: &events_tx,
        events: &events_rx,
        workers: &workers,
    };
    let mut watch = Watch::new();
    watch.claimed = plan.claimed.take();
    let ended = attempts.run(plan.latest.take(), watch, deployer, progress);

    // Shut the coordinator down: a final drain unless the job failed or was cancelled.
    handle.set_coordinator(None);
    let drain = ended.result.is_ok() && !ended.cancelled;
    let _ = coordinator_tx.send(CoordinatorMessage::Shutdown { drain });
    let stats = driver.join();
    if let Ok(s) = &stats {
        handle.set_final_stats(s.clone());
    }
    drop(coordinator_tx);
    workers.join();
    let mut watch = ended.watch;
    for event in events_rx.try_iter() {
        count_checkpoint(&mut watch.progress, event);
    }
    ended.result?;
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
        restarts: ended.restarts,
        cancelled: ended.cancelled,
        recovery_ms: watch.recovery_ms,
        retained: storage.list_completed()?,
        stats,
    })
}

/// The coordinator, holding the checkpoints the job retains (those ZooKeeper recorded, or
/// those found in storage). Restoring may evict checkpoints beyond `num-retained` (after it
/// was lowered): their files are deleted.
fn restored_coordinator(
    graph: &JobGraph,
    config: &ExecutionConfig,
    vertices: JobVertices,
    storage: &CheckpointStorage,
    plan: &mut Plan,
    clock: &dyn Clock,
) -> Result<CheckpointCoordinator, JobError> {
    let job = JobId::from_name(&graph.name);
    // A store recovered from ZooKeeper holds its checkpoints already.
    let recovered = plan.ha_store.as_ref().is_some_and(|s| s.latest().is_some());
    let mut coordinator = match plan.ha_store.take() {
        Some(store) => {
            CheckpointCoordinator::with_store(job, config.checkpoint.clone(), vertices, store)
        }
        None => CheckpointCoordinator::new(job, config.checkpoint.clone(), vertices),
    };
    let mut retained: Vec<_> = std::mem::take(&mut plan.older)
        .into_iter()
        .map(|m| m.checkpoint)
        .collect();
    if !recovered {
        retained.extend(plan.latest.as_ref().map(|m| m.checkpoint.clone()));
    }
    if recovered || !retained.is_empty() {
        for action in coordinator.restore(retained, clock.now_ms()) {
            if let Action::DiscardCheckpoint {
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
    Ok(coordinator)
}

/// What the driver needs to know of the job.
fn driver_setup(
    graph: &JobGraph,
    config: &ExecutionConfig,
    sources: Vec<SubtaskId>,
) -> DriverSetup {
    DriverSetup {
        job: JobId::from_name(&graph.name),
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
    }
}

/// What every attempt of a job shares.
struct Attempts<'a> {
    graph: &'a JobGraph,
    config: &'a ExecutionConfig,
    handle: &'a JobHandle,
    storage: &'a CheckpointStorage,
    /// A snapshot the job does not own, restored by attempts until a checkpoint completes.
    savepoint: Option<&'a (CheckpointStorage, CheckpointMetadata)>,
    clock: &'a dyn Clock,
    coordinator: &'a Sender<CoordinatorMessage>,
    events_tx: &'a Sender<JobEvent>,
    events: &'a Receiver<JobEvent>,
    workers: &'a SnapshotWorkers,
}

/// How the attempts of a job ended.
struct Ended {
    result: Result<(), JobError>,
    cancelled: bool,
    restarts: u32,
    watch: Watch,
}

impl Attempts<'_> {
    /// Deploys attempt after attempt — the first from `restore_from` (or the savepoint), each
    /// later one from the latest completed checkpoint — until the job finishes, is cancelled,
    /// or fails beyond what the restart strategy allows.
    fn run(
        &self,
        mut restore_from: Option<CheckpointMetadata>,
        mut watch: Watch,
        deployer: &mut dyn Deployer,
        progress: &mut dyn FnMut(&JobProgress),
    ) -> Ended {
        let stop = self.handle.stop_handle();
        let mut restarts = RestartTracker::new(self.config.restart.clone());
        let mut recovery: Option<(Instant, u32)> = None;
        let mut attempt = 0;
        let mut cancelled = false;
        let result = loop {
            let restore = match (&restore_from, self.savepoint) {
                (Some(metadata), _) => Some(Restore {
                    storage: self.storage,
                    metadata,
                    savepoint: None,
                }),
                (None, Some((storage, metadata))) => Some(Restore {
                    storage,
                    metadata,
                    savepoint: self.config.from_savepoint.as_deref(),
                }),
                (None, None) => None,
            };
            self.workers.begin_attempt(attempt);
            let deployed = match deployer.deploy(
                self.graph,
                self.config,
                restore,
                attempt,
                self.coordinator,
                self.events_tx,
                self.workers,
            ) {
                Ok(d) => d,
                Err(e) => break Err(e),
            };
            let _ = self
                .coordinator
                .send(CoordinatorMessage::JobStatus(JobStatus::Running));
            self.handle
                .set_attempt(attempt, restarts.restarts(), deployed.metrics.clone());
            self.handle.set_status(JobStatus::Running);
            let outcome = watch.attempt(
                &deployed,
                self.events,
                self.coordinator,
                stop,
                progress,
                &mut recovery,
            );
            let failure = match outcome {
                Outcome::Finished => {
                    // The final checkpoint completed (or the user's stop took none): let the
                    // subtasks take their completion notices, then shut them down.
                    shut_down(deployed, TaskControl::Shutdown);
                    match late_failure(self.events, &mut watch) {
                        None => break Ok(()),
                        Some(failure) => failure,
                    }
                }
                Outcome::Cancelled => {
                    self.workers.cancel_attempt(attempt);
                    shut_down(deployed, TaskControl::Cancel);
                    cancelled = true;
                    break Ok(());
                }
                Outcome::Failed(failure) => {
                    let _ = self
                        .coordinator
                        .send(CoordinatorMessage::JobStatus(JobStatus::Restarting));
                    self.handle.set_status(JobStatus::Restarting);
                    // Snapshots still queued for the failed attempt are not written: their
                    // checkpoints are aborted and nothing would delete their files.
                    self.workers.cancel_attempt(attempt);
                    shut_down(deployed, TaskControl::Cancel);
                    failure
                }
            };
            let latest = self.completed_so_far(&mut watch);
            if !failure.recoverable {
                break Err(failure.cause);
            }
            let delay = match restarts.on_failure(self.clock.now_ms()) {
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
            restore_from = match self.readable(latest) {
                Ok(metadata) => metadata,
                Err(e) => break Err(e),
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
        Ended {
            result,
            cancelled,
            restarts: restarts.restarts(),
            watch,
        }
    }

    /// The latest checkpoint the coordinator completed, once every event of the failed
    /// attempt has been counted.
    // Invariant: the next attempt restores what the coordinator completed — not a checkpoint
    // whose metadata was still being written — and sees no event of the failed attempt.
    fn completed_so_far(&self, watch: &mut Watch) -> Option<weir_core::CheckpointId> {
        let (reply, latest) = crossbeam_channel::bounded(1);
        let _ = self.coordinator.send(CoordinatorMessage::Sync(reply));
        let latest = latest.recv().ok().flatten();
        for event in self.events.try_iter() {
            count_checkpoint(&mut watch.progress, event);
        }
        latest
    }

    /// The metadata of checkpoint `latest`, or of the newest intact one if it is unusable.
    fn readable(
        &self,
        latest: Option<weir_core::CheckpointId>,
    ) -> Result<Option<CheckpointMetadata>, JobError> {
        match latest.map(|id| self.storage.read_metadata(id)) {
            None => Ok(None),
            Some(Ok(metadata)) => Ok(Some(metadata)),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the latest checkpoint is unusable; looking for an older one");
                match self.storage.find_latest()?.metadata {
                    Some(older) => Ok(Some(older)),
                    // Invariant: a job that completed a checkpoint never restarts from the
                    // beginning: its sinks committed output that a fresh start would repeat.
                    None => Err(JobError::Restore(format!(
                        "the latest checkpoint is unusable ({e}) and no older one remains in {}; \
                         the job does not start over, since its committed output would be \
                         written again",
                        self.storage.root()
                    ))),
                }
            }
        }
    }
}
