//! The input gate of a subtask: reads its input channels and control messages, and aligns
//! checkpoint barriers.
//!
//! Exactly-once (aligned): when a barrier arrives on a channel, that channel is *blocked* — not
//! read — until the same barrier has arrived on every channel that has not ended; then the
//! gate reports [`GateEvent::Aligned`] and unblocks all. Records behind a barrier therefore
//! never reach the operator before its snapshot. At-least-once: channels are never blocked;
//! the snapshot happens when the last barrier arrives.
//!
//! Unaligned: a barrier that overtakes the data — announced on the control channel ahead of it
//! ([`TaskControl::PriorityBarrier`]), or met in a channel first — makes the gate *capture*:
//! it reads every live channel up to the barrier's place in it into a replay queue, handing
//! nothing on, and reports [`GateEvent::Unaligned`] with what the queues hold (the channel
//! state); the queues are handed on next, before anything newer. A barrier aligned with a
//! timeout starts as an aligned one, and the gate captures once the timeout after the trigger
//! has passed without the gate having aligned it: the channels that delivered the barrier
//! already hold nothing ahead of it, the others are read up to it.
//!
//! Watermarks and idleness go through the gate's [`WatermarkValve`]: the subtask's watermark is
//! the minimum over its live, active inputs. They travel in the same FIFO channels as records
//! and barriers, so a watermark never overtakes a barrier (or a record) sent before it, and a
//! channel blocked for alignment delivers no watermark either until it is unblocked.

use crossbeam_channel::{Receiver, Select, TryRecvError};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_core::{
    Barrier, BarrierAlignment, CheckpointId, CheckpointingMode, Element, WatermarkStatus,
};

use crate::channel_state::ChannelStateCodec;
use crate::control::TaskControl;
use crate::error::TaskError;
use crate::watermark_valve::{ValveOutput, WatermarkValve};

/// How many times a gate that finds every queue empty yields its core before it parks.
const YIELDS_BEFORE_PARKING: u32 = 2;

/// How many aborted checkpoints a gate remembers ahead of its last alignment. Only a long run
/// of aborts with no alignment between fills it; forgetting the oldest then lets its late
/// barrier start an alignment that the next newer barrier supersedes.
const MAX_ABORTED_REMEMBERED: usize = 64;

/// What the gate hands its task loop.
#[derive(Debug)]
pub enum GateEvent<T> {
    Records(Vec<T>),
    /// The minimum watermark over all inputs advanced.
    Watermark(i64),
    /// Every live input became idle, or one became active again.
    WatermarkStatus(WatermarkStatus),
    /// A barrier arrived on every live channel: snapshot now, then forward it.
    Aligned {
        barrier: Barrier,
        stats: AlignmentStats,
    },
    /// An unaligned checkpoint's barrier reached the subtask: snapshot now and forward it.
    /// `channels` is the channel state — what the input channels held ahead of the barrier,
    /// encoded — which the gate hands to the operator next, before anything newer.
    Unaligned {
        barrier: Barrier,
        /// Its alignment time runs from the barrier's first arrival to the last channel's
        /// part captured.
        stats: AlignmentStats,
        channels: Vec<u8>,
    },
    Control(TaskControl),
    /// Every input channel has ended.
    EndOfInput,
    /// The deadline passed with nothing to read.
    Timeout,
}

/// How a subtask came to its snapshot, as the checkpoint's statistics report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlignmentStats {
    /// From the barrier's first arrival to the snapshot.
    pub alignment_ms: u64,
    /// From the checkpoint's trigger to the barrier's first arrival.
    pub start_delay_ms: u64,
    /// Records handed on while the checkpoint was aligned: from the channels still ahead of
    /// the barrier (and before a barrier aligned with a timeout turned unaligned).
    pub processed_records: u64,
}

struct Alignment {
    barrier: Barrier,
    first_arrival: Instant,
    start_delay_ms: u64,
    /// Records handed on since the first arrival.
    processed_records: u64,
}

/// Reads a subtask's channels and aligns barriers.
pub struct InputGate<T> {
    channels: Vec<Receiver<Element<T>>>,
    control: Receiver<TaskControl>,
    mode: CheckpointingMode,
    /// Per channel: has delivered the barrier of the current alignment.
    seen: Vec<bool>,
    ended: Vec<bool>,
    live: usize,
    end_reported: bool,
    alignment: Option<Alignment>,
    /// The newest checkpoint this gate aligned or gave up for a newer barrier; older barriers
    /// are ignored.
    last_checkpoint: CheckpointId,
    // Invariant: only ids above `last_checkpoint`, at most `MAX_ABORTED_REMEMBERED` of them.
    // An abort says nothing about older checkpoints (a savepoint beside periodic checkpoints,
    // or max-concurrent-checkpoints > 1): their barriers may still be on the way and align.
    /// Checkpoints aborted before this gate aligned them; their late barriers are ignored.
    aborted: BTreeSet<CheckpointId>,
    valve: WatermarkValve,
    /// The second half of a valve output that produced two events.
    pending: Option<GateEvent<T>>,
    next: usize,
    /// Per channel, for a channel from another process: grants its producer a credit for each
    /// element taken out of the queue (captured ones too), and tells it how many the replay
    /// queue holds back.
    credits: Vec<Option<crate::remote::CreditReturn>>,
    // Invariant: a channel's replay queue is read before the channel itself, so its elements
    // keep their order.
    /// Per channel: elements taken out of the channel but not handed on yet — captured by an
    /// unaligned checkpoint, or restored from one.
    replay: Vec<VecDeque<Element<T>>>,
    /// Encodes the channel state of unaligned checkpoints; `None`: they are not taken here.
    codec: Option<ChannelStateCodec<T>>,
    /// An unaligned barrier seen by the last call's reading, to be captured before it returns
    /// (and the channel it arrived on, already at its place).
    capture: Option<(Barrier, Option<usize>)>,
    /// Control messages that came during a capture, handed on after it.
    deferred: VecDeque<TaskControl>,
    /// A barrier aligned with a timeout, announced or met, and when it turns unaligned here.
    timer: Option<(Barrier, Instant)>,
    // Invariant: a channel's backlog is the length of its replay queue, so that what a
    // capture takes out of a channel still counts against its capacity.
    /// Per channel, shared with its producer (`None`: the producer does not ask).
    backlogs: Vec<Option<crate::channel::Backlog>>,
}

impl<T> InputGate<T> {
    pub fn new(
        channels: Vec<Receiver<Element<T>>>,
        control: Receiver<TaskControl>,
        mode: CheckpointingMode,
    ) -> InputGate<T> {
        let n = channels.len();
        InputGate {
            channels,
            control,
            mode,
            seen: vec![false; n],
            ended: vec![false; n],
            live: n,
            end_reported: false,
            alignment: None,
            last_checkpoint: CheckpointId(0),
            aborted: BTreeSet::new(),
            valve: WatermarkValve::new(n),
            pending: None,
            next: 0,
            credits: Vec::new(),
            replay: (0..n).map(|_| VecDeque::new()).collect(),
            codec: None,
            capture: None,
            deferred: VecDeque::new(),
            timer: None,
            backlogs: Vec::new(),
        }
    }

    /// Shares each channel's replay queue length with its producer (in channel order), which
    /// then counts it against the channel's capacity.
    pub fn with_backlogs(mut self, backlogs: Vec<Option<crate::channel::Backlog>>) -> InputGate<T> {
        for (backlog, queue) in backlogs.iter().zip(&self.replay) {
            if let Some(b) = backlog {
                b.store(queue.len(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.backlogs = backlogs;
        self
    }

    /// The replay queue of channel `i` changed by `delta` elements.
    fn replayed(&self, i: usize, delta: isize) {
        if let Some(Some(b)) = self.backlogs.get(i) {
            if delta > 0 {
                b.fetch_add(delta as usize, std::sync::atomic::Ordering::Relaxed);
            } else {
                b.fetch_sub(delta.unsigned_abs(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        // A remote channel's producer learns the same through the channel's credits.
        if let Some(Some(credit)) = self.credits.get(i) {
            credit.held(self.replay[i].len());
        }
    }

    /// Lets the gate take unaligned checkpoints, encoding their channel state with `codec`,
    /// and hands it the channel state of the checkpoint it restores (`restored`), read before
    /// anything newer on each channel.
    pub fn with_channel_state(
        mut self,
        codec: ChannelStateCodec<T>,
        restored: Option<&[u8]>,
    ) -> Result<InputGate<T>, String> {
        if let Some(bytes) = restored {
            let channels = codec.restore(bytes, self.channels.len())?;
            self.replay = channels.into_iter().map(VecDeque::from).collect();
        }
        self.codec = Some(codec);
        Ok(self)
    }

    /// Gives the gate the credit returns of its remote channels (in channel order; `None` for
    /// an in-process channel).
    pub fn with_credit_returns(
        mut self,
        credits: Vec<Option<crate::remote::CreditReturn>>,
    ) -> InputGate<T> {
        debug_assert!(credits.is_empty() || credits.len() == self.channels.len());
        self.credits = credits;
        self
    }

    fn readable(&self, i: usize) -> bool {
        let blocked = self.mode == CheckpointingMode::ExactlyOnce && self.seen[i];
        !self.ended[i] && !blocked
    }

    /// Waits for the next event, until `deadline` if one is given.
    pub fn next(&mut self, deadline: Option<Instant>) -> Result<GateEvent<T>, TaskError> {
        if let Some(event) = self.pending.take() {
            return Ok(event);
        }
        let mut yields = 0;
        loop {
            if self.live == 0 && !self.end_reported {
                self.end_reported = true;
                return Ok(GateEvent::EndOfInput);
            }
            let control = match self.deferred.pop_front() {
                Some(c) => Some(c),
                None => match self.control.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Disconnected) => {
                        return Ok(GateEvent::Control(TaskControl::Cancel))
                    }
                    Err(TryRecvError::Empty) => None,
                },
            };
            if let Some(c) = control {
                let event = self.on_control(c);
                return self.captured_or(event);
            }
            if self.timer.is_some() && self.timer_expired(Instant::now()) {
                return self.captured_or(GateEvent::Timeout);
            }
            // Fast path while data flows: poll the readable channels round-robin, each one's
            // replay queue first.
            let n = self.channels.len();
            let mut polled = None;
            for k in 0..n {
                let i = (self.next + k) % n;
                if !self.readable(i) {
                    continue;
                }
                if let Some(e) = self.replay[i].pop_front() {
                    self.replayed(i, -1);
                    polled = Some((i, e, false));
                    break;
                }
                match self.channels[i].try_recv() {
                    Ok(e) => {
                        polled = Some((i, e, true));
                        break;
                    }
                    Err(TryRecvError::Empty) => {}
                    Err(TryRecvError::Disconnected) => return Err(TaskError::ChannelClosed),
                }
            }
            let (i, element, from_channel) = match polled {
                Some(p) => p,
                // Every queue is empty: give the core away before parking. A producer sharing
                // the core (in a task manager with fewer cores than busy threads) then fills
                // the queues with several batches, and this subtask takes them in one turn
                // instead of being woken, and switched to, for each one.
                None if yields < YIELDS_BEFORE_PARKING => {
                    yields += 1;
                    std::thread::yield_now();
                    continue;
                }
                None => match self.wait(deadline)? {
                    Waited::Element(i, e) => (i, e, true),
                    Waited::Control(c) => {
                        let event = self.on_control(c);
                        return self.captured_or(event);
                    }
                    Waited::Timeout => {
                        if self.timer_expired(Instant::now()) {
                            return self.captured_or(GateEvent::Timeout);
                        }
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(GateEvent::Timeout);
                        }
                        continue;
                    }
                },
            };
            self.next = (i + 1) % n.max(1);
            if from_channel {
                if let Some(Some(credit)) = self.credits.get(i) {
                    credit.taken(self.channels[i].len());
                }
            }
            let event = self.on_element(i, element);
            if self.capture.is_some() {
                // The element was an unaligned barrier: nothing else came of it.
                return self.captured_or(GateEvent::Timeout);
            }
            if let Some(event) = event {
                return Ok(event);
            }
        }
    }

    /// Like [`next`](Self::next), but reads no input channel: only control messages (and what
    /// they start — an unaligned checkpoint's capture reads the channels into replay queues,
    /// handing nothing on), until `deadline`; then [`GateEvent::Timeout`].
    pub fn next_control(&mut self, deadline: Instant) -> Result<GateEvent<T>, TaskError> {
        if let Some(event) = self.pending.take() {
            return Ok(event);
        }
        let wake = self.timer_wake().map_or(deadline, |t| t.min(deadline));
        let control = match self.deferred.pop_front() {
            Some(c) => c,
            None => match self.control.recv_deadline(wake) {
                Ok(c) => c,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    self.timer_expired(Instant::now());
                    return self.captured_or(GateEvent::Timeout);
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Ok(GateEvent::Control(TaskControl::Cancel))
                }
            },
        };
        let event = self.on_control(control);
        self.captured_or(event)
    }

    /// `event`, unless the last element or control message started an unaligned checkpoint:
    /// then the checkpoint, once its channel state is captured.
    fn captured_or(&mut self, event: GateEvent<T>) -> Result<GateEvent<T>, TaskError> {
        match self.capture.take() {
            Some((barrier, arrived_on)) => self.capture(barrier, arrived_on),
            None => Ok(event),
        }
    }

    /// Takes unaligned checkpoint `barrier` (which arrived on channel `arrived_on`, or ahead of
    /// the data as a priority barrier): reads every live channel up to the barrier's place in
    /// it, without handing anything on, into its replay queue. What the replay queues then
    /// hold is the channel state. Stops early, handing the message on, if the checkpoint is
    /// aborted or the task told to stop.
    fn capture(
        &mut self,
        barrier: Barrier,
        arrived_on: Option<usize>,
    ) -> Result<GateEvent<T>, TaskError> {
        // A barrier aligned with a timeout may have reached some channels already: they hold
        // nothing ahead of it.
        let aligning = self
            .alignment
            .as_ref()
            .filter(|a| a.barrier.id == barrier.id);
        let first_arrival = aligning.map_or_else(Instant::now, |a| a.first_arrival);
        let start_delay_ms = aligning.map_or_else(
            || now_ms().saturating_sub(barrier.timestamp_ms),
            |a| a.start_delay_ms,
        );
        let processed_records = aligning.map_or(0, |a| a.processed_records);
        let mut waiting: Vec<bool> = (0..self.channels.len())
            .map(|i| {
                !self.ended[i] && Some(i) != arrived_on && !(aligning.is_some() && self.seen[i])
            })
            .collect();
        while waiting.iter().any(|w| *w) {
            let mut select = Select::new();
            let control_index = select.recv(&self.control);
            let mut map = Vec::new();
            for (i, channel) in self.channels.iter().enumerate() {
                if waiting[i] {
                    map.push((select.recv(channel), i));
                }
            }
            let op = select.select();
            if op.index() == control_index {
                let control = match op.recv(&self.control) {
                    Ok(c) => c,
                    Err(_) => return Ok(GateEvent::Control(TaskControl::Cancel)),
                };
                match control {
                    TaskControl::NotifyAborted(id) if id == barrier.id => {
                        tracing::debug!(checkpoint = %id, "unaligned checkpoint aborted while its channel state was captured");
                        return Ok(self.on_control(control));
                    }
                    TaskControl::Cancel | TaskControl::Shutdown => {
                        return Ok(GateEvent::Control(control))
                    }
                    TaskControl::PriorityBarrier(b) if b.id == barrier.id => {}
                    other => self.deferred.push_back(other),
                }
                continue;
            }
            let i = map
                .iter()
                .find(|(s, _)| *s == op.index())
                .map(|(_, i)| *i)
                .expect("selected operation belongs to a registered channel");
            let element = op
                .recv(&self.channels[i])
                .map_err(|_| TaskError::ChannelClosed)?;
            if let Some(Some(credit)) = self.credits.get(i) {
                credit.taken(self.channels[i].len());
            }
            match element {
                Element::Barrier(b) if b.id == barrier.id => waiting[i] = false,
                Element::Barrier(b) if b.id > barrier.id => {
                    waiting[i] = false;
                    self.replay[i].push_back(Element::Barrier(b));
                    self.replayed(i, 1);
                }
                Element::EndOfInput => {
                    waiting[i] = false;
                    self.replay[i].push_back(Element::EndOfInput);
                    self.replayed(i, 1);
                }
                other => {
                    self.replay[i].push_back(other);
                    self.replayed(i, 1);
                }
            }
        }
        let codec = self
            .codec
            .expect("unaligned checkpoints are captured only with a codec");
        let channels = codec
            .encode(&self.replay)
            .map_err(|e| TaskError::user(format!("checkpoint {}: {e}", barrier.id)))?;
        self.advance_last_checkpoint(barrier.id);
        self.reset_alignment();
        // Downstream, the barrier overtakes the data at once.
        let barrier = Barrier {
            alignment: BarrierAlignment::Unaligned,
            ..barrier
        };
        Ok(GateEvent::Unaligned {
            barrier,
            stats: AlignmentStats {
                alignment_ms: first_arrival.elapsed().as_millis() as u64,
                start_delay_ms,
                processed_records,
            },
            channels,
        })
    }

    /// Whether a barrier of checkpoint `barrier` starts an unaligned capture here: it is an
    /// unaligned one (or aligned with a timeout that has passed), this gate takes them, no
    /// other checkpoint (a savepoint) is being aligned, and the gate is not done with it.
    fn starts_capture(&self, barrier: &Barrier) -> bool {
        let overtakes = match barrier.alignment {
            BarrierAlignment::Aligned => false,
            BarrierAlignment::Unaligned => true,
            BarrierAlignment::AlignedWithTimeout { timeout_ms } => {
                now_ms() >= barrier.timestamp_ms.saturating_add(timeout_ms)
            }
        };
        overtakes
            && self.takes_unaligned(barrier)
            && self
                .alignment
                .as_ref()
                .is_none_or(|a| a.barrier.id == barrier.id)
    }

    /// Whether this gate may take checkpoint `barrier` unaligned: it stores channel state,
    /// the mode is exactly-once, and it is not done with the checkpoint.
    fn takes_unaligned(&self, barrier: &Barrier) -> bool {
        self.codec.is_some()
            && self.mode == CheckpointingMode::ExactlyOnce
            && barrier.id > self.last_checkpoint
            && !self.aborted.contains(&barrier.id)
    }

    /// Arms the timer of `barrier` if it is aligned with a timeout that this gate may yet
    /// switch to unaligned.
    fn arm_timer(&mut self, barrier: &Barrier) {
        let BarrierAlignment::AlignedWithTimeout { timeout_ms } = barrier.alignment else {
            return;
        };
        if !self.takes_unaligned(barrier) || self.timer.is_some_and(|(b, _)| b.id >= barrier.id) {
            return;
        }
        let due_ms = barrier.timestamp_ms.saturating_add(timeout_ms);
        let at = Instant::now() + Duration::from_millis(due_ms.saturating_sub(now_ms()));
        self.timer = Some((*barrier, at));
    }

    /// When the armed timer goes off, if it can start a capture then.
    fn timer_wake(&self) -> Option<Instant> {
        let (barrier, at) = self.timer?;
        let blocked = self
            .alignment
            .as_ref()
            .is_some_and(|a| a.barrier.id != barrier.id);
        (self.takes_unaligned(&barrier) && !blocked).then_some(at)
    }

    /// Whether the armed timer has gone off by `now` for a checkpoint the gate may still take
    /// unaligned; if so, the capture starts before the call returns. A timer of a checkpoint
    /// the gate is done with is dropped.
    fn timer_expired(&mut self, now: Instant) -> bool {
        let Some((barrier, at)) = self.timer else {
            return false;
        };
        if !self.takes_unaligned(&barrier) {
            self.timer = None;
            return false;
        }
        if now < at || self.capture.is_some() {
            return false;
        }
        if self
            .alignment
            .as_ref()
            .is_some_and(|a| a.barrier.id != barrier.id)
        {
            // Another checkpoint (a savepoint) is being aligned: this one waits behind it.
            return false;
        }
        self.timer = None;
        tracing::debug!(checkpoint = %barrier.id, "alignment timed out: the checkpoint goes on unaligned");
        self.capture = Some((barrier, None));
        true
    }

    fn wait(&self, deadline: Option<Instant>) -> Result<Waited<T>, TaskError> {
        let mut select = Select::new();
        let control_index = select.recv(&self.control);
        let mut map = Vec::with_capacity(self.channels.len());
        for (i, channel) in self.channels.iter().enumerate() {
            if self.readable(i) {
                map.push((select.recv(channel), i));
            }
        }
        let wake = match (deadline, self.timer_wake()) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        let op = match wake {
            Some(d) => match select.select_deadline(d) {
                Ok(op) => op,
                Err(_) => return Ok(Waited::Timeout),
            },
            None => select.select(),
        };
        let index = op.index();
        if index == control_index {
            return Ok(match op.recv(&self.control) {
                Ok(c) => Waited::Control(c),
                Err(_) => Waited::Control(TaskControl::Cancel),
            });
        }
        let channel = map
            .iter()
            .find(|(s, _)| *s == index)
            .map(|(_, i)| *i)
            .expect("selected operation belongs to a registered channel");
        match op.recv(&self.channels[channel]) {
            Ok(e) => Ok(Waited::Element(channel, e)),
            Err(_) => Err(TaskError::ChannelClosed),
        }
    }

    fn on_control(&mut self, control: TaskControl) -> GateEvent<T> {
        if let TaskControl::PriorityBarrier(barrier) = &control {
            if self.starts_capture(barrier) {
                self.capture = Some((*barrier, None));
            } else {
                self.arm_timer(barrier);
            }
        }
        if let TaskControl::NotifyAborted(id) = control {
            // An aborted checkpoint will never complete its alignment: stop blocking for it.
            if self.alignment.as_ref().is_some_and(|a| a.barrier.id == id) {
                tracing::debug!(checkpoint = %id, "alignment abandoned: checkpoint aborted");
                self.reset_alignment();
            }
            // Only `id` itself is given up: raising `last_checkpoint` to it would drop the
            // barriers of older checkpoints still in flight, which then hang until expiry.
            if id > self.last_checkpoint {
                self.aborted.insert(id);
                while self.aborted.len() > MAX_ABORTED_REMEMBERED {
                    self.aborted.pop_first();
                }
            }
        }
        GateEvent::Control(control)
    }

    fn on_element(&mut self, i: usize, element: Element<T>) -> Option<GateEvent<T>> {
        match element {
            Element::Records(batch) => {
                if let Some(a) = &mut self.alignment {
                    a.processed_records += batch.len() as u64;
                }
                Some(GateEvent::Records(batch))
            }
            Element::Watermark(w) => {
                let out = self.valve.on_watermark(i, w);
                self.valve_event(out)
            }
            Element::WatermarkStatus(status) => {
                let out = self.valve.on_status(i, status);
                self.valve_event(out)
            }
            Element::Barrier(barrier) => self.on_barrier(i, barrier),
            Element::EndOfInput => {
                if !self.ended[i] {
                    self.ended[i] = true;
                    self.live -= 1;
                }
                let out = self.valve.on_end(i);
                if self.alignment.is_some() {
                    if let Some(aligned) = self.check_aligned() {
                        // The watermark the ended channel released follows the snapshot.
                        self.pending = self.valve_event(out);
                        return Some(aligned);
                    }
                }
                self.valve_event(out)
            }
        }
    }

    /// Turns a valve output into at most one event now, keeping a second one for the next call.
    fn valve_event(&mut self, out: ValveOutput) -> Option<GateEvent<T>> {
        match (out.status, out.watermark) {
            (None, None) => None,
            (None, Some(w)) => Some(GateEvent::Watermark(w)),
            (Some(s), None) => Some(GateEvent::WatermarkStatus(s)),
            (Some(WatermarkStatus::Active), Some(w)) => {
                self.pending = Some(GateEvent::Watermark(w));
                Some(GateEvent::WatermarkStatus(WatermarkStatus::Active))
            }
            (Some(WatermarkStatus::Idle), Some(w)) => {
                self.pending = Some(GateEvent::WatermarkStatus(WatermarkStatus::Idle));
                Some(GateEvent::Watermark(w))
            }
        }
    }

    fn on_barrier(&mut self, i: usize, barrier: Barrier) -> Option<GateEvent<T>> {
        if barrier.id <= self.last_checkpoint || self.aborted.contains(&barrier.id) {
            return None; // a late barrier of a checkpoint this gate is done with
        }
        if self.starts_capture(&barrier) {
            self.capture = Some((barrier, Some(i)));
            return None;
        }
        match &self.alignment {
            Some(a) if barrier.id < a.barrier.id => return None,
            Some(a) if barrier.id > a.barrier.id => {
                // A newer checkpoint overtook the one being aligned, which therefore cannot
                // complete here; the coordinator expires or subsumes it.
                tracing::debug!(old = %a.barrier.id, new = %barrier.id, "alignment superseded");
                let old = a.barrier.id;
                self.advance_last_checkpoint(old);
                self.reset_alignment();
            }
            _ => {}
        }
        if self.alignment.is_none() {
            self.alignment = Some(Alignment {
                barrier,
                first_arrival: Instant::now(),
                start_delay_ms: now_ms().saturating_sub(barrier.timestamp_ms),
                processed_records: 0,
            });
        }
        self.arm_timer(&barrier);
        self.seen[i] = true;
        self.check_aligned()
    }

    fn check_aligned(&mut self) -> Option<GateEvent<T>> {
        let complete = self.seen.iter().zip(&self.ended).all(|(s, e)| *s || *e);
        if !complete {
            return None;
        }
        let a = self.alignment.take()?;
        if self.timer.is_some_and(|(b, _)| b.id <= a.barrier.id) {
            self.timer = None;
        }
        self.advance_last_checkpoint(a.barrier.id);
        self.reset_alignment();
        Some(GateEvent::Aligned {
            barrier: a.barrier,
            stats: AlignmentStats {
                alignment_ms: a.first_arrival.elapsed().as_millis() as u64,
                start_delay_ms: a.start_delay_ms,
                processed_records: a.processed_records,
            },
        })
    }

    fn advance_last_checkpoint(&mut self, id: CheckpointId) {
        self.last_checkpoint = self.last_checkpoint.max(id);
        let last = self.last_checkpoint;
        self.aborted.retain(|a| *a > last);
    }

    fn reset_alignment(&mut self) {
        self.alignment = None;
        self.seen.iter_mut().for_each(|s| *s = false);
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

enum Waited<T> {
    Element(usize, Element<T>),
    Control(TaskControl),
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, unbounded};
    use weir_core::CheckpointKind;

    fn barrier(id: u64) -> Element<u32> {
        Element::Barrier(Barrier {
            id: CheckpointId(id),
            timestamp_ms: 0,
            kind: CheckpointKind::Checkpoint,
            alignment: BarrierAlignment::Aligned,
        })
    }

    /// Drains the gate until it reports an alignment, returning the records seen before it.
    fn records_until_aligned(gate: &mut InputGate<u32>) -> Vec<u32> {
        let mut seen = Vec::new();
        loop {
            match gate.next(None).unwrap() {
                GateEvent::Records(b) => seen.extend(b),
                GateEvent::Aligned { .. } => return seen,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn records_behind_a_barrier_on_a_blocked_channel_wait_for_the_snapshot() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(Element::Records(vec![1])).unwrap();
        tx0.send(barrier(1)).unwrap();
        tx0.send(Element::Records(vec![2])).unwrap(); // after the barrier: belongs to the next epoch
        tx1.send(Element::Records(vec![10])).unwrap();
        tx1.send(Element::Records(vec![11])).unwrap();
        tx1.send(barrier(1)).unwrap();
        tx1.send(Element::Records(vec![12])).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let mut before = records_until_aligned(&mut gate);
        before.sort();
        assert_eq!(before, vec![1, 10, 11]);
        let mut after = Vec::new();
        while after.len() < 2 {
            if let GateEvent::Records(b) = gate.next(None).unwrap() {
                after.extend(b);
            }
        }
        after.sort();
        assert_eq!(after, vec![2, 12]);
    }

    #[test]
    fn at_least_once_does_not_block_but_snapshots_on_the_last_barrier() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(barrier(1)).unwrap();
        tx0.send(Element::Records(vec![2])).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::AtLeastOnce);
        // Channel 0's post-barrier record is processed before channel 1's barrier arrives.
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Records(b) if b == vec![2]));
        tx1.send(barrier(1)).unwrap();
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::Aligned { .. }
        ));
    }

    #[test]
    fn an_ended_channel_does_not_hold_back_alignment() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx1.send(Element::EndOfInput).unwrap();
        tx0.send(barrier(3)).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let event = gate.next(None).unwrap();
        assert!(
            matches!(event, GateEvent::Aligned { barrier, .. } if barrier.id == CheckpointId(3)),
            "{event:?}"
        );
        tx0.send(Element::EndOfInput).unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::EndOfInput));
    }

    #[test]
    fn an_aborted_checkpoint_unblocks_its_channels_and_its_late_barriers_are_ignored() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        tx0.send(barrier(5)).unwrap();
        tx0.send(Element::Records(vec![7])).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let deadline = Some(Instant::now());
        assert!(matches!(gate.next(deadline).unwrap(), GateEvent::Timeout));
        ctl.send(TaskControl::NotifyAborted(CheckpointId(5)))
            .unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Control(_)));
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Records(b) if b == vec![7]));
        tx1.send(barrier(5)).unwrap();
        tx1.send(Element::Records(vec![8])).unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Records(b) if b == vec![8]));
    }

    #[test]
    fn an_aborted_newer_checkpoint_does_not_drop_an_older_barrier_still_in_flight() {
        // A savepoint (4) aligns beside a periodic checkpoint (5) that is aborted before its
        // barrier got here: 4 must still align, and 5's late barriers must be ignored.
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        tx0.send(barrier(4)).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let deadline = Some(Instant::now());
        assert!(matches!(gate.next(deadline).unwrap(), GateEvent::Timeout));
        ctl.send(TaskControl::NotifyAborted(CheckpointId(5)))
            .unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Control(_)));
        tx1.send(barrier(4)).unwrap();
        let event = gate.next(Some(Instant::now())).unwrap();
        assert!(
            matches!(event, GateEvent::Aligned { barrier, .. } if barrier.id == CheckpointId(4)),
            "{event:?}"
        );
        tx0.send(barrier(5)).unwrap();
        tx0.send(Element::Records(vec![9])).unwrap();
        tx1.send(barrier(5)).unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Records(b) if b == vec![9]));
        let event = gate.next(Some(Instant::now())).unwrap();
        assert!(matches!(event, GateEvent::Timeout), "{event:?}");
    }

    #[test]
    fn a_newer_barrier_supersedes_an_unfinished_alignment() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(barrier(1)).unwrap();
        tx1.send(barrier(2)).unwrap();
        tx0.send(barrier(2)).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let event = gate.next(None).unwrap();
        assert!(
            matches!(event, GateEvent::Aligned { barrier, .. } if barrier.id == CheckpointId(2)),
            "{event:?}"
        );
    }

    #[test]
    fn a_watermark_behind_a_barrier_on_a_blocked_channel_waits_for_the_snapshot() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(Element::Watermark(5)).unwrap();
        tx1.send(Element::Watermark(5)).unwrap();
        tx0.send(barrier(1)).unwrap();
        tx0.send(Element::Watermark(50)).unwrap(); // after the barrier on channel 0
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(5)));
        tx1.send(Element::Watermark(60)).unwrap();
        let deadline = Some(Instant::now());
        // Channel 0 is blocked at its barrier: its watermark 50 is not read, so channel 1's
        // 60 cannot move the subtask's watermark.
        assert!(matches!(gate.next(deadline).unwrap(), GateEvent::Timeout));
        assert_eq!(gate.valve.watermark(), 5);
        tx1.send(barrier(1)).unwrap();
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::Aligned { .. }
        ));
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(50)));
    }

    #[test]
    fn an_idle_input_lets_the_watermark_follow_the_others_and_all_idle_makes_the_subtask_idle() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        let mut gate: InputGate<u32> =
            InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        tx0.send(Element::Watermark(10)).unwrap();
        tx1.send(Element::WatermarkStatus(WatermarkStatus::Idle))
            .unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(10)));
        tx0.send(Element::Watermark(20)).unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(20)));
        tx0.send(Element::WatermarkStatus(WatermarkStatus::Idle))
            .unwrap();
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::WatermarkStatus(WatermarkStatus::Idle)
        ));
        tx1.send(Element::WatermarkStatus(WatermarkStatus::Active))
            .unwrap();
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::WatermarkStatus(WatermarkStatus::Active)
        ));
    }

    #[test]
    fn watermarks_advance_with_the_slowest_input() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(Element::Watermark(10)).unwrap();
        tx1.send(Element::Watermark(5)).unwrap();
        let mut gate: InputGate<u32> =
            InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(5)));
        tx1.send(Element::Watermark(20)).unwrap();
        assert!(matches!(gate.next(None).unwrap(), GateEvent::Watermark(10)));
    }

    fn unaligned(id: u64) -> Barrier {
        Barrier {
            id: CheckpointId(id),
            timestamp_ms: 0,
            kind: CheckpointKind::Checkpoint,
            alignment: BarrierAlignment::Unaligned,
        }
    }

    /// A barrier of checkpoint `id` triggered now, aligned until `timeout_ms` have passed.
    fn with_timeout(id: u64, timeout_ms: u64) -> Barrier {
        Barrier {
            id: CheckpointId(id),
            timestamp_ms: now_ms(),
            kind: CheckpointKind::Checkpoint,
            alignment: BarrierAlignment::AlignedWithTimeout { timeout_ms },
        }
    }

    #[test]
    fn a_barrier_aligned_with_a_timeout_aligns_as_usual_while_the_timeout_has_not_passed() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        let b = with_timeout(1, 3_600_000);
        tx0.send(Element::Records(vec![1])).unwrap();
        tx0.send(Element::Barrier(b)).unwrap();
        tx0.send(Element::Records(vec![2])).unwrap();
        tx1.send(Element::Records(vec![10])).unwrap();
        tx1.send(Element::Barrier(b)).unwrap();
        ctl.send(TaskControl::PriorityBarrier(b)).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(ChannelStateCodec::new(), None)
            .unwrap();
        // The announcement is handed on and starts nothing.
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::Control(TaskControl::PriorityBarrier(_))
        ));
        let mut seen = Vec::new();
        let (barrier, processed) = loop {
            match gate.next(None).unwrap() {
                GateEvent::Records(r) => seen.extend(r),
                GateEvent::Aligned { barrier, stats } => break (barrier, stats.processed_records),
                other => panic!("unexpected {other:?}"),
            }
        };
        seen.sort();
        assert_eq!(seen, [1, 10]);
        // Record 10 was handed on after channel 0's barrier only if read after it.
        assert!(processed <= 1, "{processed}");
        assert_eq!(barrier, b);
        assert_eq!(next_records(&mut gate, 1), [2]);
    }

    #[test]
    fn an_alignment_counts_the_records_it_hands_on_from_the_channels_still_ahead_of_the_barrier() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(barrier(1)).unwrap();
        tx0.send(Element::Records(vec![1, 2, 3])).unwrap(); // blocked: not counted
        tx1.send(Element::Records(vec![10, 11])).unwrap();
        tx1.send(Element::Records(vec![12])).unwrap();
        tx1.send(barrier(1)).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce);
        let processed = loop {
            match gate.next(None).unwrap() {
                GateEvent::Records(_) => {}
                GateEvent::Aligned { stats, .. } => break stats.processed_records,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(processed, 3);
    }

    #[test]
    fn a_barrier_whose_timeout_passed_before_it_arrived_overtakes_the_data_at_once() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        let late = Barrier {
            timestamp_ms: now_ms() - 1_000,
            ..with_timeout(1, 100)
        };
        tx0.send(Element::Records(vec![1])).unwrap();
        tx0.send(Element::Barrier(late)).unwrap();
        tx1.send(Element::Records(vec![10])).unwrap();
        tx1.send(Element::Barrier(late)).unwrap();
        ctl.send(TaskControl::PriorityBarrier(late)).unwrap();
        let codec = ChannelStateCodec::<u32>::new();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(codec, None)
            .unwrap();
        let GateEvent::Unaligned {
            barrier, channels, ..
        } = gate.next(None).unwrap()
        else {
            panic!("a timed-out announcement did not start an unaligned checkpoint");
        };
        // Forwarded as unaligned: downstream it overtakes at once.
        assert_eq!(barrier.alignment, BarrierAlignment::Unaligned);
        let state = codec.decode(&channels).unwrap();
        assert_eq!(records_of(&state[0]), [1]);
        assert_eq!(records_of(&state[1]), [10]);
    }

    #[test]
    fn an_alignment_that_outlasts_its_timeout_turns_unaligned_capturing_only_the_channels_still_ahead_of_the_barrier(
    ) {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        let b = with_timeout(1, 50);
        tx0.send(Element::Records(vec![1])).unwrap();
        tx0.send(Element::Barrier(b)).unwrap();
        tx0.send(Element::Records(vec![2])).unwrap(); // behind the barrier: not channel state
        tx1.send(Element::Records(vec![10])).unwrap();
        let codec = ChannelStateCodec::<u32>::new();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(codec, None)
            .unwrap();
        let mut seen = next_records(&mut gate, 2);
        seen.sort();
        assert_eq!(seen, [1, 10]);
        // Channel 1's barrier comes late, well after the timeout, behind another record.
        let late = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            tx1.send(Element::Records(vec![11])).unwrap();
            tx1.send(Element::Barrier(b)).unwrap();
            tx1.send(Element::Records(vec![12])).unwrap();
        });
        let started = Instant::now();
        let event = gate.next(None).unwrap();
        late.join().unwrap();
        let GateEvent::Unaligned {
            barrier,
            channels,
            stats,
        } = event
        else {
            panic!("expected the alignment to turn unaligned, got {event:?}");
        };
        // Record 10 came while aligning only if channel 0's barrier was read before it.
        assert!(stats.processed_records <= 1, "{stats:?}");
        assert!(started.elapsed() >= std::time::Duration::from_millis(250));
        assert_eq!(barrier.id, CheckpointId(1));
        let state = codec.decode(&channels).unwrap();
        assert!(state[0].is_empty(), "channel 0 had delivered its barrier");
        assert_eq!(records_of(&state[1]), [11]);
        let mut after = next_records(&mut gate, 3);
        assert_eq!(after[0], 11, "the channel state comes first");
        after.sort();
        assert_eq!(after, [2, 11, 12]);
    }

    /// The records of `elements`, in order.
    fn records_of(elements: &[Element<u32>]) -> Vec<u32> {
        elements
            .iter()
            .flat_map(|e| match e {
                Element::Records(b) => b.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// Every record the gate hands on until it has handed `n`.
    fn next_records(gate: &mut InputGate<u32>, n: usize) -> Vec<u32> {
        let mut seen = Vec::new();
        while seen.len() < n {
            match gate.next(None).unwrap() {
                GateEvent::Records(b) => seen.extend(b),
                GateEvent::Control(_) | GateEvent::Watermark(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        seen
    }

    #[test]
    fn an_unaligned_barrier_overtakes_the_queued_records_which_become_channel_state_and_come_next()
    {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        for r in [1, 2, 3] {
            tx0.send(Element::Records(vec![r])).unwrap();
        }
        tx0.send(Element::Barrier(unaligned(1))).unwrap();
        tx0.send(Element::Records(vec![4])).unwrap(); // after the barrier
        tx1.send(Element::Records(vec![10])).unwrap();
        tx1.send(Element::Watermark(7)).unwrap();
        tx1.send(Element::Barrier(unaligned(1))).unwrap();
        tx1.send(Element::Records(vec![11])).unwrap();
        ctl.send(TaskControl::PriorityBarrier(unaligned(1)))
            .unwrap();
        let codec = ChannelStateCodec::<u32>::new();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(codec, None)
            .unwrap();
        // Nothing queued is handed on before the snapshot.
        let GateEvent::Unaligned {
            barrier, channels, ..
        } = gate.next(None).unwrap()
        else {
            panic!("the priority barrier did not start an unaligned checkpoint");
        };
        assert_eq!(barrier.id, CheckpointId(1));
        let state = codec.decode(&channels).unwrap();
        assert_eq!(records_of(&state[0]), [1, 2, 3]);
        assert_eq!(records_of(&state[1]), [10]);
        assert!(matches!(state[1][1], Element::Watermark(7)));
        // Then the channel state, each channel's in order, then what followed the barrier.
        let mut got = next_records(&mut gate, 6);
        let first: Vec<u32> = got.drain(..4).collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, [1, 2, 3, 10]);
        assert!(first
            .windows(2)
            .all(|w| w[0] > 3 || w[1] > 3 || w[0] < w[1]));
        got.sort();
        assert_eq!(got, [4, 11]);
    }

    #[test]
    fn restored_channel_state_comes_before_anything_new_on_its_channel() {
        let codec = ChannelStateCodec::<u32>::new();
        let taken = codec
            .encode(&[
                VecDeque::from([Element::Records(vec![1, 2])]),
                VecDeque::new(),
            ])
            .unwrap();
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (_ctl, control) = unbounded();
        tx0.send(Element::Records(vec![3])).unwrap();
        tx1.send(Element::Records(vec![10])).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(codec, Some(&taken))
            .unwrap();
        let got = next_records(&mut gate, 4);
        let channel0: Vec<u32> = got.iter().copied().filter(|r| *r < 10).collect();
        assert_eq!(channel0, [1, 2, 3]);

        let (_tx, rx) = bounded::<Element<u32>>(1);
        let (_ctl, control) = unbounded();
        let Err(err) = InputGate::new(vec![rx], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(codec, Some(&taken))
        else {
            panic!("channel state of two channels went into a gate of one");
        };
        assert!(err.contains("same parallelism"), "{err}");
    }

    #[test]
    fn an_unaligned_checkpoint_aborted_while_captured_hands_its_records_on_and_ignores_its_barriers(
    ) {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (ctl, control) = unbounded();
        tx0.send(Element::Records(vec![1])).unwrap();
        tx0.send(Element::Barrier(unaligned(1))).unwrap();
        tx1.send(Element::Records(vec![10])).unwrap();
        let mut gate = InputGate::new(vec![rx0, rx1], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(ChannelStateCodec::new(), None)
            .unwrap();
        // Channel 1's barrier never comes: the checkpoint is aborted meanwhile.
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            ctl.send(TaskControl::NotifyAborted(CheckpointId(1)))
                .unwrap();
            ctl
        });
        let mut before = Vec::new();
        loop {
            match gate.next(None).unwrap() {
                GateEvent::Records(r) => before.extend(r),
                GateEvent::Control(TaskControl::NotifyAborted(CheckpointId(1))) => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        let _ctl = aborter.join().unwrap();
        tx1.send(Element::Records(vec![11])).unwrap();
        tx1.send(Element::Barrier(unaligned(1))).unwrap(); // late: ignored
        tx1.send(Element::Records(vec![12])).unwrap();
        before.extend(next_records(&mut gate, 4 - before.len()));
        before.sort();
        assert_eq!(before, [1, 10, 11, 12]);
    }

    #[test]
    fn what_a_capture_holds_back_counts_against_the_channels_capacity() {
        let (sink, rx, backlog) = crate::channel::direct::<u32>(4);
        let (ctl, control) = unbounded();
        for r in [1, 2, 3] {
            sink.send(Element::Records(vec![r])).unwrap();
        }
        sink.send(Element::Barrier(unaligned(1))).unwrap();
        ctl.send(TaskControl::PriorityBarrier(unaligned(1)))
            .unwrap();
        let mut gate = InputGate::new(vec![rx], control, CheckpointingMode::ExactlyOnce)
            .with_channel_state(ChannelStateCodec::new(), None)
            .unwrap()
            .with_backlogs(vec![Some(backlog.clone())]);
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::Unaligned { .. }
        ));
        // The channel is empty, but the three batches held back leave room for one.
        let held = backlog.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(held, 3);
        assert!(sink.has_room());
        sink.send(Element::Records(vec![4])).unwrap();
        assert!(
            !sink.has_room(),
            "three held back and one queued fill a channel of four"
        );
        assert_eq!(next_records(&mut gate, 1), [1]);
        assert!(sink.has_room());
        assert_eq!(next_records(&mut gate, 3), [2, 3, 4]);
        assert_eq!(backlog.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    /// A remote channel's flow control as its producer would see it: credits granted, and the
    /// last count of held-back elements.
    #[derive(Default)]
    struct RemoteCredits {
        taken: std::sync::atomic::AtomicUsize,
        held: std::sync::atomic::AtomicUsize,
    }

    impl crate::remote::ConsumerCredits for RemoteCredits {
        fn taken(&self, _still_queued: usize) {
            self.taken
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn held(&self, elements: usize) {
            self.held
                .store(elements, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn a_capture_returns_the_credits_of_what_it_takes_from_a_remote_channel_and_reports_it_held_until_handed_on(
    ) {
        let (tx, rx) = bounded(16);
        let (ctl, control) = unbounded();
        for r in [1, 2, 3] {
            tx.send(Element::Records(vec![r])).unwrap();
        }
        tx.send(Element::Barrier(unaligned(1))).unwrap();
        ctl.send(TaskControl::PriorityBarrier(unaligned(1)))
            .unwrap();
        let credits = std::sync::Arc::new(RemoteCredits::default());
        let mut gate = InputGate::new(vec![rx], control, CheckpointingMode::ExactlyOnce)
            .with_credit_returns(vec![Some(credits.clone() as crate::remote::CreditReturn)])
            .with_channel_state(ChannelStateCodec::new(), None)
            .unwrap();
        let count =
            |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(
            gate.next(None).unwrap(),
            GateEvent::Unaligned { .. }
        ));
        // Everything up to the barrier left the queue: a producer blocked on a send gets
        // through to its barrier. The three batches held back still count against its room.
        assert_eq!(count(&credits.taken), 4);
        assert_eq!(count(&credits.held), 3);
        assert_eq!(next_records(&mut gate, 1), [1]);
        assert_eq!(count(&credits.held), 2);
        assert_eq!(
            count(&credits.taken),
            4,
            "a replayed batch left the queue before"
        );
        tx.send(Element::Records(vec![4])).unwrap();
        assert_eq!(next_records(&mut gate, 3), [2, 3, 4]);
        assert_eq!(count(&credits.held), 0);
        assert_eq!(count(&credits.taken), 5);
    }

    /// A producer across the network: it waits for a credit before each send. Its consumer
    /// returns credits as late as the contract allows: only once it finds the queue empty.
    struct WaitingProducer {
        available: std::sync::Mutex<usize>,
        granted: std::sync::Condvar,
        owed: std::sync::atomic::AtomicUsize,
    }

    impl crate::remote::ConsumerCredits for WaitingProducer {
        fn taken(&self, still_queued: usize) {
            use std::sync::atomic::Ordering::Relaxed;
            let owed = self.owed.fetch_add(1, Relaxed) + 1;
            if still_queued == 0 {
                self.owed.fetch_sub(owed, Relaxed);
                *self.available.lock().unwrap() += owed;
                self.granted.notify_all();
            }
        }
        fn held(&self, _: usize) {}
    }

    #[test]
    fn a_producer_waiting_for_credit_gets_through_to_its_barrier_while_its_consumer_captures() {
        // A remote channel of two elements, whose producer has five batches to send before
        // its barrier (flushing ahead of it): from the third on it waits for credit, which
        // only the capture can give back.
        let (tx, rx) = bounded(2);
        let (ctl, control) = unbounded();
        let credits = std::sync::Arc::new(WaitingProducer {
            available: std::sync::Mutex::new(2),
            granted: std::sync::Condvar::new(),
            owed: Default::default(),
        });
        let producer = {
            let credits = credits.clone();
            std::thread::spawn(move || {
                let mut elements: Vec<Element<u32>> =
                    (1..=5).map(|r| Element::Records(vec![r])).collect();
                elements.push(Element::Barrier(unaligned(1)));
                for element in elements {
                    let mut available = credits.available.lock().unwrap();
                    while *available == 0 {
                        available = credits.granted.wait(available).unwrap();
                    }
                    *available -= 1;
                    drop(available);
                    tx.send(element).unwrap();
                }
                tx
            })
        };
        ctl.send(TaskControl::PriorityBarrier(unaligned(1)))
            .unwrap();
        let codec = ChannelStateCodec::<u32>::new();
        let mut gate = InputGate::new(vec![rx], control, CheckpointingMode::ExactlyOnce)
            .with_credit_returns(vec![Some(credits as crate::remote::CreditReturn)])
            .with_channel_state(codec, None)
            .unwrap();
        let (done, captured) = bounded(1);
        std::thread::spawn(move || {
            let event = gate.next(None);
            let _ = done.send(event.map(|e| match e {
                GateEvent::Unaligned { channels, .. } => Some(channels),
                _ => None,
            }));
            gate
        });
        let channels = captured
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the capture waited for a barrier its producer could not send")
            .unwrap()
            .expect("an unaligned checkpoint");
        assert_eq!(
            records_of(&codec.decode(&channels).unwrap()[0]),
            [1, 2, 3, 4, 5]
        );
        let _tx = producer.join().unwrap();
    }
}
