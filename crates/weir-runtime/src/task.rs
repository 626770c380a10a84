//! The task loop (mailbox) of a subtask. Records, barriers, checkpoint notifications and
//! control all run on this one thread, so operator state needs no locks and a snapshot never
//! happens in the middle of a batch.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_checkpoint::TaskStatus;
use weir_core::{Barrier, CheckpointId, CheckpointingMode, SubtaskId, WatermarkStatus};

use crate::chain::Chain;
use crate::control::Drain;
use crate::control::{CoordinatorMessage, JobEvent, TaskControl};
use crate::error::TaskError;
use crate::gate::{AlignmentStats, GateEvent, InputGate};
use crate::metrics::SubtaskMetrics;
use crate::operator::SourceEventTime;
use crate::operator::{
    OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState, SourceFunction,
    SourceStatus,
};
use crate::output::Output;
use crate::snapshot::SnapshotJob;
use crate::watermark::{NoWatermarks, SourceWatermarks};

/// Everything a subtask's loop needs besides its operator, gate and output.
pub struct TaskRuntime {
    pub subtask: SubtaskId,
    pub uid: Arc<str>,
    pub ctx: OperatorContext,
    pub control: Receiver<TaskControl>,
    pub coordinator: Sender<CoordinatorMessage>,
    pub events: Sender<JobEvent>,
    pub snapshots: Sender<SnapshotJob>,
    pub metrics: Arc<SubtaskMetrics>,
    pub batch_size: usize,
    pub channel_capacity: usize,
    pub buffer_timeout: Duration,
    pub mode: CheckpointingMode,
    /// Unaligned checkpoints are on: the loop then waits for room in its output channels
    /// outside a send, watching its control channel, so that a checkpoint's barrier reaches it
    /// while it is back-pressured.
    pub unaligned: bool,
    pub restored: RestoredState,
    /// Which attempt of the job this subtask belongs to.
    pub attempt: u32,
    pub injector: Option<crate::injection::FailureInjector>,
    pub first_record_reported: bool,
    /// Snapshots handed to the workers and not yet acknowledged.
    pub in_flight: usize,
    pub snapshot_done: (Sender<CheckpointId>, Receiver<CheckpointId>),
    /// The watermark alignment groups of this attempt.
    pub alignment: crate::alignment::AlignmentGroups,
    /// The control channels of the subtasks this one sends to (in this process), which an
    /// unaligned checkpoint's barrier reaches ahead of the data queued for them.
    pub downstream: Vec<Sender<TaskControl>>,
    /// The operators chained behind this subtask, which its loop drives (see [`crate::chain`]).
    pub chain: Chain,
}

impl TaskRuntime {
    /// Forwards `barrier` downstream: an unaligned one first ahead of the data queued in the
    /// channels (a priority barrier to every downstream subtask, in this process or another),
    /// then — for every barrier — after it, marking the end of each channel's part of the
    /// checkpoint.
    fn forward_barrier<T: Clone + Send>(
        &self,
        barrier: Barrier,
        out: &mut Output<T>,
    ) -> Result<(), TaskError> {
        if barrier.announced() {
            for downstream in &self.downstream {
                let _ = downstream.send(TaskControl::PriorityBarrier(barrier));
            }
            // Subtasks in other processes: a priority frame on each channel to them.
            out.announce(barrier)?;
        }
        out.barrier(barrier)
    }

    pub(crate) fn report(&self, status: TaskStatus) {
        let _ = self.coordinator.send(CoordinatorMessage::TaskStatus {
            attempt: self.attempt,
            subtask: self.subtask,
            status,
        });
    }

    /// Snapshots `op` for `barrier` — with `channels`, the channel state of an unaligned
    /// checkpoint — and hands the snapshot to the async workers.
    pub(crate) fn snapshot<I, O>(
        &mut self,
        op: &mut impl OneInputOperator<I, O>,
        barrier: Barrier,
        channels: Option<Vec<u8>>,
        stats: AlignmentStats,
    ) {
        let sync_start = Instant::now();
        let snapshot = op.snapshot(barrier.id).map(|mut s| {
            s.channels = channels;
            s
        });
        self.submit(barrier, snapshot, sync_start, stats);
    }

    /// Hands the synchronous snapshot to the async workers, or declines if it failed.
    fn submit(
        &mut self,
        barrier: Barrier,
        snapshot: Result<OperatorSnapshot, TaskError>,
        sync_start: Instant,
        stats: AlignmentStats,
    ) {
        let message = match snapshot {
            Ok(snapshot) => {
                let job = SnapshotJob {
                    attempt: self.attempt,
                    subtask: self.subtask,
                    uid: self.uid.clone(),
                    checkpoint: barrier.id,
                    kind: barrier.kind,
                    snapshot,
                    key_groups: self.ctx.key_groups,
                    sync_ms: sync_start.elapsed().as_millis() as u64,
                    alignment_ms: stats.alignment_ms,
                    start_delay_ms: stats.start_delay_ms,
                    processed_records: stats.processed_records,
                    started: sync_start,
                    done: self.snapshot_done.0.clone(),
                };
                if self.snapshots.send(job).is_ok() {
                    self.in_flight += 1;
                }
                return;
            }
            Err(e) => CoordinatorMessage::Decline {
                attempt: self.attempt,
                subtask: self.subtask,
                checkpoint: barrier.id,
                reason: format!(
                    "snapshot of '{}' subtask {} failed: {e}",
                    self.uid, self.subtask.index
                ),
            },
        };
        let _ = self.coordinator.send(message);
    }

    /// After every batch: the injected failure, if one is due, and the first-record report of
    /// a restarted attempt (recovery time is measured up to it).
    pub(crate) fn after_batch(&mut self) -> Result<(), TaskError> {
        self.metrics
            .set_backpressured(crate::channel::backpressured_ns());
        if let Some(injector) = self.injector.as_mut() {
            if injector.roll() {
                return Err(TaskError::Injected);
            }
        }
        if !self.first_record_reported {
            self.first_record_reported = true;
            if self.attempt > 0 {
                let _ = self.events.send(JobEvent::FirstRecordProcessed {
                    attempt: self.attempt,
                });
            }
        }
        Ok(())
    }

    /// After end of input: reports the subtask finished once its snapshots were acknowledged.
    pub(crate) fn finished(&mut self) {
        // Invariant: a subtask reports itself finished only after its snapshots were
        // acknowledged, so the coordinator never mistakes a final checkpoint for an abandoned one.
        while self.in_flight > 0 {
            match self.snapshot_done.1.recv() {
                Ok(_) => self.in_flight -= 1,
                Err(_) => break,
            }
        }
        let _ = self.events.send(JobEvent::TaskFinished(self.subtask));
        self.report(TaskStatus::Finished);
    }

    /// After end of input: keep serving checkpoint notifications (sinks commit on them), its
    /// own and its chain's, until the job shuts down.
    fn serve_until_shutdown(
        &mut self,
        mut on_complete: impl FnMut(weir_core::CheckpointId) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        self.finished();
        loop {
            match self.control.recv() {
                Ok(TaskControl::NotifyComplete(id)) => on_complete(id)?,
                Ok(TaskControl::Chained { subtask, control }) => {
                    self.chain.control(subtask, *control)?
                }
                Ok(TaskControl::Shutdown) | Ok(TaskControl::Cancel) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }

    /// Fires what the chained operators have due.
    fn drive_chain(&self, due: Option<Instant>) -> Result<(), TaskError> {
        if let Some(due) = due {
            let now = Instant::now();
            if now >= due {
                self.chain.on_time(now)?;
            }
        }
        Ok(())
    }
}

/// Runs a one-input operator until its input ends and the job shuts down.
pub fn run_one_input<I, O, Op>(
    mut op: Op,
    mut gate: InputGate<I>,
    mut out: Output<O>,
    mut rt: TaskRuntime,
) -> Result<(), TaskError>
where
    O: Clone + Send,
    Op: OneInputOperator<I, O>,
{
    op.open(&rt.ctx, std::mem::take(&mut rt.restored))?;
    rt.chain.open()?;
    rt.report(TaskStatus::Running);
    loop {
        let flush_at = out.buffered_since().map(|t| t + rt.buffer_timeout);
        // Processing-time timers fire here, on the task loop, never from another thread.
        let timer_at = op.next_processing_timer().map(|d| Instant::now() + d);
        let chain_at = rt.chain.deadline();
        let deadline = [flush_at, timer_at, chain_at].into_iter().flatten().min();
        let event = if rt.unaligned && !out.has_room() {
            // Back-pressured: read no input (it would have to be sent on) until there is
            // room, but take control messages, and with them unaligned barriers, at once.
            let start = Instant::now();
            let poll = start + ROOM_POLL;
            let event = gate.next_control(deadline.map_or(poll, |d| d.min(poll)))?;
            crate::channel::add_backpressure(start.elapsed().as_nanos() as u64);
            event
        } else {
            gate.next(deadline)?
        };
        match event {
            GateEvent::Records(batch) => {
                rt.metrics.add_in(batch.len() as u64);
                op.process_batch(batch, &mut out)?;
                out.take_error()?;
                rt.after_batch()?;
            }
            GateEvent::Watermark(w) => {
                op.watermark(w, &mut out)?;
                out.take_error()?;
                if op.forwards_watermarks() {
                    out.watermark(w)?;
                }
            }
            GateEvent::WatermarkStatus(status) => out.emit_watermark_status(status)?,
            GateEvent::Aligned { barrier, stats } => {
                rt.snapshot(&mut op, barrier, None, stats);
                out.barrier(barrier)?;
            }
            GateEvent::Unaligned {
                barrier,
                stats,
                channels,
            } => {
                rt.snapshot(&mut op, barrier, Some(channels), stats);
                rt.forward_barrier(barrier, &mut out)?;
            }
            GateEvent::Control(TaskControl::NotifyComplete(id)) => op.notify_complete(id)?,
            GateEvent::Control(TaskControl::NotifyAborted(id)) => op.notify_aborted(id)?,
            GateEvent::Control(TaskControl::Chained { subtask, control }) => {
                rt.chain.control(subtask, *control)?
            }
            GateEvent::Control(TaskControl::Cancel) | GateEvent::Control(TaskControl::Shutdown) => {
                return Ok(())
            }
            GateEvent::Control(_) => {}
            GateEvent::EndOfInput => {
                op.finish(&mut out)?;
                out.end_of_input()?;
                rt.metrics.set_out(out.records_out());
                return rt.serve_until_shutdown(|id| op.notify_complete(id));
            }
            GateEvent::Timeout => {
                if flush_at.is_some_and(|t| Instant::now() >= t) && out_may_flush(&rt, &out) {
                    out.flush()?;
                }
            }
        }
        if timer_at.is_some_and(|t| Instant::now() >= t) {
            op.on_processing_time(&mut out)?;
            out.take_error()?;
        }
        if out
            .buffered_since()
            .is_some_and(|t| t.elapsed() >= rt.buffer_timeout)
            && out_may_flush(&rt, &out)
        {
            out.flush()?;
        }
        rt.drive_chain(chain_at)?;
        rt.metrics.set_out(out.records_out());
    }
}

/// Whether a flush for the buffer timeout may go ahead: not into a full channel while
/// unaligned checkpoints are on (the loop would stop watching its control channel).
fn out_may_flush<O: Clone + Send>(rt: &TaskRuntime, out: &Output<O>) -> bool {
    !rt.unaligned || out.has_room()
}

/// How long a back-pressured loop waits for a control message before it looks for room in its
/// output channels again (unaligned checkpoints only).
const ROOM_POLL: Duration = Duration::from_millis(1);

/// What a source loop does after handling a control message.
enum Next {
    Continue,
    Finish,
    Exit,
}

/// Runs a source until it is told to finish (or cancelled).
pub fn run_source<T, S>(source: S, out: Output<T>, rt: TaskRuntime) -> Result<(), TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
{
    run_source_with_watermarks(source, NoWatermarks, out, rt)
}

/// Runs a source whose batches `watermarks` observes; see [`crate::watermark`].
pub fn run_source_with_watermarks<T, S, W>(
    mut source: S,
    mut watermarks: W,
    mut out: Output<T>,
    mut rt: TaskRuntime,
) -> Result<(), TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
    W: SourceWatermarks<T>,
{
    let positions = match rt.restored.operator.take() {
        Some(state) => {
            let union = state.union.into_iter().flat_map(|(_, e)| e).collect();
            source.restore_union(union)?;
            Some(state.list.into_iter().flat_map(|(_, e)| e).collect())
        }
        None => None,
    };
    source.open(&rt.ctx, positions)?;
    rt.chain.open()?;
    rt.report(TaskStatus::Running);
    let mut exhausted = false;
    let mut batch = Vec::with_capacity(rt.batch_size);
    loop {
        if !rt.chain.is_empty() {
            rt.drive_chain(rt.chain.deadline())?;
        }
        // Control between batches, never inside one.
        let control = if exhausted {
            // Waiting for the final checkpoint: the chain's timers and buffers still run.
            let chain_at = rt.chain.deadline();
            match chain_at.map_or_else(
                || {
                    rt.control
                        .recv()
                        .map_err(|_| RecvTimeoutError::Disconnected)
                },
                |at| rt.control.recv_deadline(at),
            ) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => {
                    rt.drive_chain(chain_at)?;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        } else {
            match rt.control.try_recv() {
                Ok(c) => Some(c),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        };
        if let Some(control) = control {
            match handle_source_control(control, &mut source, &mut watermarks, &mut out, &mut rt)? {
                Next::Continue => continue,
                Next::Exit => return Ok(()),
                Next::Finish => return finish_source(&mut source, &mut out, &mut rt),
            }
        }
        if !exhausted && watermarks.paused() {
            // Too far ahead of its watermark alignment group: wait for the others, serving
            // barriers and control messages meanwhile.
            out.flush()?;
            match wait_for_control(
                ALIGNMENT_PAUSE,
                &mut source,
                &mut watermarks,
                &mut out,
                &mut rt,
            )? {
                Next::Continue => continue,
                Next::Exit => return Ok(()),
                Next::Finish => return finish_source(&mut source, &mut out, &mut rt),
            }
        }
        if rt.unaligned && !exhausted && !out.has_room() {
            // Back-pressured: wait for room outside a send, watching for a trigger, so that an
            // unaligned checkpoint starts at once instead of after the send.
            let start = Instant::now();
            let next =
                wait_for_control(ROOM_POLL, &mut source, &mut watermarks, &mut out, &mut rt)?;
            crate::channel::add_backpressure(start.elapsed().as_nanos() as u64);
            match next {
                Next::Continue => continue,
                Next::Exit => return Ok(()),
                Next::Finish => return finish_source(&mut source, &mut out, &mut rt),
            }
        }
        match source.poll_batch(&mut batch, rt.batch_size)? {
            SourceStatus::Emitted => {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(rt.batch_size));
                if out.is_idle() {
                    out.emit_watermark_status(WatermarkStatus::Active)?;
                }
                watermarks.before_batch(&full, &mut out)?;
                out.emit_batch(full);
                out.take_error()?;
                watermarks.after_batch(&mut out)?;
                emit_event_time(&mut source, &mut out)?;
                rt.after_batch()?;
            }
            SourceStatus::Idle => {
                out.flush()?;
                watermarks.on_idle(&mut out)?;
                emit_event_time(&mut source, &mut out)?;
                match wait_for_control(IDLE_POLL, &mut source, &mut watermarks, &mut out, &mut rt)?
                {
                    Next::Continue => {}
                    Next::Exit => return Ok(()),
                    Next::Finish => return finish_source(&mut source, &mut out, &mut rt),
                }
            }
            SourceStatus::Exhausted => {
                let rest = std::mem::take(&mut batch);
                watermarks.before_batch(&rest, &mut out)?;
                out.emit_batch(rest);
                // Invariant: the final watermark follows every record of the source.
                watermarks.on_exhausted(&mut out)?;
                out.flush()?;
                exhausted = true;
                let _ = rt.events.send(JobEvent::SourceExhausted(rt.subtask));
            }
        }
        if out
            .buffered_since()
            .is_some_and(|t| t.elapsed() >= rt.buffer_timeout)
        {
            out.flush()?;
        }
        rt.metrics.set_out(out.records_out());
    }
}

/// Emits what a source's own per-split event time asks for.
#[inline]
fn emit_event_time<T, S>(source: &mut S, out: &mut Output<T>) -> Result<(), TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
{
    match source.event_time(Instant::now()) {
        SourceEventTime::Unchanged => Ok(()),
        SourceEventTime::Watermark(w) => {
            if out.is_idle() {
                out.emit_watermark_status(WatermarkStatus::Active)?;
            }
            out.emit_watermark(w)
        }
        SourceEventTime::Idle => out.emit_watermark_status(WatermarkStatus::Idle),
    }
}

/// How long an idle source waits for a control message before it polls again.
const IDLE_POLL: Duration = Duration::from_millis(5);
/// How long a source paused by watermark alignment waits before it checks again.
const ALIGNMENT_PAUSE: Duration = Duration::from_millis(1);

/// Waits up to `timeout` for a control message and handles it; `Continue` if none came.
fn wait_for_control<T, S, W>(
    timeout: Duration,
    source: &mut S,
    watermarks: &mut W,
    out: &mut Output<T>,
    rt: &mut TaskRuntime,
) -> Result<Next, TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
    W: SourceWatermarks<T>,
{
    match rt.control.recv_timeout(timeout) {
        Ok(c) => handle_source_control(c, source, watermarks, out, rt),
        Err(RecvTimeoutError::Timeout) => Ok(Next::Continue),
        Err(RecvTimeoutError::Disconnected) => Ok(Next::Exit),
    }
}

/// Ends a source's output (after a final barrier or a finish) and serves notifications until
/// shutdown.
fn finish_source<T, S>(
    source: &mut S,
    out: &mut Output<T>,
    rt: &mut TaskRuntime,
) -> Result<(), TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
{
    out.end_of_input()?;
    rt.metrics.set_out(out.records_out());
    rt.serve_until_shutdown(|id| source.notify_complete(id))
}

fn handle_source_control<T, S, W>(
    control: TaskControl,
    source: &mut S,
    watermarks: &mut W,
    out: &mut Output<T>,
    rt: &mut TaskRuntime,
) -> Result<Next, TaskError>
where
    T: Clone + Send,
    S: SourceFunction<T>,
    W: SourceWatermarks<T>,
{
    Ok(match control {
        TaskControl::Trigger { barrier, finish } => {
            if finish == Some(Drain::EndEventTime) {
                // Invariant: a drained stop's event time ends before its barrier, so what the
                // windows and timers emit on it is part of the final savepoint, not after it.
                watermarks.on_exhausted(out)?;
            }
            // The position is taken right after the barrier: everything before it was emitted.
            rt.forward_barrier(barrier, out)?;
            let sync_start = Instant::now();
            source.snapshot_started(barrier.id);
            let snapshot = source_snapshot(source);
            let stats = AlignmentStats {
                start_delay_ms: start_delay(barrier),
                ..AlignmentStats::default()
            };
            rt.submit(barrier, snapshot, sync_start, stats);
            if finish.is_some() {
                Next::Finish
            } else {
                Next::Continue
            }
        }
        TaskControl::Finish => Next::Finish,
        TaskControl::NotifyComplete(id) => {
            source.notify_complete(id)?;
            Next::Continue
        }
        TaskControl::Chained { subtask, control } => {
            rt.chain.control(subtask, *control)?;
            Next::Continue
        }
        // A source has no input channels for a barrier to overtake.
        TaskControl::NotifyAborted(_) | TaskControl::PriorityBarrier(_) => Next::Continue,
        TaskControl::Cancel | TaskControl::Shutdown => Next::Exit,
    })
}

/// A source's position (list state) and what the other subtasks must know of it (union
/// state), as its operator state.
fn source_snapshot<T, S: SourceFunction<T>>(source: &mut S) -> Result<OperatorSnapshot, TaskError> {
    let list = source.snapshot_position()?;
    let union = source.snapshot_union()?;
    Ok(OperatorSnapshot {
        keyed: Vec::new(),
        operator: Some(weir_state::OperatorStateSnapshot {
            list: vec![("position".to_string(), list)],
            union: if union.is_empty() {
                Vec::new()
            } else {
                vec![("position-union".to_string(), union)]
            },
        }),
        incremental: None,
        lsm: None,
        channels: None,
    })
}

pub(crate) fn start_delay(barrier: Barrier) -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
        .saturating_sub(barrier.timestamp_ms)
}
