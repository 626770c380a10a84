//! The job manager: the control plane's server, the registry of task managers, and the
//! [`ClusterDeployer`] that places each attempt of the job on their slots.
//!
//! Everything else a job manager does — the checkpoint coordinator and its driver, restarts,
//! recovery, REST — is the executor's code, the same as in local mode
//! ([`weir_runtime::execute_with`]); only deployment differs.

use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use weir_core::SubtaskId;
use weir_runtime::control::{ControlSender, CoordinatorMessage, JobEvent, TaskControl};
use weir_runtime::deploy::{Deployed, Deployer, RemoteAttempt, Restore};
use weir_runtime::error::JobError;
use weir_runtime::graph::{JobGraph, NodeRole};
use weir_runtime::metrics::SubtaskMetrics;
use weir_runtime::snapshot::SnapshotWorkers;
use weir_runtime::ExecutionConfig;

use crate::error::ClusterError;
use crate::proto::job_manager_server::{JobManager as JobManagerService, JobManagerServer};
use crate::proto::{
    from_job_manager, from_task_manager, Deploy, FromJobManager, FromTaskManager, Registered,
};
use crate::wire::{self, Delivery, DeploymentPlan, Report, RestorePlan};

/// Limits of a control-plane message (a deployment carries the checkpoint's metadata).
pub(crate) const MAX_MESSAGE: usize = 256 << 20;

/// How a job manager runs.
#[derive(Clone, Debug)]
pub struct JobManagerOptions {
    /// Where the control plane listens (port 0: any free port).
    pub rpc_address: SocketAddr,
    /// The job's command line, which every task manager builds the job from.
    pub job_args: Vec<String>,
    /// How often task managers send heartbeats (`heartbeat.interval`).
    pub heartbeat_interval: Duration,
    /// A task manager silent for this long is lost (`heartbeat.timeout`).
    pub heartbeat_timeout: Duration,
    /// How long an attempt waits for enough free slots (`slot.request.timeout`).
    pub slot_timeout: Duration,
    /// The first attempt waits for this many task managers (and enough slots), so that a
    /// cluster started all at once runs the job on all of it. Later attempts (failover) only
    /// wait for enough slots.
    pub min_task_managers: u32,
    /// Start as a standby (high availability): task managers are refused until
    /// [`JobManager::grant_leadership`].
    pub standby: bool,
}

/// A running job manager's control plane.
pub struct JobManager {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Runtime,
    address: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

struct Shared {
    id: String,
    options: JobManagerOptions,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    task_managers: BTreeMap<String, TaskManagerEntry>,
    next_session: u64,
    current: Option<AttemptState>,
    ended: bool,
    /// Whether this job manager leads (always, without high availability). A standby refuses
    /// task managers' sessions; one that lost leadership drops them and deploys nothing.
    leading: bool,
    /// The leadership term (the fencing token's epoch in HA mode): attempts of a later term
    /// are newer than any of an earlier one, across job managers.
    term: u64,
}

/// Where a task manager's session takes messages from the job manager.
type Outbox = mpsc::UnboundedSender<Result<FromJobManager, Status>>;

struct TaskManagerEntry {
    session: u64,
    slots: u32,
    data_address: String,
    outbox: Outbox,
    last_heartbeat: Instant,
}

struct AttemptState {
    attempt: u32,
    coordinator: Sender<CoordinatorMessage>,
    events: Sender<JobEvent>,
    /// The subtasks on each task manager of the attempt.
    hosts: HashMap<String, Vec<SubtaskId>>,
    /// Task managers whose subtasks of the attempt have all stopped, or that are lost.
    stopped: HashSet<String>,
    metrics: HashMap<SubtaskId, Arc<SubtaskMetrics>>,
    /// The attempt's failure was reported: one lost task manager is enough.
    failed: bool,
}

impl JobManager {
    /// Starts the control plane's server.
    pub fn start(options: JobManagerOptions) -> Result<JobManager, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("jobmanager-rpc")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::io("cannot start the control plane's runtime", e))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(options.rpc_address))
            .map_err(|e| {
                ClusterError::io(format!("cannot listen on {}", options.rpc_address), e)
            })?;
        let address = listener
            .local_addr()
            .map_err(|e| ClusterError::io("control plane address", e))?;
        let leading = !options.standby;
        let shared = Arc::new(Shared {
            id: format!("jobmanager-{}@{address}", std::process::id()),
            options,
            state: Mutex::new(State {
                leading,
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let service = JobManagerServer::new(Service {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        runtime.spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the control plane's server failed");
            }
        });
        let watchdog = shared.clone();
        runtime.spawn(async move { watch_heartbeats(watchdog).await });
        tracing::info!(%address, "job manager listening for task managers");
        Ok(JobManager {
            shared,
            runtime,
            address,
            shutdown: Some(shutdown),
        })
    }

    /// Where the control plane listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// This job manager leads, in term `term` (the fencing token's epoch).
    pub fn grant_leadership(&self, term: u64) {
        let mut state = self.shared.state.lock().expect("state lock");
        state.leading = true;
        state.term = term;
        state.current = None;
        drop(state);
        tracing::info!(term, "leading: accepting task managers");
        self.shared.changed.notify_all();
    }

    /// This job manager no longer leads: it deploys nothing more, and drops every task
    /// manager's session (they cancel their subtasks and look for the new leader).
    pub fn revoke_leadership(&self) {
        let ids: Vec<String> = {
            let mut state = self.shared.state.lock().expect("state lock");
            state.leading = false;
            state.task_managers.keys().cloned().collect()
        };
        for id in ids {
            lost(&self.shared, &id, None, "this job manager lost leadership");
        }
        self.shared.changed.notify_all();
    }

    /// The deployer the executor runs the job with.
    pub fn deployer(&self) -> ClusterDeployer {
        ClusterDeployer {
            shared: self.shared.clone(),
        }
    }

    /// Tells every task manager that the job ended (they exit), and stops the server.
    pub fn finish(mut self, status: &str) {
        {
            let mut state = self.shared.state.lock().expect("state lock");
            state.ended = true;
            for tm in state.task_managers.values() {
                let _ = tm.outbox.send(Ok(message(from_job_manager::Kind::Ended(
                    crate::proto::JobEnded {
                        status: status.to_string(),
                    },
                ))));
            }
        }
        // Give the sessions a moment to carry the message before the server stops.
        std::thread::sleep(Duration::from_millis(200));
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.runtime.shutdown_timeout(Duration::from_secs(2));
    }
}

fn message(kind: from_job_manager::Kind) -> FromJobManager {
    FromJobManager { kind: Some(kind) }
}

impl Shared {
    /// Waits (a little) for the state to change: a registration, a loss, an attempt stopped.
    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, Duration::from_millis(200))
            .expect("state lock")
            .0
    }
}

struct Service {
    shared: Arc<Shared>,
}

type SessionStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<FromJobManager, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl JobManagerService for Service {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: Request<Streaming<FromTaskManager>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("the session ended before registering"))?;
        let Some(from_task_manager::Kind::Register(register)) = first.kind else {
            return Err(Status::invalid_argument(
                "the first message of a session must register the task manager",
            ));
        };
        if register.slots == 0 || register.task_manager_id.is_empty() {
            return Err(Status::invalid_argument(
                "a task manager registers with an id and at least one slot",
            ));
        }
        let (outbox, rx) = mpsc::unbounded_channel();
        let id = register.task_manager_id.clone();
        let session = {
            let mut state = self.shared.state.lock().expect("state lock");
            if state.ended {
                return Err(Status::failed_precondition("the job has ended"));
            }
            if !state.leading {
                return Err(Status::unavailable("this job manager is not the leader"));
            }
            state.next_session += 1;
            let session = state.next_session;
            if state.task_managers.contains_key(&id) {
                drop(state);
                lost(&self.shared, &id, None, "it registered again");
                state = self.shared.state.lock().expect("state lock");
            }
            state.task_managers.insert(
                id.clone(),
                TaskManagerEntry {
                    session,
                    slots: register.slots,
                    data_address: register.data_address.clone(),
                    outbox: outbox.clone(),
                    last_heartbeat: Instant::now(),
                },
            );
            session
        };
        let _ = outbox.send(Ok(message(from_job_manager::Kind::Registered(
            Registered {
                job_manager_id: self.shared.id.clone(),
                job_args: self.shared.options.job_args.clone(),
                heartbeat_interval_ms: self.shared.options.heartbeat_interval.as_millis() as u64,
            },
        ))));
        tracing::info!(task_manager = %id, slots = register.slots, data = %register.data_address, "task manager registered");
        self.shared.changed.notify_all();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let reason = loop {
                match inbound.message().await {
                    Ok(Some(msg)) => {
                        if let Err(e) = on_message(&shared, &id, session, msg) {
                            break format!("it sent a bad message: {e}");
                        }
                    }
                    Ok(None) => break "its session ended".to_string(),
                    Err(status) => break format!("its session broke: {}", status.message()),
                }
            };
            lost(&shared, &id, Some(session), &reason);
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

fn on_message(
    shared: &Shared,
    id: &str,
    session: u64,
    msg: FromTaskManager,
) -> Result<(), ClusterError> {
    let mut state = shared.state.lock().expect("state lock");
    match state.task_managers.get_mut(id) {
        Some(tm) if tm.session == session => tm.last_heartbeat = Instant::now(),
        // A session replaced by a newer one: its messages are stale.
        _ => return Ok(()),
    }
    let Some(kind) = msg.kind else {
        return Err(ClusterError::Protocol("an empty message".into()));
    };
    let current = state.current.as_mut();
    match kind {
        from_task_manager::Kind::Register(_) => {
            return Err(ClusterError::Protocol(
                "registered twice in one session".into(),
            ))
        }
        from_task_manager::Kind::Heartbeat(beat) => {
            if let Some(current) = current.filter(|c| c.attempt == beat.attempt) {
                for m in beat.metrics {
                    let subtask = SubtaskId::new(weir_core::OperatorId(m.operator), m.index);
                    if let Some(metrics) = current.metrics.get(&subtask) {
                        metrics
                            .records_in
                            .store(m.records_in, std::sync::atomic::Ordering::Relaxed);
                        metrics.set_out(m.records_out);
                        metrics.set_backpressured(m.backpressured_ns);
                    }
                }
            }
        }
        from_task_manager::Kind::Report(report) => {
            let decoded: Report = wire::decode(&report.payload, "a report")?;
            if let Some(current) = current.filter(|c| c.attempt == report.attempt) {
                match decoded.deliver(report.attempt) {
                    Delivery::Coordinator(m) => {
                        let _ = current.coordinator.send(m);
                    }
                    Delivery::Executor(e) => {
                        let _ = current.events.send(e);
                    }
                }
            }
        }
        from_task_manager::Kind::Stopped(stopped) => {
            if let Some(current) = current.filter(|c| c.attempt == stopped.attempt) {
                current.stopped.insert(id.to_string());
                drop(state);
                shared.changed.notify_all();
            }
        }
    }
    Ok(())
}

/// Task manager `id` is gone (its session `session`, or any): its slots leave the pool, and an
/// attempt that ran subtasks on it fails.
fn lost(shared: &Shared, id: &str, session: Option<u64>, reason: &str) {
    let mut state = shared.state.lock().expect("state lock");
    let matches = state
        .task_managers
        .get(id)
        .is_some_and(|tm| session.is_none_or(|s| s == tm.session));
    if !matches {
        return;
    }
    state.task_managers.remove(id);
    let ended = state.ended || !state.leading;
    if let Some(current) = state.current.as_mut() {
        if let Some(subtasks) = current.hosts.get(id) {
            current.stopped.insert(id.to_string());
            if !current.failed && !ended {
                current.failed = true;
                if let Some(&subtask) = subtasks.first() {
                    let _ = current.events.send(JobEvent::TaskFailed {
                        subtask,
                        error: format!("task manager {id} was lost: {reason}"),
                        recoverable: true,
                    });
                }
            }
        }
    }
    drop(state);
    if ended {
        tracing::info!(task_manager = %id, "task manager session closed: {reason}");
    } else {
        tracing::warn!(task_manager = %id, "task manager lost: {reason}");
    }
    shared.changed.notify_all();
}

async fn watch_heartbeats(shared: Arc<Shared>) {
    let period = shared
        .options
        .heartbeat_interval
        .max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(period).await;
        let silent: Vec<(String, u64, Duration)> = {
            let state = shared.state.lock().expect("state lock");
            state
                .task_managers
                .iter()
                .filter(|(_, tm)| tm.last_heartbeat.elapsed() > shared.options.heartbeat_timeout)
                .map(|(id, tm)| (id.clone(), tm.session, tm.last_heartbeat.elapsed()))
                .collect()
        };
        for (id, session, silence) in silent {
            let reason = format!("no heartbeat for {} ms", silence.as_millis());
            lost(&shared, &id, Some(session), &reason);
        }
    }
}

/// Deploys each attempt of the job on the task managers' slots.
///
/// Slots are shared as in Flink: slot `i` holds subtask `i` of every operator, so a job needs
/// as many slots as its highest parallelism. Slots are taken round-robin over the task
/// managers (the first slot of each, then the second of each, …), which spreads the job.
pub struct ClusterDeployer {
    shared: Arc<Shared>,
}

impl ClusterDeployer {
    /// Waits until the registered task managers offer `needed` slots (and, with `min_tms`,
    /// are that many); returns the slots in order.
    fn wait_for_slots(&self, needed: u32, min_tms: u32) -> Result<Vec<(String, String)>, JobError> {
        let deadline = Instant::now() + self.shared.options.slot_timeout;
        let mut state = self.shared.state.lock().expect("state lock");
        let mut logged = false;
        loop {
            if !state.leading {
                return Err(JobError::Failed(
                    "this job manager lost leadership; it deploys nothing more".into(),
                ));
            }
            let offered: u32 = state.task_managers.values().map(|t| t.slots).sum();
            if offered >= needed && state.task_managers.len() >= min_tms as usize {
                let mut slots = Vec::new();
                let most = state
                    .task_managers
                    .values()
                    .map(|t| t.slots)
                    .max()
                    .unwrap_or(0);
                for round in 0..most {
                    for (id, tm) in &state.task_managers {
                        if round < tm.slots {
                            slots.push((id.clone(), tm.data_address.clone()));
                        }
                    }
                }
                slots.truncate(needed as usize);
                return Ok(slots);
            }
            if Instant::now() >= deadline {
                return Err(JobError::Failed(format!(
                    "the job needs {needed} slots on at least {min_tms} task managers; {} task managers offer {offered} (waited {} s; slot.request.timeout)",
                    state.task_managers.len(),
                    self.shared.options.slot_timeout.as_secs()
                )));
            }
            if !logged {
                tracing::info!(
                    needed,
                    offered,
                    "waiting for task managers to offer enough slots"
                );
                logged = true;
            }
            state = self.shared.wait(state);
        }
    }
}

impl Deployer for ClusterDeployer {
    fn deploy(
        &mut self,
        graph: &JobGraph,
        _config: &ExecutionConfig,
        restore: Option<Restore<'_>>,
        attempt: u32,
        coordinator: &Sender<CoordinatorMessage>,
        events: &Sender<JobEvent>,
        _workers: &SnapshotWorkers,
    ) -> Result<Deployed, JobError> {
        let needed = graph.nodes.iter().map(|n| n.parallelism).max().unwrap_or(1);
        let min_tms = if attempt == 0 {
            self.shared.options.min_task_managers
        } else {
            1
        };
        // The sessions of the task managers the slots are on; one that left meanwhile means
        // counting the slots again.
        let (slots, peers, outboxes) = loop {
            let slots = self.wait_for_slots(needed, min_tms)?;
            let peers: BTreeMap<String, String> = slots.iter().cloned().collect();
            let state = self.shared.state.lock().expect("state lock");
            let outboxes: Option<Vec<(String, Outbox)>> = peers
                .keys()
                .map(|tm| {
                    let outbox = state.task_managers.get(tm)?.outbox.clone();
                    Some((tm.clone(), outbox))
                })
                .collect();
            if let Some(outboxes) = outboxes {
                break (slots, peers, outboxes);
            }
        };
        let mut placement = Vec::new();
        let mut hosts: HashMap<String, Vec<SubtaskId>> = HashMap::new();
        let mut deployed = Deployed::new(attempt);
        let mut metrics_by_subtask = HashMap::new();
        let mut forwarders: HashMap<String, Sender<(SubtaskId, TaskControl)>> = HashMap::new();
        for (tm, outbox) in outboxes {
            let forwarder = spawn_control_forwarder(&tm, attempt, outbox)?;
            forwarders.insert(tm, forwarder);
        }
        for (node_index, node) in graph.nodes.iter().enumerate() {
            for index in 0..node.parallelism {
                let subtask = SubtaskId::new(node.id(), index);
                let tm = slots[index as usize].0.clone();
                placement.push((subtask, tm.clone()));
                hosts.entry(tm.clone()).or_default().push(subtask);
                let metrics = Arc::new(SubtaskMetrics::default());
                metrics_by_subtask.insert(subtask, metrics.clone());
                deployed
                    .metrics
                    .push((subtask, node_index, index, metrics.clone()));
                deployed.uids.insert(subtask, node.uid.clone());
                deployed.controls.insert(
                    subtask,
                    ControlSender::Remote {
                        subtask,
                        to: forwarders[&tm].clone(),
                    },
                );
                deployed.all.push(subtask);
                if node.role == NodeRole::Source {
                    deployed.sources.push(subtask);
                    deployed.source_metrics.push(metrics);
                }
            }
        }
        drop(forwarders);
        let term = self.shared.state.lock().expect("state lock").term;
        let plan = DeploymentPlan {
            term,
            attempt,
            placement,
            peers: peers.into_iter().collect(),
            restore: restore.map(|r| RestorePlan {
                metadata: r.metadata.clone(),
                savepoint: r.savepoint.map(|p| p.to_path_buf()),
            }),
        };
        let bytes = wire::encode(&plan, "the deployment plan")
            .map_err(|e| JobError::Failed(e.to_string()))?;
        // Invariant: the driver knows the new attempt before any of its subtasks can report.
        let _ = coordinator.send(CoordinatorMessage::NewAttempt {
            attempt,
            controls: deployed.controls.clone(),
        });
        {
            let mut state = self.shared.state.lock().expect("state lock");
            state.current = Some(AttemptState {
                attempt,
                coordinator: coordinator.clone(),
                events: events.clone(),
                hosts: hosts.clone(),
                stopped: HashSet::new(),
                metrics: metrics_by_subtask,
                failed: false,
            });
            for tm in hosts.keys() {
                let sent = state.task_managers.get(tm).is_some_and(|t| {
                    t.outbox
                        .send(Ok(message(from_job_manager::Kind::Deploy(Deploy {
                            attempt,
                            plan: bytes.clone(),
                        }))))
                        .is_ok()
                });
                if !sent {
                    // It left after the slots were counted: this attempt fails at once.
                    let current = state.current.as_mut().expect("just set");
                    current.failed = true;
                    current.stopped.insert(tm.clone());
                    let _ = events.send(JobEvent::TaskFailed {
                        subtask: hosts[tm][0],
                        error: format!("task manager {tm} left before the deployment reached it"),
                        recoverable: true,
                    });
                }
            }
        }
        let spread: Vec<String> = hosts
            .iter()
            .map(|(tm, s)| format!("{tm}: {} subtasks", s.len()))
            .collect();
        tracing::info!(attempt, task_managers = ?spread, "deployed the attempt");
        deployed.remote = Some(Box::new(AttemptOnTaskManagers {
            shared: self.shared.clone(),
            attempt,
        }));
        Ok(deployed)
    }
}

/// Turns the driver's and executor's controls for the subtasks of one task manager into
/// messages of its session.
fn spawn_control_forwarder(
    tm: &str,
    attempt: u32,
    outbox: Outbox,
) -> Result<Sender<(SubtaskId, TaskControl)>, JobError> {
    let (tx, rx) = crossbeam_channel::unbounded::<(SubtaskId, TaskControl)>();
    std::thread::Builder::new()
        .name(format!("controls-{tm}"))
        .spawn(move || {
            for (subtask, control) in rx {
                let Ok(bytes) = wire::encode_control(&control) else {
                    continue;
                };
                let msg = message(from_job_manager::Kind::Control(crate::proto::Control {
                    attempt,
                    operator: subtask.operator.0,
                    index: subtask.index,
                    control: bytes,
                }));
                if outbox.send(Ok(msg)).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| JobError::Failed(format!("cannot start a control forwarder: {e}")))?;
    Ok(tx)
}

/// Waits for the task managers of an attempt to stop its subtasks.
struct AttemptOnTaskManagers {
    shared: Arc<Shared>,
    attempt: u32,
}

/// How long a shut-down attempt may take to stop on its task managers.
const STOP_WAIT: Duration = Duration::from_secs(60);

impl RemoteAttempt for AttemptOnTaskManagers {
    fn wait_stopped(self: Box<Self>) {
        let deadline = Instant::now() + STOP_WAIT;
        let mut state = self.shared.state.lock().expect("state lock");
        loop {
            let pending: Vec<String> = match &state.current {
                Some(c) if c.attempt == self.attempt => c
                    .hosts
                    .keys()
                    .filter(|tm| !c.stopped.contains(*tm))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            };
            if pending.is_empty() {
                // The executor restores or ends next: nothing more is taken from this attempt.
                if state
                    .current
                    .as_ref()
                    .is_some_and(|c| c.attempt == self.attempt)
                {
                    state.current = None;
                }
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(attempt = self.attempt, task_managers = ?pending, "task managers did not report the attempt stopped in time");
                return;
            }
            state = self.shared.wait(state);
        }
    }
}
