//! Deploying one attempt of a job: every channel, writer and subtask, on its own thread.

use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use weir_core::{KeyGroupRange, SubtaskId};

use crate::config::ExecutionConfig;
use crate::control::{ControlSender, CoordinatorMessage, JobEvent, TaskControl};
use crate::error::{JobError, TaskError};
use crate::graph::{Erased, JobGraph, NodeRole};
use crate::metrics::SubtaskMetrics;
use crate::operator::OperatorContext;
use crate::remote::{ChannelKey, Network};
use crate::restore::read_states;
/// Re-exported: a [`Deployer`] is handed the state an attempt restores.
pub use crate::restore::Restore;
use crate::snapshot::SnapshotWorkers;
use crate::task::TaskRuntime;

/// One deployed attempt of a job, as the executor supervises it.
pub struct Deployed {
    pub attempt: u32,
    pub metrics: Vec<(SubtaskId, usize, u32, Arc<SubtaskMetrics>)>,
    pub uids: HashMap<SubtaskId, String>,
    /// The threads of the subtasks that run in this process.
    pub threads: Vec<(SubtaskId, JoinHandle<()>)>,
    pub controls: HashMap<SubtaskId, ControlSender>,
    pub source_metrics: Vec<Arc<SubtaskMetrics>>,
    pub sources: Vec<SubtaskId>,
    pub all: Vec<SubtaskId>,
    /// Subtasks in other processes (cluster mode): waits until they have all stopped.
    pub remote: Option<Box<dyn RemoteAttempt>>,
}

/// The part of an attempt that runs in other processes.
pub trait RemoteAttempt: Send {
    /// Waits until every remote subtask of the attempt has stopped (or its process is gone).
    fn wait_stopped(self: Box<Self>);
}

/// Deploys the attempts of a job: as threads of this process ([`LocalDeployer`]), or on the
/// task managers of a cluster.
pub trait Deployer {
    #[allow(clippy::too_many_arguments)]
    fn deploy(
        &mut self,
        graph: &JobGraph,
        config: &ExecutionConfig,
        restore: Option<Restore<'_>>,
        attempt: u32,
        coordinator: &Sender<CoordinatorMessage>,
        events: &Sender<JobEvent>,
        workers: &SnapshotWorkers,
    ) -> Result<Deployed, JobError>;
}

/// Every subtask in this process (local mode).
pub struct LocalDeployer;

impl Deployer for LocalDeployer {
    fn deploy(
        &mut self,
        graph: &JobGraph,
        config: &ExecutionConfig,
        restore: Option<Restore<'_>>,
        attempt: u32,
        coordinator: &Sender<CoordinatorMessage>,
        events: &Sender<JobEvent>,
        workers: &SnapshotWorkers,
    ) -> Result<Deployed, JobError> {
        deploy(
            graph,
            config,
            restore,
            attempt,
            coordinator,
            events,
            workers,
            None,
        )
    }
}

impl Deployed {
    /// An attempt with nothing deployed yet.
    pub fn new(attempt: u32) -> Deployed {
        Deployed {
            attempt,
            metrics: Vec::new(),
            uids: HashMap::new(),
            threads: Vec::new(),
            controls: HashMap::new(),
            source_metrics: Vec::new(),
            sources: Vec::new(),
            all: Vec::new(),
            remote: None,
        }
    }

    pub fn uid(&self, subtask: SubtaskId) -> String {
        self.uids
            .get(&subtask)
            .cloned()
            .unwrap_or_else(|| subtask.operator.to_string())
    }

    pub fn source_records(&self) -> u64 {
        self.source_metrics.iter().map(|m| m.records_out()).sum()
    }
}

/// Creates every channel, writer and subtask of one attempt that runs in this process, and
/// starts the subtask threads. With a `network` (cluster mode), only the subtasks it calls
/// local are deployed here, and their channels to and from other processes go over it.
#[allow(clippy::too_many_arguments)]
pub fn deploy(
    graph: &JobGraph,
    config: &ExecutionConfig,
    restore: Option<Restore<'_>>,
    attempt: u32,
    coordinator: &Sender<CoordinatorMessage>,
    events: &Sender<JobEvent>,
    workers: &SnapshotWorkers,
    network: Option<&dyn Network>,
) -> Result<Deployed, JobError> {
    let n = graph.nodes.len();
    let is_local = |s: SubtaskId| network.is_none_or(|net| net.is_local(s));
    // Every subtask's control channel, made first: an unaligned barrier reaches the subtasks
    // downstream through theirs (from another process, through the network's priority frames).
    let mut controls: HashMap<SubtaskId, (Sender<TaskControl>, Receiver<TaskControl>)> =
        HashMap::new();
    let mut downstream: HashMap<SubtaskId, Vec<Sender<TaskControl>>> = HashMap::new();
    for node in &graph.nodes {
        for index in 0..node.parallelism {
            let subtask = SubtaskId::new(node.id(), index);
            if is_local(subtask) {
                controls.insert(subtask, crossbeam_channel::unbounded());
            }
        }
    }
    let mut inputs: Vec<Vec<Vec<Erased>>> = graph
        .nodes
        .iter()
        .map(|node| (0..node.parallelism).map(|_| Vec::new()).collect())
        .collect();
    // A producer's writer into a chained consumer is made with the consumer, which is built
    // first: its place among the producer's outputs stays empty until then.
    let mut outputs: Vec<Vec<Vec<Option<Erased>>>> = inputs
        .iter()
        .map(|subtasks| subtasks.iter().map(|_| Vec::new()).collect())
        .collect();
    let chained_edges = graph.chained_edges();
    // Chained consumer → (its edge, its place among its producer's outputs).
    let mut chained_into: HashMap<SubtaskId, (usize, usize)> = HashMap::new();
    for (edge_index, edge) in graph.edges.iter().enumerate() {
        let partition = graph.resolved_partition(edge);
        let (from, to) = (&graph.nodes[edge.from], &graph.nodes[edge.to]);
        let consumers = to.parallelism as usize;
        for (i, producer_outputs) in outputs[edge.from].iter_mut().enumerate() {
            let producer = SubtaskId::new(from.id(), i as u32);
            let consumer = SubtaskId::new(to.id(), i as u32);
            if chained_edges[edge_index] && is_local(producer) && is_local(consumer) {
                chained_into.insert(consumer, (edge_index, producer_outputs.len()));
                producer_outputs.push(None);
                continue;
            }
            let targets = match partition {
                crate::partition::Partition::Forward => i..i + 1,
                _ => 0..consumers,
            };
            let mut channels = Vec::with_capacity(targets.len());
            for j in targets {
                let consumer = SubtaskId::new(to.id(), j as u32);
                let key = ChannelKey {
                    edge: edge_index as u32,
                    producer: i as u32,
                    consumer: j as u32,
                };
                match (network, is_local(producer), is_local(consumer)) {
                    (_, true, true) => {
                        let (sink, receiver) = (edge.channel.local)(config.channel_capacity);
                        channels.push(sink);
                        inputs[edge.to][j].push(receiver);
                        if let Some((control, _)) = controls.get(&consumer) {
                            downstream
                                .entry(producer)
                                .or_default()
                                .push(control.clone());
                        }
                    }
                    (Some(net), true, false) => {
                        channels.push((edge.channel.remote_out)(net.outgoing(key, consumer)?));
                    }
                    (Some(net), false, true) => {
                        let (decoder, input) = (edge.channel.remote_in)(config.channel_capacity);
                        let (control, _) = controls
                            .get(&consumer)
                            .expect("a control channel was made for every local subtask");
                        let priority = crate::remote::priority_receiver(control.clone());
                        let credit = net.incoming(
                            key,
                            producer,
                            config.channel_capacity,
                            decoder,
                            priority,
                        )?;
                        inputs[edge.to][j].push(input(credit));
                    }
                    _ => {}
                }
            }
            if !is_local(producer) {
                continue;
            }
            let writer = (edge.writer)(
                partition,
                channels,
                i,
                graph.max_parallelism,
                config.batch_size,
            );
            producer_outputs.push(Some(writer));
        }
    }

    let mut deployed = Deployed::new(attempt);
    let mut bodies = Vec::new();
    let restore_start = Instant::now();
    let local_reads = |r: &Option<Restore<'_>>| {
        r.as_ref()
            .and_then(|r| r.storage.local_copy())
            .map_or((0, 0), |l| l.reads())
    };
    let local_before = local_reads(&restore);
    let alignment = crate::alignment::AlignmentGroups::default();
    let mut restored_states = match restore {
        Some(r) => read_states(
            graph,
            r,
            &is_local,
            &config.state_backend.rocksdb_local_dir,
            config.state_backend.kind == weir_core::config::StateBackendKind::RocksDb,
        )?,
        None => HashMap::new(),
    };
    // The operators chained behind each subtask, nearest first, and each chained subtask's
    // producer.
    let mut chains: HashMap<SubtaskId, Vec<crate::chain::ChainLink>> = HashMap::new();
    let mut chained_to: HashMap<SubtaskId, SubtaskId> = HashMap::new();
    let mut heads: HashMap<SubtaskId, Sender<TaskControl>> = HashMap::new();
    // Backwards, so that a consumer is built before the producer it is chained behind (edges
    // run from earlier nodes to later ones); the lists made are turned around at the end.
    for (node_index, node) in graph.nodes.iter().enumerate().take(n).rev() {
        let uid: Arc<str> = Arc::from(node.uid.as_str());
        for index in (0..node.parallelism).rev() {
            let subtask = SubtaskId::new(node.id(), index);
            if !is_local(subtask) {
                continue;
            }
            let key_groups =
                KeyGroupRange::for_subtask(graph.max_parallelism, node.parallelism, index);
            let restored = restored_states.remove(&subtask).unwrap_or_default();
            let (control_tx, control_rx) = controls
                .remove(&subtask)
                .expect("a control channel was made for every local subtask");
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
                    state_backend: config.state_backend.clone(),
                    metrics: metrics.clone(),
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
                unaligned: config.checkpoint.unaligned,
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
                downstream: downstream.remove(&subtask).unwrap_or_default(),
                chain: crate::chain::Chain::default(),
            };
            let cannot_build = |e: String| {
                JobError::InvalidJob(format!("cannot build '{}' subtask {index}: {e}", node.uid))
            };
            let ins = std::mem::take(&mut inputs[node_index][index as usize]);
            let outs = std::mem::take(&mut outputs[node_index][index as usize])
                .into_iter()
                .collect::<Option<Vec<Erased>>>()
                .ok_or_else(|| {
                    cannot_build("an operator chained behind it was not built".into())
                })?;
            if let Some(&(edge_index, position)) = chained_into.get(&subtask) {
                let edge = &graph.edges[edge_index];
                let chain = node
                    .chain
                    .as_ref()
                    .expect("only operators that can be chained are");
                let (sink, link) = chain(outs, rt).map_err(cannot_build)?;
                let writer = (edge.writer)(
                    graph.resolved_partition(edge),
                    vec![sink],
                    index as usize,
                    graph.max_parallelism,
                    config.batch_size,
                );
                outputs[edge.from][index as usize][position] = Some(writer);
                let producer = SubtaskId::new(graph.nodes[edge.from].id(), index);
                let mut links = vec![link];
                links.extend(chains.remove(&subtask).unwrap_or_default());
                chains.entry(producer).or_default().extend(links);
                chained_to.insert(subtask, producer);
            } else {
                let mut rt = rt;
                rt.chain = crate::chain::Chain::new(chains.remove(&subtask).unwrap_or_default());
                let body = (node.factory)(ins, outs, rt).map_err(cannot_build)?;
                bodies.push((subtask, format!("{}#{index}", node.uid), body));
                heads.insert(subtask, control_tx.clone());
                deployed
                    .controls
                    .insert(subtask, ControlSender::Local(control_tx));
            }
            deployed.uids.insert(subtask, node.uid.clone());
            deployed
                .metrics
                .push((subtask, node_index, index, metrics.clone()));
            deployed.all.push(subtask);
            if node.role == NodeRole::Source {
                deployed.sources.push(subtask);
                deployed.source_metrics.push(metrics);
            }
        }
    }
    // A chained subtask's controls go to the head of its chain, which hands them on.
    for (&subtask, &producer) in &chained_to {
        let mut head = producer;
        while let Some(&next) = chained_to.get(&head) {
            head = next;
        }
        deployed.controls.insert(
            subtask,
            ControlSender::Chained {
                subtask,
                head: heads[&head].clone(),
            },
        );
    }
    bodies.reverse();
    deployed.metrics.reverse();
    deployed.all.reverse();
    deployed.sources.reverse();
    deployed.source_metrics.reverse();
    if let Some(Restore { metadata, .. }) = restore {
        let bytes = metadata.checkpoint.state_size();
        let ms = restore_start.elapsed().as_millis() as u64;
        let rate = bytes as f64 / 1e6 / (ms.max(1) as f64 / 1000.0);
        let (files, local_bytes) = local_reads(&restore);
        let (local_files, local_bytes) = (files - local_before.0, local_bytes - local_before.1);
        tracing::info!(
            checkpoint = %metadata.checkpoint.id,
            bytes,
            ms,
            local_files,
            local_bytes,
            "restored {:.1} MB of state in {ms} ms ({rate:.0} MB/s; {:.1} MB of it from the local copy)",
            bytes as f64 / 1e6,
            local_bytes as f64 / 1e6
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
        tx.send(control.clone());
    }
    for (_, t) in deployed.threads {
        let _ = t.join();
    }
    if let Some(remote) = deployed.remote {
        remote.wait_stopped();
    }
}

/// The subtasks of the graph: (sources, all).
pub fn subtask_ids(graph: &JobGraph) -> (Vec<SubtaskId>, Vec<SubtaskId>) {
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
