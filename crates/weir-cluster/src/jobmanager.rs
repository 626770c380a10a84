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
use weir_runtime::control::{CoordinatorMessage, JobEvent};
use weir_runtime::metrics::SubtaskMetrics;

mod cluster_deployer;

use crate::error::ClusterError;
use crate::proto::job_manager_server::{JobManager as JobManagerService, JobManagerServer};
use crate::proto::{
    from_job_manager, from_task_manager, FromJobManager, FromTaskManager, Registered,
};
use crate::security::{self, ClusterSecret};
use crate::tls::ClusterTls;
use crate::wire::{self, Delivery, Report};
pub use cluster_deployer::ClusterDeployer;

/// Limits of a control-plane message (a deployment carries the checkpoint's metadata).
pub(crate) const MAX_MESSAGE: usize = 256 << 20;

/// How a job manager runs.
#[derive(Clone, Debug)]
pub struct JobManagerOptions {
    /// Where the control plane listens (port 0: any free port). An address beyond loopback
    /// needs `tls` or `secret`.
    pub rpc_address: SocketAddr,
    /// The cluster's secret: every call must prove it knows it ([`crate::security`]).
    pub secret: Option<ClusterSecret>,
    /// Mutual TLS: every task manager must present a certificate of the cluster's CA
    /// ([`crate::tls`]).
    pub tls: Option<ClusterTls>,
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

pub(crate) struct Shared {
    pub(crate) id: String,
    pub(crate) options: JobManagerOptions,
    pub(crate) state: Mutex<State>,
    pub(crate) changed: Condvar,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) task_managers: BTreeMap<String, TaskManagerEntry>,
    pub(crate) next_session: u64,
    pub(crate) current: Option<AttemptState>,
    pub(crate) ended: bool,
    /// Whether this job manager leads (always, without high availability). A standby refuses
    /// task managers' sessions; one that lost leadership drops them and deploys nothing.
    pub(crate) leading: bool,
    /// The leadership term (the fencing token's epoch in HA mode): attempts of a later term
    /// are newer than any of an earlier one, across job managers.
    pub(crate) term: u64,
}

/// Where a task manager's session takes messages from the job manager.
pub(crate) type Outbox = mpsc::UnboundedSender<Result<FromJobManager, Status>>;

pub(crate) struct TaskManagerEntry {
    pub(crate) session: u64,
    pub(crate) slots: u32,
    pub(crate) data_address: String,
    pub(crate) outbox: Outbox,
    pub(crate) last_heartbeat: Instant,
}

pub(crate) struct AttemptState {
    pub(crate) attempt: u32,
    pub(crate) coordinator: Sender<CoordinatorMessage>,
    pub(crate) events: Sender<JobEvent>,
    /// The subtasks on each task manager of the attempt.
    pub(crate) hosts: HashMap<String, Vec<SubtaskId>>,
    /// Task managers whose subtasks of the attempt have all stopped, or that are lost.
    pub(crate) stopped: HashSet<String>,
    pub(crate) metrics: HashMap<SubtaskId, Arc<SubtaskMetrics>>,
    /// The attempt's failure was reported: one lost task manager is enough.
    pub(crate) failed: bool,
}

impl JobManager {
    /// Refuses options that would open the control plane beyond loopback without TLS or a
    /// secret ([`JobManager::start`] checks too; this says so before anything else is done).
    pub fn check_bind(options: &JobManagerOptions) -> Result<(), ClusterError> {
        security::check_bind(
            options.rpc_address,
            options.secret.as_ref(),
            options.tls.as_ref(),
            "for task managers",
            "register a task manager and receive the job's records, or acknowledge checkpoints",
        )
    }

    /// Starts the control plane's server; refuses an address beyond loopback without TLS or a
    /// secret.
    pub fn start(options: JobManagerOptions) -> Result<JobManager, ClusterError> {
        JobManager::check_bind(&options)?;
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
        // Checked before the service sees the call: a caller without the secret registers
        // nothing and reports nothing.
        let service = tonic::service::interceptor::InterceptedService::new(
            service,
            security::control_interceptor(shared.options.secret.clone()),
        );
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = &shared.options.tls {
            // A caller without a certificate of the cluster's CA is dropped in the handshake,
            // before a byte of gRPC.
            server = server
                .tls_config(tls.server_tls_config())
                .map_err(|e| ClusterError::Config(format!("the control plane's TLS: {e}")))?;
        }
        runtime.spawn(async move {
            let served = server
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
        let secret = shared.options.secret.is_some();
        let tls = shared.options.tls.is_some();
        tracing::info!(%address, tls, secret, "job manager listening for task managers");
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
        ClusterDeployer::new(self.shared.clone())
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

pub(crate) fn message(kind: from_job_manager::Kind) -> FromJobManager {
    FromJobManager { kind: Some(kind) }
}

impl Shared {
    /// Waits (a little) for the state to change: a registration, a loss, an attempt stopped.
    pub(crate) fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
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

#[cfg(test)]
mod tests;
