//! The task manager: registers its slots with the job manager, builds the job from the job
//! manager's arguments, deploys the subtasks placed on it, and reports for them.

use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use weir_core::SubtaskId;
use weir_runtime::control::{ControlSender, CoordinatorMessage, JobEvent, TaskControl};
use weir_runtime::deploy::{deploy, Restore};
use weir_runtime::graph::JobGraph;
use weir_runtime::metrics::SubtaskMetrics;
use weir_runtime::snapshot::SnapshotWorkers;
use weir_runtime::ExecutionConfig;
use weir_storage::CheckpointStorage;

use crate::error::ClusterError;
use crate::jobmanager::MAX_MESSAGE;
use crate::net::DataPlane;
use crate::proto::job_manager_client::JobManagerClient;
use crate::proto::{
    from_job_manager, from_task_manager, AttemptStopped, FromJobManager, FromTaskManager,
    Heartbeat, Register,
};
use crate::security::{self, ClusterSecret};
use crate::tls::{self, ClusterTls};
use crate::wire::{self, DeploymentPlan, Report};

/// Builds the job (graph and execution configuration) from its command line; every process of
/// a cluster runs the same builder on the same arguments.
pub type JobBuilder =
    dyn Fn(&[String]) -> Result<(JobGraph, ExecutionConfig), String> + Send + Sync;

/// How a task manager runs.
#[derive(Clone, Debug)]
pub struct TaskManagerOptions {
    /// The job manager's control-plane address (host:port), or several separated by commas
    /// (high availability: the leader among them accepts).
    pub job_manager: String,
    /// This task manager's id (unique in the cluster).
    pub id: String,
    pub slots: u32,
    /// Where the data plane listens. An address beyond loopback needs `tls` or `secret`.
    pub data_bind: SocketAddr,
    /// The host other task managers reach this one's data plane at.
    pub data_host: String,
    /// How long to keep trying to reach the job manager, at start and after losing it.
    pub connect_timeout: Duration,
    /// How long the job manager may go unheard before this task manager gives it up
    /// (`heartbeat.timeout`, as the job manager's for its task managers): a session whose
    /// keepalive pings go unanswered this long is dropped — the subtasks are cancelled and a
    /// job manager looked for again —, and a connection attempt that gets no answer within it
    /// moves on to the next address. The data plane gives up a connection to another task
    /// manager that stays silent twice as long ([`crate::net`]).
    pub heartbeat_timeout: Duration,
    /// The cluster's secret, proven to the job manager and to the other task managers
    /// ([`crate::security`]).
    pub secret: Option<ClusterSecret>,
    /// Mutual TLS with the job manager and the other task managers ([`crate::tls`]).
    pub tls: Option<ClusterTls>,
}

/// How a task manager's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskManagerExit {
    /// The job manager said the job ended, with this status.
    JobEnded(String),
}

type Outbox = mpsc::UnboundedSender<FromTaskManager>;

/// The running attempt's number and its subtasks' metrics, which heartbeats carry.
type AttemptMetrics = Mutex<Option<(u32, Vec<(SubtaskId, Arc<SubtaskMetrics>)>)>>;

fn message(kind: from_task_manager::Kind) -> FromTaskManager {
    FromTaskManager { kind: Some(kind) }
}

/// The job as this task manager built it, with what outlives an attempt.
struct Job {
    graph: JobGraph,
    config: ExecutionConfig,
    storage: CheckpointStorage,
    workers: SnapshotWorkers,
    /// Where subtasks and snapshot workers send acknowledgements and status.
    coordinator: Sender<CoordinatorMessage>,
    /// Hands each attempt's events to the report forwarder.
    attempts: Sender<AttemptEvents>,
}

/// An attempt's events, for the report forwarder to send to the job manager.
struct AttemptEvents {
    attempt: u32,
    events: Receiver<JobEvent>,
    /// The session that deployed the attempt.
    outbox: Outbox,
    counts: Arc<AttemptMetrics>,
    /// Dropped once every event of the attempt was sent: its receiver then knows.
    _forwarded: Sender<()>,
}

/// One attempt's subtasks on this task manager.
struct Running {
    attempt: u32,
    generation: u64,
    controls: HashMap<SubtaskId, ControlSender>,
    watcher: JoinHandle<()>,
}

/// Runs a task manager until the job ends.
pub fn run_task_manager(
    mut options: TaskManagerOptions,
    build: &JobBuilder,
) -> Result<TaskManagerExit, ClusterError> {
    if options.slots == 0 {
        return Err(ClusterError::Config(
            "a task manager needs at least one slot (--slots)".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("taskmanager-rpc")
        .enable_all()
        .build()
        .map_err(|e| ClusterError::io("cannot start the control plane's runtime", e))?;
    let plane = DataPlane::bind(
        options.data_bind,
        options.secret.clone(),
        options.tls.clone(),
        // A partition between task managers is noticed through the data connections, a bit
        // more slowly than a silent job manager: a connection only waits for TCP's own
        // retransmissions, which a lossy link can stretch.
        options.heartbeat_timeout.saturating_mul(2),
    )?;
    let data_address = format!("{}:{}", options.data_host, plane.address().port());
    if options.id.is_empty() {
        options.id = data_address.clone();
    }
    tracing::info!(
        id = %options.id,
        slots = options.slots,
        data = %data_address,
        tls = options.tls.is_some(),
        secret = options.secret.is_some(),
        "task manager started"
    );
    let metrics: Arc<AttemptMetrics> = Arc::new(Mutex::new(None));
    let mut job: Option<Job> = None;
    let session_outbox: Arc<Mutex<Option<Outbox>>> = Arc::new(Mutex::new(None));
    // Which of the job managers' addresses to try first: after losing one, the next, which is
    // more likely the new leader than the one just lost.
    let mut first = 0;
    loop {
        let (outbox, mut inbound, connected) = connect(&runtime, &options, &data_address, first)?;
        first = connected + 1;
        // Acknowledgements from snapshot workers (which outlive a session) go to the session
        // of the moment.
        *session_outbox.lock().expect("outbox lock") = Some(outbox.clone());
        let heartbeat = spawn_heartbeats(outbox.clone(), metrics.clone());
        let mut running: Option<Running> = None;
        let ended = loop {
            let next = runtime.block_on(inbound.message());
            let msg = match next {
                Ok(Some(msg)) => msg,
                Ok(None) => break Err("the job manager ended the session".to_string()),
                Err(status) => break Err(format!("the session broke: {}", status.message())),
            };
            let Some(kind) = msg.kind else { continue };
            match kind {
                from_job_manager::Kind::Registered(registered) => {
                    tracing::info!(job_manager = %registered.job_manager_id, "registered");
                    heartbeat.set_interval(registered.heartbeat_interval_ms);
                    if job.is_none() {
                        job = Some(build_job(build, &registered.job_args, &session_outbox)?);
                    }
                }
                from_job_manager::Kind::Deploy(d) => {
                    let Some(job) = job.as_ref() else {
                        break Err("a deployment came before the job".into());
                    };
                    if let Some(r) = running.as_ref() {
                        job.workers.cancel_attempt(r.attempt);
                    }
                    stop_running(&plane, running.take());
                    let plan: DeploymentPlan = match wire::decode(&d.plan, "a deployment") {
                        Ok(plan) => plan,
                        Err(e) => break Err(e.to_string()),
                    };
                    running = start_attempt(&options, &plane, job, &plan, &outbox, &metrics);
                }
                from_job_manager::Kind::Control(c) => {
                    let control: TaskControl = match wire::decode(&c.control, "a task control") {
                        Ok(control) => control,
                        Err(e) => break Err(e.to_string()),
                    };
                    let subtask = SubtaskId::new(weir_core::OperatorId(c.operator), c.index);
                    if let Some(r) = running.as_ref().filter(|r| r.attempt == c.attempt) {
                        let cancel = matches!(control, TaskControl::Cancel);
                        if let Some(tx) = r.controls.get(&subtask) {
                            tx.send(control);
                        }
                        if cancel {
                            // Its queued snapshots are not written; producers blocked on
                            // credit and readers stop at once.
                            if let Some(job) = job.as_ref() {
                                job.workers.cancel_attempt(r.attempt);
                            }
                            plane.close_attempt(r.generation);
                        }
                    }
                }
                from_job_manager::Kind::Ended(ended) => break Ok(ended.status),
            }
        };
        heartbeat.stop();
        if let (Some(job), Some(r)) = (job.as_ref(), running.as_ref()) {
            job.workers.cancel_attempt(r.attempt);
        }
        stop_running(&plane, running.take());
        // The next job manager starts counting its own attempts.
        *metrics.lock().expect("metrics lock") = None;
        match ended {
            Ok(status) => {
                tracing::info!(%status, "the job ended");
                if let Some(job) = job.take() {
                    drop(job.coordinator);
                    job.workers.join();
                }
                return Ok(TaskManagerExit::JobEnded(status));
            }
            Err(reason) => {
                tracing::warn!(
                    "lost the job manager ({reason}); cancelled the subtasks, reconnecting"
                );
            }
        }
    }
}

/// Opens a session with the job manager and registers, retrying until the connect timeout;
/// with several addresses, tries each in turn from the one at `first`. Returns the session and
/// the index of the address that accepted it.
fn connect(
    runtime: &tokio::runtime::Runtime,
    options: &TaskManagerOptions,
    data_address: &str,
    first: usize,
) -> Result<(Outbox, tonic::Streaming<FromJobManager>, usize), ClusterError> {
    let deadline = Instant::now() + options.connect_timeout;
    let addresses: Vec<&str> = options
        .job_manager
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    if addresses.is_empty() {
        return Err(ClusterError::Config(
            "--jobmanager needs an address (host:port, or several separated by commas)".into(),
        ));
    }
    let credential = security::credential_interceptor(options.secret.as_ref())?;
    let mut last_error = String::new();
    let mut tried = 0;
    while Instant::now() < deadline {
        // Several job managers (high availability): only the leader accepts; try each in turn.
        let index = (first + tried) % addresses.len();
        let address = addresses[index];
        tried += 1;
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoint = format!("{scheme}://{address}");
        // A certificate refused either way, seen in the handshake or, with TLS 1.3, in the
        // first answer.
        let mut refused: Option<String> = None;
        let attempt = runtime.block_on(async {
            let mut endpoint = tonic::transport::Endpoint::from_shared(endpoint.clone())
                .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
            endpoint = with_liveness(endpoint, options.heartbeat_timeout);
            if let Some(tls) = &options.tls {
                let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
                endpoint = endpoint
                    .tls_config(tls.client_tls_config(host))
                    .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
            }
            let channel = endpoint.connect().await.map_err(|e| {
                refused = tls::refusal(&e);
                tonic::Status::unavailable(error_chain(&e))
            })?;
            let mut client = JobManagerClient::with_interceptor(channel, credential.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE);
            let (outbox, rx) = mpsc::unbounded_channel();
            outbox
                .send(message(from_task_manager::Kind::Register(Register {
                    task_manager_id: options.id.clone(),
                    slots: options.slots,
                    data_address: data_address.to_string(),
                })))
                .map_err(|e| tonic::Status::internal(e.to_string()))?;
            let response = client
                .session(UnboundedReceiverStream::new(rx))
                .await
                .inspect_err(|status| refused = tls::refusal(status))?;
            Ok::<_, tonic::Status>((outbox, response.into_inner()))
        });
        if let (Some(refused), Err(_)) = (&refused, &attempt) {
            // Every process of a cluster trusts the same CA: trying again cannot help.
            return Err(ClusterError::Config(format!(
                "the job manager at {address} and this task manager do not accept each other's certificates ({refused}): give every process of the cluster a certificate of the same CA ({}), and the job manager one that names the host in --jobmanager",
                tls::TLS_TRUST_OPTION,
            )));
        }
        let attempt = match attempt {
            // Every job manager of a cluster shares the secret: trying again cannot help.
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                return Err(ClusterError::Config(format!(
                    "the job manager at {address} refused this task manager ({}): give every process of the cluster the same {} (or {})",
                    status.message(),
                    security::SECRET_OPTION,
                    security::SECRET_ENV,
                )))
            }
            other => other.map_err(|s| status_chain(&s)),
        };
        match attempt {
            Ok((outbox, inbound)) => return Ok((outbox, inbound, index)),
            Err(e) => {
                if last_error.is_empty() {
                    tracing::info!(job_manager = %address, error = %e, "waiting for the job manager");
                }
                last_error = format!("{address}: {e}");
                if tried % addresses.len() == 0 {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
    // What a job manager with TLS answers a client without, and the other way round.
    let mismatch = [
        "http2 error",
        "InvalidContentType",
        "corrupt message",
        "handshake eof",
    ];
    let hint = if mismatch.iter().any(|m| last_error.contains(m)) {
        format!(
            " (does only one of the job manager and this task manager have {}=true? Both need it, or neither)",
            tls::TLS_ENABLED_OPTION
        )
    } else {
        String::new()
    };
    Err(ClusterError::Connection(format!(
        "cannot reach the job manager at {} within {} s: {last_error}{hint}",
        options.job_manager,
        options.connect_timeout.as_secs()
    )))
}

/// Makes a session with a job manager that went silent fail within `timeout`, and a
/// connection attempt to one that does not answer give up within it.
///
/// A partition drops packets without a word: the TCP connection stays open and nothing
/// arrives, so a task manager would wait for a silent job manager until TCP itself gave up,
/// many minutes later — running its subtasks for nobody meanwhile, and never looking for the
/// leader that replaced it. HTTP/2 pings, which the job manager's server answers by itself,
/// tell a live job manager from a silent one: one unanswered for half the timeout, sent at
/// most half the timeout after the last, ends the session. A frozen job manager stops
/// answering too, and is given up the same way.
fn with_liveness(
    endpoint: tonic::transport::Endpoint,
    timeout: Duration,
) -> tonic::transport::Endpoint {
    let half = (timeout / 2).max(Duration::from_millis(100));
    endpoint
        .connect_timeout(timeout)
        .http2_keep_alive_interval(half)
        .keep_alive_timeout(half)
        .keep_alive_while_idle(true)
}

/// A call's failure and what caused it.
fn status_chain(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    if let Some(source) = std::error::Error::source(status) {
        append_chain(&mut text, source);
    }
    text
}

/// An error and what caused it, each said once: `transport error: …: …`.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    append_chain(&mut text, e);
    text
}

fn append_chain(text: &mut String, e: &(dyn std::error::Error + 'static)) {
    let mut next = Some(e);
    while let Some(e) = next {
        let part = e.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        next = e.source();
    }
}

fn build_job(
    build: &JobBuilder,
    args: &[String],
    outbox: &Arc<Mutex<Option<Outbox>>>,
) -> Result<Job, ClusterError> {
    let (graph, config) = build(args)
        .map_err(|e| ClusterError::Config(format!("cannot build the job {args:?}: {e}")))?;
    let storage = CheckpointStorage::open_configured(&config.checkpoint, &graph.name)
        .map_err(|e| ClusterError::Job(e.into()))?;
    let (coordinator, messages) = crossbeam_channel::unbounded();
    let workers = SnapshotWorkers::start(
        config.snapshot_threads,
        storage.clone(),
        coordinator.clone(),
        &config.checkpoint,
    );
    let (attempts, attempt_events) = crossbeam_channel::unbounded();
    spawn_report_forwarder(messages, attempt_events, outbox.clone());
    tracing::info!(job = %graph.name, "built the job");
    Ok(Job {
        graph,
        config,
        storage,
        workers,
        coordinator,
        attempts,
    })
}

/// Sends acknowledgements, declines and task status to the job manager of the moment, and
/// each attempt's events to the session that deployed it.
///
/// One thread sends both, and sends an event only after every coordinator message already
/// queued: a subtask reports itself running before it can report its end of input, and the
/// job manager must hear them in that order (else it cannot take the final checkpoint).
fn spawn_report_forwarder(
    messages: Receiver<CoordinatorMessage>,
    attempts: Receiver<AttemptEvents>,
    outbox: Arc<Mutex<Option<Outbox>>>,
) {
    let forward = move |m: CoordinatorMessage| {
        let Some((attempt, report)) = Report::from_coordinator_message(m) else {
            return;
        };
        let current = outbox.lock().expect("outbox lock").clone();
        if let Some(outbox) = current {
            send_report(&outbox, attempt, &report);
        }
    };
    std::thread::spawn(move || {
        let mut live: Vec<AttemptEvents> = Vec::new();
        let (mut messages_open, mut attempts_open) = (true, true);
        // Until the job and every attempt are gone, and every event was sent.
        while messages_open || attempts_open || !live.is_empty() {
            let mut select = crossbeam_channel::Select::new();
            let from_coordinator = messages_open.then(|| select.recv(&messages));
            let new_attempt = attempts_open.then(|| select.recv(&attempts));
            let first_event = usize::from(messages_open) + usize::from(attempts_open);
            for a in &live {
                select.recv(&a.events);
            }
            let op = select.select();
            let index = op.index();
            if Some(index) == from_coordinator {
                match op.recv(&messages) {
                    Ok(m) => forward(m),
                    Err(_) => messages_open = false,
                }
            } else if Some(index) == new_attempt {
                match op.recv(&attempts) {
                    Ok(a) => live.push(a),
                    Err(_) => attempts_open = false,
                }
            } else {
                let a = index - first_event;
                match op.recv(&live[a].events) {
                    Ok(event) => {
                        for m in messages.try_iter() {
                            forward(m);
                        }
                        let a = &live[a];
                        // The job manager's record counts are current when it hears of an end
                        // of input.
                        if matches!(
                            event,
                            JobEvent::SourceExhausted(_) | JobEvent::TaskFinished(_)
                        ) {
                            let _ = a.outbox.send(heartbeat_message(&a.counts));
                        }
                        send_report(&a.outbox, a.attempt, &Report::Event(event));
                    }
                    Err(_) => {
                        live.swap_remove(a);
                    }
                }
            }
        }
    });
}

fn send_report(outbox: &Outbox, attempt: u32, report: &Report) {
    match wire::encode(report, "a report") {
        Ok(payload) => {
            let _ = outbox.send(message(from_task_manager::Kind::Report(
                crate::proto::Report { attempt, payload },
            )));
        }
        Err(e) => tracing::error!(error = %e, "cannot send a report"),
    }
}

/// Deploys this task manager's subtasks of an attempt. A failure is reported to the job
/// manager as the attempt's failure.
fn start_attempt(
    options: &TaskManagerOptions,
    plane: &DataPlane,
    job: &Job,
    plan: &DeploymentPlan,
    outbox: &Outbox,
    metrics: &Arc<AttemptMetrics>,
) -> Option<Running> {
    let attempt = plan.attempt;
    job.workers.begin_attempt(attempt);
    let generation = plan.generation();
    let net = plane.open_attempt(&options.id, plan);
    let (events, event_rx) = crossbeam_channel::unbounded::<JobEvent>();
    let (forwarded, all_forwarded) = crossbeam_channel::bounded::<()>(0);
    // Should the forwarder be gone, the attempt's events are dropped with this and
    // `all_forwarded` does not wait.
    let _ = job.attempts.send(AttemptEvents {
        attempt,
        events: event_rx,
        outbox: outbox.clone(),
        counts: metrics.clone(),
        _forwarded: forwarded,
    });
    let savepoint_storage;
    let restore = match &plan.restore {
        None => Ok(None),
        Some(r) => match &r.savepoint {
            None => Ok(Some(Restore {
                storage: &job.storage,
                metadata: &r.metadata,
                savepoint: None,
            })),
            Some(path) => match weir_storage::savepoint::open_savepoint(path) {
                Ok((storage, _)) => {
                    savepoint_storage = storage;
                    Ok(Some(Restore {
                        storage: &savepoint_storage,
                        metadata: &r.metadata,
                        savepoint: Some(path),
                    }))
                }
                Err(e) => Err(format!("cannot open savepoint {}: {e}", path.display())),
            },
        },
    };
    let deployed = restore.and_then(|restore| {
        deploy(
            &job.graph,
            &job.config,
            restore,
            attempt,
            &job.coordinator,
            &events,
            &job.workers,
            Some(net.as_ref()),
        )
        .map_err(|e| e.to_string())
    });
    let deployed = match deployed {
        Ok(d) => d,
        Err(error) => {
            tracing::error!(attempt, %error, "cannot deploy the attempt");
            if let Some((subtask, _)) = plan.placement.iter().find(|(_, tm)| *tm == options.id) {
                let _ = events.send(JobEvent::TaskFailed {
                    subtask: *subtask,
                    error: format!("task manager {}: {error}", options.id),
                    recoverable: true,
                });
            }
            drop(events);
            let _ = all_forwarded.recv();
            let _ = outbox.send(message(from_task_manager::Kind::Stopped(AttemptStopped {
                attempt,
            })));
            return None;
        }
    };
    tracing::info!(attempt, subtasks = deployed.all.len(), "deployed");
    // A data connection given up while the attempt needs it (its peer silent, breaking the
    // protocol or refused) fails the attempt at once, named after one of this task manager's
    // subtasks (the job manager restarts them all).
    if let Some(&subtask) = deployed.all.first() {
        let events = events.clone();
        net.report_faults(move |error| {
            tracing::warn!(attempt, %error, "failing the attempt");
            let _ = events.send(JobEvent::TaskFailed {
                subtask,
                error,
                recoverable: true,
            });
        });
    }
    *metrics.lock().expect("metrics lock") = Some((
        attempt,
        deployed
            .metrics
            .iter()
            .map(|(s, _, _, m)| (*s, m.clone()))
            .collect(),
    ));
    let controls = deployed.controls.clone();
    let threads = deployed.threads;
    let watcher_outbox = outbox.clone();
    let watcher_metrics = metrics.clone();
    let watcher_plane = plane.clone();
    let watcher = std::thread::spawn(move || {
        for (_, t) in threads {
            let _ = t.join();
        }
        // Its events sender goes too: the forwarder below waits for every one.
        net.stop_reporting_faults();
        // Invariant: every event of the attempt, then its final counts, reach the job manager
        // before the attempt is reported stopped; after that it takes nothing more from it.
        drop(events);
        let _ = all_forwarded.recv();
        let _ = watcher_outbox.send(heartbeat_message(&watcher_metrics));
        let _ = watcher_outbox.send(message(from_task_manager::Kind::Stopped(AttemptStopped {
            attempt,
        })));
        watcher_plane.close_attempt(generation);
    });
    Some(Running {
        attempt,
        generation,
        controls,
        watcher,
    })
}

/// Cancels an attempt's subtasks that still run, and waits for them.
fn stop_running(plane: &DataPlane, running: Option<Running>) {
    if let Some(r) = running {
        for tx in r.controls.values() {
            tx.send(TaskControl::Cancel);
        }
        plane.close_attempt(r.generation);
        let _ = r.watcher.join();
    }
}

fn heartbeat_message(metrics: &AttemptMetrics) -> FromTaskManager {
    let current = metrics.lock().expect("metrics lock");
    let (attempt, list) = match current.as_ref() {
        Some((attempt, list)) => (*attempt, list.as_slice()),
        None => (0, &[][..]),
    };
    message(from_task_manager::Kind::Heartbeat(Heartbeat {
        attempt,
        metrics: list
            .iter()
            .map(|(s, m)| crate::proto::SubtaskMetrics {
                operator: s.operator.0,
                index: s.index,
                records_in: m.records_in(),
                records_out: m.records_out(),
                backpressured_ns: m
                    .backpressured_ns
                    .load(std::sync::atomic::Ordering::Relaxed),
            })
            .collect(),
    }))
}

/// Sends heartbeats, with the subtasks' metrics, until stopped.
struct Heartbeats {
    interval_ms: Arc<std::sync::atomic::AtomicU64>,
    stop: Sender<()>,
}

impl Heartbeats {
    fn set_interval(&self, ms: u64) {
        self.interval_ms
            .store(ms.max(10), std::sync::atomic::Ordering::Relaxed);
    }
    fn stop(self) {
        let _ = self.stop.send(());
    }
}

fn spawn_heartbeats(outbox: Outbox, metrics: Arc<AttemptMetrics>) -> Heartbeats {
    let interval_ms = Arc::new(std::sync::atomic::AtomicU64::new(1000));
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let interval = interval_ms.clone();
    std::thread::spawn(move || loop {
        let wait = Duration::from_millis(interval.load(std::sync::atomic::Ordering::Relaxed));
        match stopped.recv_timeout(wait) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if outbox.send(heartbeat_message(&metrics)).is_err() {
                    return;
                }
            }
            _ => return,
        }
    });
    Heartbeats { interval_ms, stop }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_checkpoint::TaskStatus;
    use weir_core::OperatorId;

    #[test]
    fn a_job_manager_that_takes_the_connection_but_never_answers_is_given_up() {
        // Takes connections and holds them open without a word: a job manager frozen, or
        // behind a partition that came after the TCP handshake.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = silent.local_addr().unwrap();
        std::thread::spawn(move || silent.incoming().take(100).collect::<Vec<_>>());
        let options = TaskManagerOptions {
            job_manager: address.to_string(),
            id: "tm".into(),
            slots: 1,
            data_bind: "127.0.0.1:0".parse().unwrap(),
            data_host: "127.0.0.1".into(),
            connect_timeout: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_millis(400),
            secret: None,
            tls: None,
        };
        let (done, result) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let _ = done.send(connect(&runtime, &options, "127.0.0.1:1", 0).map(|_| ()));
        });
        let result = result
            .recv_timeout(Duration::from_secs(20))
            .expect("still waiting for a job manager that never answers");
        let error = result.expect_err("a session with a silent job manager");
        assert!(
            error.to_string().contains("cannot reach the job manager"),
            "{error}"
        );
    }

    #[test]
    fn a_subtask_status_reaches_the_job_manager_before_the_events_that_follow_it() {
        let (coordinator, messages) = crossbeam_channel::unbounded();
        let (attempts, attempt_events) = crossbeam_channel::unbounded();
        let (outbox, mut sent) = mpsc::unbounded_channel();
        spawn_report_forwarder(
            messages,
            attempt_events,
            Arc::new(Mutex::new(Some(outbox.clone()))),
        );
        let (events, event_rx) = crossbeam_channel::unbounded();
        let (forwarded, all_forwarded) = crossbeam_channel::bounded::<()>(0);
        attempts
            .send(AttemptEvents {
                attempt: 0,
                events: event_rx,
                outbox,
                counts: Arc::new(Mutex::new(None)),
                _forwarded: forwarded,
            })
            .unwrap();
        // Each source reports itself running (to its coordinator), then its end of input (to
        // the executor), as a source subtask does.
        let sources = 500;
        for index in 0..sources {
            let subtask = SubtaskId::new(OperatorId(7), index);
            coordinator
                .send(CoordinatorMessage::TaskStatus {
                    attempt: 0,
                    subtask,
                    status: TaskStatus::Running,
                })
                .unwrap();
            events.send(JobEvent::SourceExhausted(subtask)).unwrap();
        }
        drop(events);
        assert!(all_forwarded.recv().is_err(), "nothing is sent on it");

        let mut running = std::collections::HashSet::new();
        let mut exhausted = 0;
        while let Ok(m) = sent.try_recv() {
            let Some(from_task_manager::Kind::Report(r)) = m.kind else {
                continue; // the record counts sent with an end of input
            };
            match wire::decode::<Report>(&r.payload, "a report").unwrap() {
                Report::TaskStatus { subtask, .. } => {
                    running.insert(subtask);
                }
                Report::Event(JobEvent::SourceExhausted(subtask)) => {
                    assert!(running.contains(&subtask), "{subtask} ended before it ran");
                    exhausted += 1;
                }
                other => panic!("unexpected report {other:?}"),
            }
        }
        assert_eq!(exhausted, sources);
    }
}
