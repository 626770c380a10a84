//! Deploying one attempt of a job: every channel, writer and subtask, on its own thread.

use crossbeam_channel::Sender;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use weir_core::{KeyGroupRange, SubtaskId};
use weir_storage::CheckpointStorage;

use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::error::{JobError, TaskError};
use crate::executor::ExecutionConfig;
use crate::graph::{Erased, JobGraph, NodeRole};
use crate::metrics::SubtaskMetrics;
use crate::operator::{OperatorContext, RestoredState};
use crate::restore::subtask_state;
use crate::snapshot::SnapshotWorkers;
use crate::task::TaskRuntime;

pub(crate) struct Deployed {
    pub(crate) attempt: u32,
    pub(crate) metrics: Vec<(SubtaskId, usize, u32, Arc<SubtaskMetrics>)>,
    pub(crate) uids: HashMap<SubtaskId, String>,
    pub(crate) threads: Vec<(SubtaskId, JoinHandle<()>)>,
    pub(crate) controls: HashMap<SubtaskId, Sender<TaskControl>>,
    pub(crate) source_metrics: Vec<Arc<SubtaskMetrics>>,
    pub(crate) sources: Vec<SubtaskId>,
    pub(crate) all: Vec<SubtaskId>,
}

impl Deployed {
    pub(crate) fn uid(&self, subtask: SubtaskId) -> String {
        self.uids
            .get(&subtask)
            .cloned()
            .unwrap_or_else(|| subtask.operator.to_string())
    }

    pub(crate) fn source_records(&self) -> u64 {
        self.source_metrics.iter().map(|m| m.records_out()).sum()
    }
}

/// Reads the state of every subtask of `graph` from `metadata`, in the order of the graph's
/// nodes and their subtasks, on a few threads at once: the files of a large state are read
/// side by side (each read waits on the disk), then each subtask decodes its own in its thread.
/// The first error in that order is returned.
fn read_states(
    graph: &JobGraph,
    storage: &CheckpointStorage,
    metadata: &weir_storage::CheckpointMetadata,
) -> Result<Vec<RestoredState>, JobError> {
    let subtasks: Vec<(&crate::graph::Node, u32)> = graph
        .nodes
        .iter()
        .flat_map(|node| (0..node.parallelism).map(move |index| (node, index)))
        .collect();
    let readers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8)
        .min(subtasks.len().max(1));
    let next = AtomicUsize::new(0);
    let read = |i: usize| {
        let (node, index) = subtasks[i];
        let key_groups = KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
        (i, subtask_state(storage, metadata, node, index, key_groups))
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
    results.into_iter().map(|(_, r)| r).collect()
}

/// Creates every channel, writer and subtask of one attempt, and starts the subtask threads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn deploy(
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
    let alignment = crate::alignment::AlignmentGroups::default();
    let mut restored_states = match restore {
        Some((storage, metadata)) => read_states(graph, storage, metadata)?,
        None => Vec::new(),
    }
    .into_iter();
    for (node_index, node) in graph.nodes.iter().enumerate().take(n) {
        let uid: Arc<str> = Arc::from(node.uid.as_str());
        for index in 0..node.parallelism {
            let subtask = SubtaskId::new(node.id(), index);
            let key_groups =
                KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
            let restored = restored_states.next().unwrap_or_default();
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
                alignment: alignment.clone(),
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

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Sends `control` (Shutdown or Cancel) to every subtask and waits for all of them.
pub(crate) fn shut_down(deployed: Deployed, control: TaskControl) {
    for tx in deployed.controls.values() {
        let _ = tx.send(control.clone());
    }
    for (_, t) in deployed.threads {
        let _ = t.join();
    }
}

/// The subtasks of the graph: (sources, all).
pub(crate) fn subtask_ids(graph: &JobGraph) -> (Vec<SubtaskId>, Vec<SubtaskId>) {
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
