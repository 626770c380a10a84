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
use crate::metrics::SubtaskMetrics;
use crate::operator::{OperatorContext, RestoredState};
use crate::restore::{check_compatible, start_point, subtask_state, StartMode};
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
        }
    }
}

/// Asks a running job to stop cleanly: a final checkpoint, then the sources end.
#[derive(Clone, Debug, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    pub fn new() -> StopHandle {
        StopHandle::default()
    }
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
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
    /// Completed checkpoints left in storage, oldest first.
    pub retained: Vec<CheckpointId>,
    pub stats: CheckpointStats,
}

struct Deployed {
    threads: Vec<(SubtaskId, JoinHandle<()>)>,
    controls: HashMap<SubtaskId, Sender<TaskControl>>,
    source_metrics: Vec<Arc<SubtaskMetrics>>,
    sources: Vec<SubtaskId>,
    all: Vec<SubtaskId>,
}

/// Runs `graph` to completion (bounded input, or a stop request) in this process.
pub fn execute(
    graph: &JobGraph,
    config: &ExecutionConfig,
    stop: &StopHandle,
    progress: &mut dyn FnMut(&JobProgress),
) -> Result<JobSummary, JobError> {
    graph.validate()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let storage = CheckpointStorage::open(&config.checkpoint.dir, &graph.name)?;
    // Ids continue above every checkpoint directory ever created, complete or not.
    let max_id = storage.max_checkpoint_id()?.unwrap_or_default();
    let start = start_point(&storage, config.start)?;
    for id in storage.discard_incomplete()? {
        tracing::info!(checkpoint = %id, "deleted the files of a checkpoint that never completed");
    }
    if let Some(latest) = &start.latest {
        check_compatible(graph, latest)?;
        tracing::info!(checkpoint = %latest.checkpoint.id, "restoring from checkpoint");
    }
    let restored_from = start.latest.as_ref().map(|m| m.checkpoint.id);

    let (coordinator_tx, coordinator_rx) = crossbeam_channel::unbounded();
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let workers = SnapshotWorkers::start(
        config.snapshot_threads,
        storage.clone(),
        coordinator_tx.clone(),
    );
    let deployed = deploy(
        graph,
        config,
        &storage,
        start.latest.as_ref(),
        &coordinator_tx,
        &events_tx,
        &workers,
    )?;

    let job = JobId::from_name(&graph.name);
    let mut coordinator = CheckpointCoordinator::new(
        job,
        config.checkpoint.clone(),
        JobVertices {
            sources: deployed.sources.clone(),
            all: deployed.all.clone(),
        },
    );
    let mut retained: Vec<_> = start.older.into_iter().map(|m| m.checkpoint).collect();
    retained.extend(start.latest.map(|m| m.checkpoint));
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
            sources: deployed.sources.clone(),
            checkpoint_timeout: config.checkpoint.timeout,
        },
        coordinator,
        Box::new(StandaloneCheckpointIdCounter::starting_after(max_id)),
        storage.clone(),
        clock,
        coordinator_rx,
        deployed.controls.clone(),
        events_tx.clone(),
    );
    let _ = coordinator_tx.send(CoordinatorMessage::JobStatus(JobStatus::Running));
    drop(events_tx);

    let (result, mut summary_parts) =
        supervise(&deployed, &events_rx, &coordinator_tx, stop, progress);

    // Teardown. On success the driver drains (the final checkpoint completes and its
    // notifications reach the sinks) before the subtasks are shut down.
    let drain = result.is_ok();
    if !drain {
        for tx in deployed.controls.values() {
            let _ = tx.send(TaskControl::Cancel);
        }
    }
    let _ = coordinator_tx.send(CoordinatorMessage::Shutdown { drain });
    let stats = driver.join();
    for tx in deployed.controls.values() {
        let _ = tx.send(TaskControl::Shutdown);
    }
    for (_, t) in deployed.threads {
        let _ = t.join();
    }
    drop(coordinator_tx);
    workers.join();
    // The final checkpoint completes while the driver drains: count it too.
    for event in events_rx.try_iter() {
        count_checkpoint(&mut summary_parts, event);
    }
    result?;
    let stats =
        stats.map_err(|_| JobError::Failed("the checkpoint coordinator panicked".into()))?;
    Ok(JobSummary {
        job_name: graph.name.clone(),
        elapsed: summary_parts.elapsed,
        records: summary_parts.records,
        checkpoints_completed: summary_parts.checkpoints_completed,
        checkpoints_failed: summary_parts.checkpoints_failed,
        last_checkpoint: summary_parts.last_checkpoint,
        restored_from,
        retained: storage.list_completed()?,
        stats,
    })
}

/// Watches the job until it finishes or fails, reporting progress.
fn supervise(
    deployed: &Deployed,
    events: &Receiver<JobEvent>,
    coordinator: &Sender<CoordinatorMessage>,
    stop: &StopHandle,
    progress: &mut dyn FnMut(&JobProgress),
) -> (Result<(), JobError>, JobProgress) {
    let started = Instant::now();
    let mut p = JobProgress {
        elapsed: Duration::ZERO,
        records: 0,
        records_per_second: 0.0,
        checkpoints_completed: 0,
        checkpoints_failed: 0,
        last_checkpoint: None,
    };
    let (mut exhausted, mut finished, mut stop_sent) = (0, 0, false);
    let mut last_report = (Instant::now(), 0u64);
    let total = deployed.all.len();
    let result = loop {
        match events.recv_timeout(Duration::from_millis(100)) {
            Ok(JobEvent::SourceExhausted(_)) => {
                exhausted += 1;
                if exhausted == deployed.sources.len() && !stop_sent {
                    stop_sent = true;
                    let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
                }
            }
            Ok(JobEvent::TaskFinished(_)) => {
                finished += 1;
                if finished == total {
                    break Ok(());
                }
            }
            Ok(JobEvent::TaskFailed { subtask, error }) => {
                let uid = deployed_uid(deployed, subtask);
                break Err(JobError::TaskFailed {
                    uid,
                    subtask: subtask.index,
                    error,
                });
            }
            Ok(JobEvent::JobFailed(reason)) => break Err(JobError::Failed(reason)),
            Ok(event @ JobEvent::CheckpointCompleted { .. }) => count_checkpoint(&mut p, event),
            Ok(event @ JobEvent::CheckpointAborted { .. }) => count_checkpoint(&mut p, event),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Err(JobError::Failed("job event channel closed".into()))
            }
        }
        if stop.is_stopped() && !stop_sent {
            stop_sent = true;
            tracing::info!("stopping: taking a final checkpoint");
            let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
        }
        if last_report.0.elapsed() >= Duration::from_millis(500) {
            p.records = deployed
                .source_metrics
                .iter()
                .map(|m| m.records_out())
                .sum();
            let dt = last_report.0.elapsed().as_secs_f64();
            p.records_per_second = (p.records - last_report.1) as f64 / dt;
            p.elapsed = started.elapsed();
            last_report = (Instant::now(), p.records);
            progress(&p);
        }
    };
    p.records = deployed
        .source_metrics
        .iter()
        .map(|m| m.records_out())
        .sum();
    p.elapsed = started.elapsed();
    (result, p)
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

fn deployed_uid(deployed: &Deployed, subtask: SubtaskId) -> String {
    deployed
        .threads
        .iter()
        .find(|(s, _)| *s == subtask)
        .and_then(|(_, t)| {
            t.thread()
                .name()
                .map(|n| n.rsplit_once('#').map_or(n, |(u, _)| u).to_string())
        })
        .unwrap_or_else(|| subtask.operator.to_string())
}

/// Creates every channel, writer and subtask, and starts the subtask threads.
#[allow(clippy::too_many_arguments)]
fn deploy(
    graph: &JobGraph,
    config: &ExecutionConfig,
    storage: &CheckpointStorage,
    restore: Option<&weir_storage::CheckpointMetadata>,
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
        threads: Vec::new(),
        controls: HashMap::new(),
        source_metrics: Vec::new(),
        sources: Vec::new(),
        all: Vec::new(),
    };
    let mut bodies = Vec::new();
    for (node_index, node) in graph.nodes.iter().enumerate().take(n) {
        let uid: Arc<str> = Arc::from(node.uid.as_str());
        for index in 0..node.parallelism {
            let subtask = SubtaskId::new(node.id(), index);
            let key_groups =
                KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
            let restored = match restore {
                Some(metadata) => subtask_state(storage, metadata, node, index, key_groups)?,
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
                in_flight: 0,
                snapshot_done: crossbeam_channel::unbounded(),
            };
            let ins = std::mem::take(&mut inputs[node_index][index as usize]);
            let outs = std::mem::take(&mut outputs[node_index][index as usize]);
            let body = (node.factory)(ins, outs, rt).map_err(|e| {
                JobError::InvalidJob(format!("cannot build '{}' subtask {index}: {e}", node.uid))
            })?;
            deployed.controls.insert(subtask, control_tx);
            deployed.all.push(subtask);
            if node.role == NodeRole::Source {
                deployed.sources.push(subtask);
                deployed.source_metrics.push(metrics);
            }
            bodies.push((subtask, format!("{}#{index}", node.uid), body));
        }
    }
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
                        tracing::error!(%subtask, error = %e, "subtask failed");
                        let _ = events.send(JobEvent::TaskFailed {
                            subtask,
                            error: e.to_string(),
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
