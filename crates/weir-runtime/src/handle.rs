//! [`JobHandle`]: a live view of a running job and the controls over it — what the REST API,
//! the metrics endpoint and the CLI use. Cheap to clone; every clone sees the same job.

use crossbeam_channel::Sender;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_checkpoint::{CheckpointStats, JobStatus, RequestId};
use weir_core::config::{CheckpointConfig, StateBackendKind};
use weir_core::{CheckpointId, CheckpointKind, JobId, SavepointFormat, SubtaskId};

use crate::control::{CoordinatorMessage, Drain};
use crate::graph::{JobGraph, NodeRole};
use crate::metrics::SubtaskMetrics;

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

/// One operator of the job as the outside sees it.
#[derive(Clone, Debug)]
pub struct VertexInfo {
    pub uid: String,
    pub name: String,
    pub parallelism: u32,
    pub role: NodeRole,
}

/// An edge of the job graph: producer and consumer vertex indexes and the partitioning.
#[derive(Clone, Debug)]
pub struct EdgeInfo {
    pub from: usize,
    pub to: usize,
    pub partition: String,
    /// Whether the consumer runs chained behind the producer (see [`crate::chain`]).
    pub chained: bool,
}

/// Where a requested checkpoint or savepoint stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    InProgress,
    Completed {
        checkpoint: CheckpointId,
        /// Where a savepoint was written.
        location: Option<PathBuf>,
    },
    Failed(String),
}

/// Records flowing through one subtask.
#[derive(Clone, Debug)]
pub struct SubtaskCounts {
    pub vertex: usize,
    pub index: u32,
    pub records_in: u64,
    pub records_out: u64,
    /// Milliseconds blocked on full output channels so far.
    pub backpressured_ms: u64,
    /// What the subtask's RocksDB uses, when its keyed state is there.
    pub rocksdb: Option<crate::metrics::LsmUsage>,
}

/// Why a request to the job was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    #[error("the job is not running (it is {0:?})")]
    NotRunning(JobStatus),
    #[error("the job did not answer in time")]
    Timeout,
}

struct Live {
    status: JobStatus,
    failure: Option<String>,
    end_ms: Option<u64>,
    attempt: u32,
    restarts: u32,
    coordinator: Option<Sender<CoordinatorMessage>>,
    metrics: Vec<(SubtaskId, usize, u32, Arc<SubtaskMetrics>)>,
    requests: HashMap<RequestId, RequestStatus>,
    last_stats: Option<CheckpointStats>,
    state_backend: StateBackendKind,
}

struct Shared {
    id: JobId,
    name: String,
    start_ms: u64,
    vertices: Vec<VertexInfo>,
    edges: Vec<EdgeInfo>,
    checkpoint: CheckpointConfig,
    stop: StopHandle,
    next_request: AtomicU64,
    live: Mutex<Live>,
}

/// A running (or finished) job: status, graph, checkpoint statistics, controls.
#[derive(Clone)]
pub struct JobHandle {
    shared: Arc<Shared>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl JobHandle {
    /// A handle for `graph`, stopped through `stop`.
    pub fn new(graph: &JobGraph, checkpoint: &CheckpointConfig, stop: StopHandle) -> JobHandle {
        let vertices = graph
            .nodes
            .iter()
            .map(|n| VertexInfo {
                uid: n.uid.clone(),
                name: n.name.clone(),
                parallelism: n.parallelism,
                role: n.role,
            })
            .collect();
        let edges = graph
            .edges
            .iter()
            .zip(graph.chained_edges())
            .map(|(e, chained)| EdgeInfo {
                from: e.from,
                to: e.to,
                partition: format!("{:?}", graph.resolved_partition(e)).to_uppercase(),
                chained,
            })
            .collect();
        JobHandle {
            shared: Arc::new(Shared {
                id: JobId::from_name(&graph.name),
                name: graph.name.clone(),
                start_ms: now_ms(),
                vertices,
                edges,
                checkpoint: checkpoint.clone(),
                stop,
                next_request: AtomicU64::new(1),
                live: Mutex::new(Live {
                    status: JobStatus::Created,
                    failure: None,
                    end_ms: None,
                    attempt: 0,
                    restarts: 0,
                    coordinator: None,
                    metrics: Vec::new(),
                    requests: HashMap::new(),
                    last_stats: None,
                    state_backend: StateBackendKind::default(),
                }),
            }),
        }
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        // A panic while holding this lock cannot leave it inconsistent: every write is a
        // single assignment. Keep serving.
        self.shared.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn id(&self) -> JobId {
        self.shared.id
    }
    pub fn name(&self) -> &str {
        &self.shared.name
    }
    pub fn start_time_ms(&self) -> u64 {
        self.shared.start_ms
    }
    pub fn end_time_ms(&self) -> Option<u64> {
        self.live().end_ms
    }
    pub fn status(&self) -> JobStatus {
        self.live().status
    }
    /// Why the job failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.live().failure.clone()
    }
    pub fn vertices(&self) -> &[VertexInfo] {
        &self.shared.vertices
    }
    pub fn edges(&self) -> &[EdgeInfo] {
        &self.shared.edges
    }
    pub fn checkpoint_config(&self) -> &CheckpointConfig {
        &self.shared.checkpoint
    }
    /// Where the job's keyed operators keep their state.
    pub fn state_backend(&self) -> StateBackendKind {
        self.live().state_backend
    }
    pub fn attempt(&self) -> u32 {
        self.live().attempt
    }
    pub fn restarts(&self) -> u32 {
        self.live().restarts
    }

    /// Records in and out of every subtask of the current attempt.
    pub fn subtask_counts(&self) -> Vec<SubtaskCounts> {
        self.live()
            .metrics
            .iter()
            .map(|(_, vertex, index, m)| SubtaskCounts {
                vertex: *vertex,
                index: *index,
                records_in: m.records_in(),
                records_out: m.records_out(),
                backpressured_ms: m.backpressured_ms(),
                rocksdb: m.rocksdb(),
            })
            .collect()
    }

    /// The coordinator's statistics, fresh from its driver while the job runs, and as they
    /// were at the end afterwards.
    pub fn checkpoint_stats(&self) -> Option<CheckpointStats> {
        let coordinator = self.live().coordinator.clone();
        if let Some(tx) = coordinator {
            let (reply, answer) = crossbeam_channel::bounded(1);
            if tx.send(CoordinatorMessage::Stats(reply)).is_ok() {
                if let Ok(stats) = answer.recv_timeout(Duration::from_secs(2)) {
                    return Some(stats);
                }
            }
        }
        self.live().last_stats.clone()
    }

    /// Asks for a checkpoint now; poll [`request`](Self::request) with the returned id.
    pub fn trigger_checkpoint(&self) -> Result<RequestId, HandleError> {
        self.trigger(CheckpointKind::Checkpoint, None, None)
    }

    /// Asks for a savepoint of `format` into `target` (or the configured savepoint directory).
    pub fn trigger_savepoint(
        &self,
        target: Option<PathBuf>,
        format: SavepointFormat,
    ) -> Result<RequestId, HandleError> {
        self.trigger(format.kind(), target, None)
    }

    /// Takes a savepoint, then stops the job: its sinks commit, and it ends once the savepoint
    /// completed. With [`Drain::EndEventTime`], event time ends first (Flink's `--drain`):
    /// every window and event-time timer fires and its output is committed with the savepoint,
    /// which then holds no pending event-time state.
    pub fn stop_with_savepoint(
        &self,
        target: Option<PathBuf>,
        format: SavepointFormat,
        drain: Drain,
    ) -> Result<RequestId, HandleError> {
        self.trigger(format.kind(), target, Some(drain))
    }

    fn trigger(
        &self,
        kind: CheckpointKind,
        target: Option<PathBuf>,
        then_stop: Option<Drain>,
    ) -> Result<RequestId, HandleError> {
        let mut live = self.live();
        let Some(tx) = live
            .coordinator
            .clone()
            .filter(|_| live.status == JobStatus::Running)
        else {
            return Err(HandleError::NotRunning(live.status));
        };
        let request = self.shared.next_request.fetch_add(1, Ordering::SeqCst);
        live.requests.insert(request, RequestStatus::InProgress);
        drop(live);
        if let Some(drain) = then_stop {
            // The stop proper happens when the savepoint completes (see the executor).
            let _ = tx.send(CoordinatorMessage::StopWithSavepoint {
                request,
                target,
                kind,
                drain,
            });
        } else {
            let _ = tx.send(CoordinatorMessage::Trigger {
                kind,
                request,
                target,
            });
        }
        Ok(request)
    }

    /// The status of a trigger request, if the id is known.
    pub fn request(&self, request: RequestId) -> Option<RequestStatus> {
        self.live().requests.get(&request).cloned()
    }

    /// Stops the job cleanly with a final checkpoint.
    pub fn stop(&self) {
        self.shared.stop.stop();
    }

    /// Cancels the job: no final checkpoint; the latest completed one stands.
    pub fn cancel(&self) {
        let mut live = self.live();
        if matches!(
            live.status,
            JobStatus::Running | JobStatus::Restarting | JobStatus::Created
        ) {
            live.status = JobStatus::Cancelling;
        }
        drop(live);
        self.shared.stop.cancel();
    }

    // --- updates from the executor and the driver ---

    pub(crate) fn set_status(&self, status: JobStatus) {
        let mut live = self.live();
        // Invariant: a terminal status is final.
        if matches!(
            live.status,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled
        ) {
            return;
        }
        live.status = status;
        if matches!(
            status,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled
        ) {
            live.end_ms = Some(now_ms());
            live.coordinator = None;
        }
    }

    pub(crate) fn set_failure(&self, cause: String) {
        self.live().failure = Some(cause);
    }

    pub(crate) fn set_state_backend(&self, kind: StateBackendKind) {
        self.live().state_backend = kind;
    }

    pub(crate) fn set_coordinator(&self, tx: Option<Sender<CoordinatorMessage>>) {
        self.live().coordinator = tx;
    }

    pub(crate) fn set_attempt(
        &self,
        attempt: u32,
        restarts: u32,
        metrics: Vec<(SubtaskId, usize, u32, Arc<SubtaskMetrics>)>,
    ) {
        let mut live = self.live();
        live.attempt = attempt;
        live.restarts = restarts;
        live.metrics = metrics;
    }

    pub(crate) fn set_request(&self, request: RequestId, status: RequestStatus) {
        self.live().requests.insert(request, status);
    }

    pub(crate) fn set_final_stats(&self, stats: CheckpointStats) {
        self.live().last_stats = Some(stats);
    }

    pub(crate) fn stop_handle(&self) -> &StopHandle {
        &self.shared.stop
    }
}
