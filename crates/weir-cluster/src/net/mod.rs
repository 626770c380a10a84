//! The data plane: record batches, watermarks and barriers between task managers, over TCP,
//! with credit-based flow control.
//!
//! Each task manager listens on one data port. For each attempt of the job, a task manager
//! that produces into subtasks of another opens one connection to it and multiplexes every
//! channel between the two over it. A frame is a header (type, channel, length) and a payload:
//! one element in `weir_runtime::wire_format` — a batch, a watermark, a barrier, the end of input.
//! A producer's consecutive batches on one channel travel as one frame of up to about
//! `weir_runtime::remote::FRAME_TARGET` bytes (128 KiB): see `weir_runtime::remote`.
//!
//! Credits: the consumer grants each channel as many credits as its queue holds, and one more
//! for each element its gate takes out of the queue — a few at a time in one credit frame, but
//! all of them by the time the gate finds the queue empty; the producer spends one per frame and
//! waits when it has none. Back-pressure thus crosses the network per channel — a slow
//! consumer holds back only the channels into it, never the connection — and a barrier waits
//! behind at most a queue's worth of batches.
//!
//! Unaligned checkpoints: a barrier that overtakes the data goes out first as a priority frame,
//! which spends no credit, so it passes every frame still waiting for one; the consumer's
//! reader takes it off the connection at once (it never blocks on a channel) and hands it to
//! the consumer subtask's control channel. The consumer's gate then captures the channel up to
//! the barrier's place, taking its elements out of the queue and returning their credits as
//! it goes, so the producer always gets through to the barrier; what the gate holds back it
//! reports in held frames, and the producer counts that against its credits when it asks for
//! room (see `weir_runtime::remote`).
//!
//! A peer that goes silent — a partition between two task managers, a host that vanished —
//! fails the connection on both ends within the plane's peer timeout (twice the task manager's
//! `heartbeat.timeout`): data unacknowledged for that long, or keepalive probes of an idle
//! connection unanswered ([`give_up_silent_peer`]); a connection attempt gives up each try
//! after the handshake wait. A connection given up that way while its attempt still needs it
//! fails the attempt at once, through the task manager ([`AttemptNet::report_faults`]), and the
//! job manager restarts the job from its latest checkpoint instead of waiting for a checkpoint
//! to expire; a producer that sends on it afterwards fails with the same cause. So does a
//! connection dropped because its peer broke the protocol (a frame that does not decode, a
//! credit frame that is not one), whose consumers would otherwise wait for the rest of their
//! input. Connections the attempt itself closes end its subtasks quietly, as before.
//!
//! With mutual TLS on ([`crate::tls`]), a connection opens with a TLS 1.3 handshake in which
//! each side presents its certificate and checks the other's against the cluster's CA; all
//! that follows is encrypted ([`stream`]). With the cluster's secret set, a connection (inside
//! TLS, with both) opens with a challenge–response both ways ([`crate::security`]): consumer →
//! producer `WCHL` and a nonce; producer → consumer its own nonce and its HMAC; consumer →
//! producer its HMAC. The producer sends nothing more, and the consumer reads nothing more and
//! grants no credit, until the other side passed. A data port with neither listens on loopback
//! only ([`DataPlane::bind`]).
//!
//! Frames (little-endian):
//! - hello, producer → consumer, once: `WEIR`, version `u32`, generation `u64` (leadership
//!   term and attempt), producer task manager's id (`u16` length + UTF-8);
//! - data, producer → consumer: type `1`, edge `u32`, producer index `u32`, consumer index
//!   `u32`, payload length `u32`, payload;
//! - credit, consumer → producer: type `2`, edge, producer index, consumer index, credits `u32`;
//! - priority, producer → consumer: type `3`, edge, producer index, consumer index, payload
//!   length `u32`, payload: an encoded barrier announced ahead of the data (spends no credit);
//! - held, consumer → producer: type `4`, edge, producer index, consumer index, the number of
//!   the channel's elements the consumer holds back `u32`.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use weir_core::SubtaskId;
use weir_runtime::error::{JobError, TaskError};
use weir_runtime::remote::{
    ChannelKey, ConsumerCredits, CreditReturn, FrameDecoder, FrameWriter, Network, FRAME_HEADER,
};

use crate::error::ClusterError;
use crate::security::{self, ClusterSecret};
use crate::tls::{self, ClusterTls};
use crate::wire::DeploymentPlan;
use frame::{
    hello, parse_header, read_hello, write_header, CREDIT, DATA, HELD, MAX_FRAME, PRIORITY,
};
use stream::{DataWriter, Duplex};

mod frame;
pub(crate) mod stream;

/// How long a connection waits for its attempt to be deployed on this side, and a producer
/// for its consumer's task manager to accept.
const ATTEMPT_WAIT: Duration = Duration::from_secs(60);
/// How long either side of a new connection waits for the other's handshake and hello.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

/// This task manager's end of the data plane: the listener, and the network of each attempt.
#[derive(Clone)]
pub struct DataPlane {
    inner: Arc<PlaneInner>,
    address: SocketAddr,
}

struct PlaneInner {
    attempts: Mutex<Attempts>,
    changed: Condvar,
    secret: Option<ClusterSecret>,
    tls: Option<ClusterTls>,
    /// How long a connection's peer may stay silent before the connection is given up.
    peer_timeout: Duration,
}

#[derive(Default)]
struct Attempts {
    /// By generation (leadership term and attempt, [`DeploymentPlan::generation`]).
    open: HashMap<u64, Arc<AttemptNet>>,
    /// The newest generation ever opened: connections for older ones are refused.
    newest: Option<u64>,
}

impl DataPlane {
    /// Listens on `address` (port 0: any free port). With `tls`, every connection must present
    /// a certificate of the cluster's CA; with `secret`, every connection must prove it knows
    /// it; with neither, an address beyond loopback is refused. A connection whose peer stays
    /// silent for `peer_timeout` (twice the task manager's `heartbeat.timeout`) is given up
    /// (see the module's documentation).
    pub fn bind(
        address: SocketAddr,
        secret: Option<ClusterSecret>,
        tls: Option<ClusterTls>,
        peer_timeout: Duration,
    ) -> Result<DataPlane, ClusterError> {
        security::check_bind(
            address,
            secret.as_ref(),
            tls.as_ref(),
            "for data",
            "send records into the job, or take the records other task managers send it",
        )?;
        let listener = TcpListener::bind(address)
            .map_err(|e| ClusterError::io(format!("cannot listen for data on {address}"), e))?;
        let address = listener
            .local_addr()
            .map_err(|e| ClusterError::io("data listener address", e))?;
        let inner = Arc::new(PlaneInner {
            attempts: Mutex::new(Attempts::default()),
            changed: Condvar::new(),
            secret,
            tls,
            peer_timeout,
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("data-accept".into())
            .spawn(move || accept_loop(listener, weak))
            .map_err(|e| ClusterError::io("cannot start the data listener thread", e))?;
        Ok(DataPlane { inner, address })
    }

    /// The address the listener is bound to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Opens the network of an attempt for task manager `me`, closing those of older attempts.
    pub fn open_attempt(&self, me: &str, plan: &DeploymentPlan) -> Arc<AttemptNet> {
        let generation = plan.generation();
        let net = Arc::new(AttemptNet {
            generation,
            me: me.to_string(),
            secret: self.inner.secret.clone(),
            tls: self.inner.tls.clone(),
            peer_timeout: self.inner.peer_timeout,
            placement: plan.placement.iter().cloned().collect(),
            peers: plan.peers.iter().cloned().collect(),
            closed: AtomicBool::new(false),
            inbound: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            decoders: Mutex::new(HashMap::new()),
            outbound: Mutex::new(HashMap::new()),
            faults: Arc::new(Mutex::new(None)),
        });
        let stale: Vec<Arc<AttemptNet>> = {
            let mut attempts = self.inner.attempts.lock().expect("attempts lock");
            attempts.newest = Some(attempts.newest.map_or(generation, |n| n.max(generation)));
            let stale = attempts
                .open
                .extract_if(|a, _| *a < generation)
                .map(|(_, n)| n)
                .collect();
            attempts.open.insert(generation, net.clone());
            stale
        };
        self.inner.changed.notify_all();
        for old in stale {
            old.close();
        }
        net
    }

    /// Closes the connections of the attempt of `generation`: its blocked producers and
    /// readers stop.
    pub fn close_attempt(&self, generation: u64) {
        let net = self
            .inner
            .attempts
            .lock()
            .expect("attempts lock")
            .open
            .remove(&generation);
        if let Some(net) = net {
            net.close();
        }
    }
}

fn accept_loop(listener: TcpListener, plane: Weak<PlaneInner>) {
    for stream in listener.incoming() {
        let Some(plane) = plane.upgrade() else { return };
        match stream {
            Ok(stream) => {
                let _ = std::thread::Builder::new()
                    .name("data-in".into())
                    .spawn(move || {
                        let closer = stream.try_clone().ok();
                        let peer = stream
                            .peer_addr()
                            .map_or_else(|_| "an unknown address".into(), |a| a.to_string());
                        match serve_inbound(stream, &plane) {
                            Ok(()) => {}
                            // Connections break when an attempt is cancelled or a peer dies.
                            Err(InboundEnd::Io(e)) => {
                                tracing::debug!(error = %e, "inbound data connection ended")
                            }
                            Err(InboundEnd::Protocol(e)) => {
                                tracing::warn!(error = %e, "dropped a data connection")
                            }
                            Err(InboundEnd::Refused(e)) => {
                                tracing::warn!(%peer, error = %e, "refused a data connection")
                            }
                        }
                        // Also the half the attempt's credit returns write to.
                        if let Some(closer) = closer {
                            let _ = closer.shutdown(Shutdown::Both);
                        }
                    });
            }
            Err(e) => tracing::warn!(error = %e, "accepting a data connection failed"),
        }
    }
}

/// Why an inbound connection ended.
enum InboundEnd {
    /// The connection broke (an attempt was cancelled, a peer died).
    Io(String),
    /// The peer sent something that is not Weir's data protocol, or broke its rules.
    Protocol(String),
    /// The peer did not present a certificate of the cluster's CA, or did not prove it knows
    /// the cluster's secret.
    Refused(String),
}

/// Reads one producer task manager's connection: the handshakes (TLS, the secret's), its
/// hello, then its frames.
fn serve_inbound(mut stream: TcpStream, plane: &PlaneInner) -> Result<(), InboundEnd> {
    let io = |e: std::io::Error| InboundEnd::Io(e.to_string());
    stream.set_nodelay(true).map_err(io)?;
    give_up_silent_peer(&stream, plane.peer_timeout);
    stream.set_read_timeout(Some(HANDSHAKE_WAIT)).map_err(io)?;
    let tls = match &plane.tls {
        Some(tls) => Some(tls.accept(&mut stream).map_err(InboundEnd::Refused)?),
        None => None,
    };
    let (mut reader, mut writer) = stream::split(stream, tls).map_err(io)?;
    if let Some(secret) = &plane.secret {
        security::challenge_producer(&mut Duplex(&mut reader, &mut writer), secret)
            .map_err(InboundEnd::Refused)?;
    }
    let (generation, producer_tm) = read_hello(&mut reader).map_err(InboundEnd::Protocol)?;
    reader.set_read_timeout(None).map_err(io)?;
    let Some(net) = wait_for_attempt(plane, generation) else {
        return Err(InboundEnd::Io(format!(
            "attempt {} of term {} is not (or no longer) deployed here",
            generation as u32,
            generation >> 32
        )));
    };
    net.attach_inbound(&producer_tm, writer);
    let read = read_frames(reader, &net, &producer_tm);
    // The consumers of this connection's channels would wait for the rest of their input
    // forever: a producer that breaks the protocol fails the attempt (with the cause).
    if let Err(InboundEnd::Protocol(e)) = &read {
        if !net.closed.load(Ordering::Acquire) {
            report(&net.faults, format!("dropped a data connection: {e}"));
        }
    }
    read
}

/// Reads a producer task manager's frames into the attempt's channels until the connection
/// ends.
fn read_frames(
    reader: stream::DataReader,
    net: &AttemptNet,
    producer_tm: &str,
) -> Result<(), InboundEnd> {
    let mut reader = std::io::BufReader::with_capacity(1 << 20, reader);
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => {
                return Err(match tls::refusal(&e) {
                    Some(refused) => InboundEnd::Refused(format!("{producer_tm}: {refused}")),
                    None => InboundEnd::Io(format!("reading from {producer_tm}: {e}")),
                })
            }
        }
        let (kind, key, len) = parse_header(&header);
        if !matches!(kind, DATA | PRIORITY) || len as usize > MAX_FRAME {
            return Err(InboundEnd::Protocol(format!(
                "task manager {producer_tm} sent a malformed frame (type {kind}, {len} bytes)"
            )));
        }
        let len = len as usize;
        // A frame already whole in the read buffer (most are: it takes up to 1 MiB from the
        // socket at a time) is decoded where it lies; only one split across reads is copied.
        let in_buffer = reader.buffer().len() >= len;
        if !in_buffer {
            payload.resize(len, 0);
            reader
                .read_exact(&mut payload)
                .map_err(|e| InboundEnd::Io(format!("reading a frame from {producer_tm}: {e}")))?;
        }
        if net.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut decoders = net.decoders.lock().expect("decoders lock");
        let Some(channel) = decoders.get_mut(&key) else {
            if kind == PRIORITY {
                // No credit held it back: it may come while this side still deploys. The
                // barrier follows in-band, and starts the capture there.
                tracing::debug!(?key, "a priority frame for a channel not deployed yet");
                if in_buffer {
                    reader.consume(len);
                }
                continue;
            }
            return Err(InboundEnd::Protocol(format!(
                "task manager {producer_tm} sent on channel {key:?}, which is not deployed here"
            )));
        };
        let decode = match kind {
            PRIORITY => &mut channel.priority,
            _ => &mut channel.data,
        };
        let decoded = if in_buffer {
            let decoded = decode(&reader.buffer()[..len]);
            reader.consume(len);
            decoded
        } else {
            decode(&payload)
        };
        if let Err(e) = decoded {
            return Err(InboundEnd::Protocol(format!(
                "channel {key:?} from {producer_tm}: {e}"
            )));
        }
    }
}

fn wait_for_attempt(plane: &PlaneInner, generation: u64) -> Option<Arc<AttemptNet>> {
    let deadline = Instant::now() + ATTEMPT_WAIT;
    let mut attempts = plane.attempts.lock().ok()?;
    loop {
        if let Some(net) = attempts.open.get(&generation) {
            return Some(net.clone());
        }
        if attempts.newest.is_some_and(|n| n > generation) || Instant::now() >= deadline {
            return None;
        }
        attempts = plane
            .changed
            .wait_timeout(attempts, Duration::from_millis(200))
            .ok()?
            .0;
    }
}

/// One attempt's channels on this task manager.
pub struct AttemptNet {
    generation: u64,
    me: String,
    secret: Option<ClusterSecret>,
    tls: Option<ClusterTls>,
    peer_timeout: Duration,
    placement: HashMap<SubtaskId, String>,
    peers: HashMap<String, String>,
    closed: AtomicBool,
    /// Consumer side: per channel from another task manager, the connection its credits go
    /// back on (once that producer connected) and its initial credits.
    inbound: Mutex<HashMap<ChannelKey, Arc<Inbound>>>,
    /// Consumer side: the connection from each producer task manager.
    conns: Mutex<HashMap<String, Arc<Mutex<DataWriter>>>>,
    decoders: Mutex<HashMap<ChannelKey, Decoders>>,
    /// Producer side: the connection to each consumer task manager.
    outbound: Mutex<HashMap<String, Arc<Outbound>>>,
    /// Where a connection given up because its peer went silent, or dropped because its
    /// producer broke the protocol, is reported while the attempt's task manager listens
    /// ([`AttemptNet::report_faults`]).
    faults: Arc<Mutex<Option<FaultReport>>>,
}

/// Takes the cause of a data connection given up while the attempt still needed it.
type FaultReport = Box<dyn Fn(String) + Send>;

/// Fails the attempt with `error` through `faults`, if its task manager listens.
fn report(faults: &Mutex<Option<FaultReport>>, error: String) {
    if let Some(report) = faults.lock().ok().as_deref().and_then(Option::as_ref) {
        report(error);
    }
}

/// Consumer side: where one channel's frames go.
struct Decoders {
    /// Data frames: elements for the consumer's queue.
    data: FrameDecoder,
    /// Priority frames: barriers for the consumer subtask's control channel.
    priority: FrameDecoder,
}

struct Inbound {
    key: ChannelKey,
    producer_tm: String,
    capacity: u32,
    conn: OnceLock<Arc<Mutex<DataWriter>>>,
    /// The last held count the producer was told (none yet: it assumes 0).
    told_held: Mutex<u32>,
    /// Credits earned by elements the gate took and not sent yet: they go back in one frame
    /// once there are [`Inbound::credit_batch`] of them, or when the gate empties the queue.
    owed: AtomicU32,
}

impl Inbound {
    /// How many credits go back in one frame while the consumer's queue still holds elements:
    /// half the queue, so that the producer always has the other half to fill meanwhile. One
    /// frame per element took a system call and a wake-up of the producer's task manager per
    /// batch.
    fn credit_batch(&self) -> u32 {
        (self.capacity / 2).max(1)
    }

    fn grant(&self, credits: u32) {
        self.send(CREDIT, credits);
    }

    /// Sends a frame of `kind` whose header's last field is `value`; whether it went out.
    fn send(&self, kind: u8, value: u32) -> bool {
        let Some(conn) = self.conn.get() else {
            return false;
        };
        let mut frame = [0u8; FRAME_HEADER];
        write_header(&mut frame, kind, self.key, value);
        match conn.lock() {
            // A failed write means the producer is gone; the attempt is ending anyway.
            Ok(mut stream) => stream.write_all(&frame).is_ok(),
            Err(_) => false,
        }
    }
}

impl ConsumerCredits for Inbound {
    fn taken(&self, still_queued: usize) {
        // Only the gate's thread calls this.
        let owed = self.owed.load(Ordering::Relaxed) + 1;
        if still_queued > 0 && owed < self.credit_batch() {
            self.owed.store(owed, Ordering::Relaxed);
            return;
        }
        self.owed.store(0, Ordering::Relaxed);
        self.grant(owed);
    }

    fn held(&self, elements: usize) {
        let elements = u32::try_from(elements).unwrap_or(u32::MAX);
        let Ok(mut told) = self.told_held.lock() else {
            return;
        };
        // Only the gate's thread calls this: counts go out in the order the gate reached them.
        if *told != elements && self.send(HELD, elements) {
            *told = elements;
        }
    }
}

/// A connection to one consumer task manager, and the credits of the channels it carries.
struct Outbound {
    /// The consumer's task manager.
    peer: String,
    stream: Mutex<Option<DataWriter>>,
    credits: Mutex<HashMap<ChannelKey, Arc<Credit>>>,
    broken: AtomicBool,
    /// Set when the attempt closes the connection: what fails after that is the attempt
    /// ending, not a fault.
    closing: AtomicBool,
    /// Why the connection was given up while the attempt still needed it (its peer went
    /// silent, broke the protocol or was refused), for the producers that then fail.
    fault: OnceLock<String>,
}

#[derive(Default)]
struct Credit {
    available: Mutex<u32>,
    granted: Condvar,
    /// How many of the channel's elements the consumer holds back: they count against its
    /// credits when the producer asks for room.
    held: AtomicU32,
}

impl AttemptNet {
    /// From now on, a connection to a consumer task manager given up because it went silent,
    /// or one from a producer task manager dropped because it broke the protocol (a frame that
    /// does not decode), fails the attempt through `report` (with the cause), at once. The
    /// producers of a silent connection learn of it too, but only when they next send to that
    /// task manager: one blocked elsewhere — on a local channel whose consumer waits, to align
    /// a checkpoint, for a barrier that crossed the lost connection — would never send again;
    /// and the consumers of a dropped connection would wait for the rest of their input.
    pub fn report_faults(&self, report: impl Fn(String) + Send + 'static) {
        if let Ok(mut faults) = self.faults.lock() {
            *faults = Some(Box::new(report));
        }
    }

    /// Stops reporting faults (see [`report_faults`](Self::report_faults)): the attempt's
    /// subtasks have ended, and whatever `report` holds is released.
    pub fn stop_reporting_faults(&self) {
        if let Ok(mut faults) = self.faults.lock() {
            *faults = None;
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for conn in self.conns.lock().expect("conns lock").values() {
            if let Ok(s) = conn.lock() {
                s.shutdown();
            }
        }
        for out in self.outbound.lock().expect("outbound lock").values() {
            out.closing.store(true, Ordering::Release);
            if let Ok(Some(s)) = out.stream.lock().as_deref() {
                s.shutdown();
            }
            out.break_all();
        }
    }

    /// A producer task manager connected: its channels get their first credits.
    ///
    /// Each side registers first and looks for the other second (here: the connection, then
    /// the channels; in [`Network::incoming`]: the channel, then the connection), so a channel
    /// registered at the same time is found by at least one of them; its `OnceLock` makes sure
    /// the first credits go out once.
    fn attach_inbound(&self, producer_tm: &str, stream: DataWriter) {
        let conn = Arc::new(Mutex::new(stream));
        self.conns
            .lock()
            .expect("conns lock")
            .insert(producer_tm.to_string(), conn.clone());
        for channel in self.inbound.lock().expect("inbound lock").values() {
            if channel.producer_tm == producer_tm && channel.conn.set(conn.clone()).is_ok() {
                channel.grant(channel.capacity);
            }
        }
        if self.closed.load(Ordering::Acquire) {
            if let Ok(s) = conn.lock() {
                s.shutdown();
            }
        }
    }

    fn tm_of(&self, subtask: SubtaskId) -> Result<&str, JobError> {
        self.placement
            .get(&subtask)
            .map(String::as_str)
            .ok_or_else(|| {
                JobError::Failed(format!("subtask {subtask} is placed on no task manager"))
            })
    }

    fn outbound_to(&self, tm: &str) -> Result<Arc<Outbound>, JobError> {
        let mut outbound = self.outbound.lock().expect("outbound lock");
        if let Some(out) = outbound.get(tm) {
            return Ok(out.clone());
        }
        let address = self
            .peers
            .get(tm)
            .ok_or_else(|| JobError::Failed(format!("task manager {tm} has no data address")))?
            .clone();
        let out = Arc::new(Outbound::new(tm));
        outbound.insert(tm.to_string(), out.clone());
        let (generation, me) = (self.generation, self.me.clone());
        let (secret, tls) = (self.secret.clone(), self.tls.clone());
        let peer_timeout = self.peer_timeout;
        let faults = self.faults.clone();
        let weak = Arc::downgrade(&out);
        std::thread::Builder::new()
            .name("data-out".into())
            .spawn(move || {
                let security = (secret.as_ref(), tls.as_ref());
                let ended = run_outbound(&address, generation, &me, security, peer_timeout, &weak);
                if let Some(out) = weak.upgrade() {
                    out.ended(ended, &address, &faults);
                }
            })
            .map_err(|e| JobError::Failed(format!("cannot start a data connection thread: {e}")))?;
        Ok(out)
    }
}

/// The error a data connection to task manager `peer` given up for `cause` fails the attempt
/// with.
fn connection_failed(peer: &str, cause: &str) -> String {
    format!("the data connection to task manager {peer} failed: {cause}")
}

/// Why an outbound connection ended.
enum OutboundEnd {
    /// The connection ended: the consumer's side closed it (its attempt ended, or its process
    /// died, which the job manager learns from its own session with that task manager).
    Io(String),
    /// The consumer went silent past the peer timeout (a partition): the producers fail.
    Silent(String),
    /// The consumer broke the protocol (a frame that is not a credit): the producers fail.
    Protocol(String),
    /// The consumer did not present a certificate of the cluster's CA (or refused this task
    /// manager's), or did not prove it knows the cluster's secret.
    Refused(String),
}

/// How an outbound connection ended on `e`: a peer that stopped answering, or a plain end.
fn silent_or_io(e: &std::io::Error, message: String) -> OutboundEnd {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            OutboundEnd::Silent(message)
        }
        _ => OutboundEnd::Io(message),
    }
}

impl From<String> for OutboundEnd {
    fn from(e: String) -> OutboundEnd {
        OutboundEnd::Io(e)
    }
}

impl From<&str> for OutboundEnd {
    fn from(e: &str) -> OutboundEnd {
        OutboundEnd::Io(e.to_string())
    }
}

/// Connects to a consumer task manager, checks its certificate (and shows its own), proves it
/// knows the secret (and checks the consumer does), says hello, then reads the credits it
/// grants.
fn run_outbound(
    address: &str,
    generation: u64,
    me: &str,
    (secret, tls): (Option<&ClusterSecret>, Option<&ClusterTls>),
    peer_timeout: Duration,
    out: &Weak<Outbound>,
) -> Result<(), OutboundEnd> {
    let deadline = Instant::now() + ATTEMPT_WAIT;
    let mut stream = loop {
        let wait = HANDSHAKE_WAIT.min(deadline.saturating_duration_since(Instant::now()));
        match connect_within(address, wait.max(Duration::from_millis(1))) {
            Ok(s) => break s,
            Err(e) => {
                let alive = out
                    .upgrade()
                    .is_some_and(|o| !o.broken.load(Ordering::Acquire));
                if !alive || Instant::now() >= deadline {
                    return Err(silent_or_io(
                        &e,
                        format!("cannot connect to {address}: {e}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    give_up_silent_peer(&stream, peer_timeout);
    stream
        .set_read_timeout(Some(HANDSHAKE_WAIT))
        .map_err(|e| e.to_string())?;
    let tls = match tls {
        Some(tls) => Some(
            tls.connect(&mut stream, host_of(address))
                .map_err(OutboundEnd::Refused)?,
        ),
        None => None,
    };
    let (mut reader, mut writer) = stream::split(stream, tls).map_err(|e| e.to_string())?;
    if let Some(secret) = secret {
        security::answer_consumer(&mut Duplex(&mut reader, &mut writer), secret)
            .map_err(OutboundEnd::Refused)?;
    }
    reader.set_read_timeout(None).map_err(|e| e.to_string())?;
    writer
        .write_all(&hello(generation, me))
        .map_err(|e| format!("sending the hello to {address}: {e}"))?;
    {
        let Some(o) = out.upgrade() else {
            return Ok(());
        };
        *o.stream.lock().map_err(|_| "stream poisoned")? = Some(writer);
        if o.broken.load(Ordering::Acquire) {
            reader.shutdown();
            return Ok(());
        }
    }
    let mut reader = std::io::BufReader::new(reader);
    loop {
        let mut header = [0u8; FRAME_HEADER];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => {
                // With TLS 1.3 a consumer that refuses this task manager's certificate says so
                // after the handshake, in place of the first credits.
                return Err(match tls::refusal(&e) {
                    Some(refused) => OutboundEnd::Refused(refused),
                    None => silent_or_io(&e, format!("reading credits from {address}: {e}")),
                });
            }
        }
        let (kind, key, value) = parse_header(&header);
        if !matches!(kind, CREDIT | HELD) {
            return Err(OutboundEnd::Protocol(format!(
                "{address} sent a malformed frame (type {kind})"
            )));
        }
        let Some(o) = out.upgrade() else {
            return Ok(());
        };
        let credit = o
            .credits
            .lock()
            .map_err(|_| "credits poisoned")?
            .entry(key)
            .or_default()
            .clone();
        if kind == HELD {
            credit.held.store(value, Ordering::Relaxed);
            continue;
        }
        *credit.available.lock().map_err(|_| "credit poisoned")? += value;
        credit.granted.notify_one();
    }
}

impl Outbound {
    /// The connection to `peer`, not up yet.
    fn new(peer: &str) -> Outbound {
        Outbound {
            peer: peer.to_string(),
            stream: Mutex::new(None),
            credits: Mutex::new(HashMap::new()),
            broken: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            fault: OnceLock::new(),
        }
    }

    /// The connection's thread ended with `end`: every producer waiting on it wakes up, and a
    /// peer gone silent, breaking the protocol or refused as no member of the cluster while
    /// the attempt still needs the connection fails the attempt through `faults` (when a task
    /// manager listens) and each producer that sends on it afterwards.
    fn ended(
        &self,
        end: Result<(), OutboundEnd>,
        address: &str,
        faults: &Mutex<Option<FaultReport>>,
    ) {
        let tm = &self.peer;
        let fault = match end {
            Ok(()) => None,
            Err(OutboundEnd::Io(e)) => {
                tracing::debug!(peer = %tm, error = %e, "outbound data connection ended");
                None
            }
            Err(OutboundEnd::Silent(e)) => {
                tracing::warn!(peer = %tm, error = %e, "gave up a data connection whose peer went silent");
                Some(e)
            }
            Err(OutboundEnd::Protocol(e)) => {
                tracing::warn!(peer = %tm, error = %e, "dropped a data connection");
                Some(e)
            }
            Err(OutboundEnd::Refused(e)) => {
                tracing::warn!(peer = %tm, %address, error = %e, "sent no data to a peer that is not a member of the cluster (its certificate or the secret)");
                Some(format!(
                    "{address} is not a member of the cluster (its certificate or the secret): {e}"
                ))
            }
        };
        if let Some(fault) = fault {
            if !self.closing.load(Ordering::Acquire) {
                report(faults, connection_failed(tm, &fault));
                let _ = self.fault.set(fault);
            }
        }
        self.break_all();
    }

    /// Why a producer's send on this connection failed: the attempt or the consumer's side
    /// ending it (its subtasks stop quietly, as everything else that breaks a channel then),
    /// or the consumer gone silent, breaking the protocol or refused while the attempt still
    /// needs it — which fails the producer, so that the job manager restarts the job now, not
    /// when a checkpoint expires.
    fn failure(&self, error: Option<std::io::Error>) -> TaskError {
        if self.closing.load(Ordering::Acquire) {
            return TaskError::ChannelClosed;
        }
        let cause = match error {
            Some(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                format!("sending to it: {error}")
            }
            _ => {
                // A send can fail before the connection's reader has seen why: give it a moment.
                let until = Instant::now() + Duration::from_secs(1);
                while !self.broken.load(Ordering::Acquire) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                match self.fault.get() {
                    Some(fault) => fault.clone(),
                    // Ended by the consumer's side: its subtasks finished or were cancelled, or
                    // its process died (the job manager hears of that from its own session with
                    // that task manager).
                    None => return TaskError::ChannelClosed,
                }
            }
        };
        TaskError::Io(std::io::Error::other(connection_failed(&self.peer, &cause)))
    }

    /// The connection is gone: every producer waiting for credit on it wakes up and fails.
    fn break_all(&self) {
        self.broken.store(true, Ordering::Release);
        for credit in self.credits.lock().expect("credits lock").values() {
            let _guard = credit.available.lock();
            credit.granted.notify_all();
        }
    }
}

/// The producer's end of one channel to another task manager.
struct RemoteWriter {
    key: ChannelKey,
    out: Arc<Outbound>,
    credit: Arc<Credit>,
}

impl FrameWriter for RemoteWriter {
    fn write(&mut self, frame: &mut [u8]) -> Result<(), TaskError> {
        {
            let mut available = self
                .credit
                .available
                .lock()
                .map_err(|_| TaskError::ChannelClosed)?;
            if *available == 0 {
                let start = Instant::now();
                while *available == 0 {
                    if self.out.broken.load(Ordering::Acquire) {
                        return Err(self.out.failure(None));
                    }
                    available = self
                        .credit
                        .granted
                        .wait_timeout(available, Duration::from_millis(100))
                        .map_err(|_| TaskError::ChannelClosed)?
                        .0;
                }
                weir_runtime::channel::add_backpressure(start.elapsed().as_nanos() as u64);
            }
            *available -= 1;
        }
        let len = frame.len() - FRAME_HEADER;
        write_header(frame, DATA, self.key, len as u32);
        let mut stream = self
            .out
            .stream
            .lock()
            .map_err(|_| TaskError::ChannelClosed)?;
        let stream = stream.as_mut().ok_or(TaskError::ChannelClosed)?;
        stream
            .write_all(frame)
            .map_err(|e| self.out.failure(Some(e)))
    }

    fn write_priority(&mut self, frame: &mut [u8]) -> Result<(), TaskError> {
        if self.out.broken.load(Ordering::Acquire) {
            return Err(self.out.failure(None));
        }
        let len = frame.len() - FRAME_HEADER;
        write_header(frame, PRIORITY, self.key, len as u32);
        let mut stream = self
            .out
            .stream
            .lock()
            .map_err(|_| TaskError::ChannelClosed)?;
        match stream.as_mut() {
            Some(stream) => stream
                .write_all(frame)
                .map_err(|e| self.out.failure(Some(e))),
            // Not connected yet: no frame went out for the barrier to overtake.
            None => Ok(()),
        }
    }

    fn has_room(&self) -> bool {
        let held = self.credit.held.load(Ordering::Relaxed);
        self.credit
            .available
            .lock()
            .is_ok_and(|available| *available > held)
    }
}

impl Network for AttemptNet {
    fn is_local(&self, subtask: SubtaskId) -> bool {
        self.placement
            .get(&subtask)
            .is_some_and(|tm| *tm == self.me)
    }

    fn outgoing(
        &self,
        key: ChannelKey,
        consumer: SubtaskId,
    ) -> Result<Box<dyn FrameWriter>, JobError> {
        let out = self.outbound_to(self.tm_of(consumer)?)?;
        let credit = out
            .credits
            .lock()
            .expect("credits lock")
            .entry(key)
            .or_default()
            .clone();
        Ok(Box::new(RemoteWriter { key, out, credit }))
    }

    fn incoming(
        &self,
        key: ChannelKey,
        producer: SubtaskId,
        capacity: usize,
        decoder: FrameDecoder,
        priority: FrameDecoder,
    ) -> Result<CreditReturn, JobError> {
        let producer_tm = self.tm_of(producer)?.to_string();
        self.decoders.lock().expect("decoders lock").insert(
            key,
            Decoders {
                data: decoder,
                priority,
            },
        );
        let channel = Arc::new(Inbound {
            key,
            producer_tm: producer_tm.clone(),
            capacity: capacity as u32,
            conn: OnceLock::new(),
            told_held: Mutex::new(0),
            owed: AtomicU32::new(0),
        });
        self.inbound
            .lock()
            .expect("inbound lock")
            .insert(key, channel.clone());
        let conn = self
            .conns
            .lock()
            .expect("conns lock")
            .get(&producer_tm)
            .cloned();
        if let Some(conn) = conn {
            if channel.conn.set(conn.clone()).is_ok() {
                channel.grant(channel.capacity);
            }
        }
        Ok(channel)
    }
}

/// Connects to `address`, giving up each of its addresses after `wait` (a peer behind a
/// partition drops the handshake: without a limit, the system's own takes minutes).
fn connect_within(address: &str, wait: Duration) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, wait) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{address} resolves to no address"),
        )
    }))
}

/// Gives up the connection when its peer stays silent for `timeout`: data sent and not
/// acknowledged for that long (`TCP_USER_TIMEOUT`), or an idle connection whose keepalive
/// probes go unanswered. A partition between two task managers then fails the reads and
/// writes on both ends within about `timeout`, where the system's defaults wait for minutes
/// (an idle connection: hours). A peer that is merely busy or back-pressured still answers
/// at the TCP level, so it is never given up. Where the options cannot be set, the connection
/// keeps the system's defaults.
fn give_up_silent_peer(stream: &TcpStream, timeout: Duration) {
    let socket = socket2::SockRef::from(stream);
    let probe = (timeout / 4).max(Duration::from_secs(1));
    let keepalive = socket2::TcpKeepalive::new().with_time(probe);
    #[cfg(target_os = "linux")]
    let keepalive = keepalive.with_interval(probe).with_retries(3);
    let set = socket.set_tcp_keepalive(&keepalive);
    #[cfg(target_os = "linux")]
    let set = set.and_then(|()| socket.set_tcp_user_timeout(Some(timeout)));
    if let Err(e) = set {
        tracing::debug!(error = %e, "a data connection keeps the system's timeouts");
    }
}

/// The host of a `host:port` address (without an IPv6 address's brackets).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests;
