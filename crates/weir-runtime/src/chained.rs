//! An operator chained behind its producer (see [`crate::chain`]): what its producer's output
//! sends into, and what the head of its chain drives.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use weir_checkpoint::TaskStatus;
use weir_core::{Barrier, Element, SubtaskId};

use crate::chain::{poisoned, ChainLink, ChainMember};
use crate::channel::ChannelSink;
use crate::control::TaskControl;
use crate::error::TaskError;
use crate::gate::AlignmentStats;
use crate::operator::OneInputOperator;
use crate::output::Output;
use crate::task::{start_delay, TaskRuntime};

/// A one-input operator run by its producer's loop, with what an unchained subtask's loop
/// would hold for it.
struct ChainedOperator<I, O, Op> {
    op: Op,
    out: Output<O>,
    rt: TaskRuntime,
    /// Channel state restored for the operator's input, replayed when it opens.
    replay: Vec<Element<I>>,
}

/// Chains `op` behind its producer: the sink the producer's writer sends into, and the link
/// its head drives. `replay` is the channel state restored for its input channel.
pub(crate) fn chained<I, O, Op>(
    op: Op,
    out: Output<O>,
    rt: TaskRuntime,
    replay: Vec<Element<I>>,
) -> (Box<dyn ChannelSink<I>>, ChainLink)
where
    I: Send + 'static,
    O: Clone + Send + 'static,
    Op: OneInputOperator<I, O>,
{
    let operator = Arc::new(Mutex::new(ChainedOperator {
        op,
        out,
        rt,
        replay,
    }));
    let link = ChainLink::new(operator.clone());
    (Box::new(ChainedSink(operator)), link)
}

impl<I, O, Op> ChainedOperator<I, O, Op>
where
    I: Send + 'static,
    O: Clone + Send,
    Op: OneInputOperator<I, O>,
{
    /// What the operator's input channel would have delivered.
    fn element(&mut self, element: Element<I>) -> Result<(), TaskError> {
        match element {
            Element::Records(batch) => {
                self.rt.metrics.add_in(batch.len() as u64);
                let processed = self.op.process_batch(batch, &mut self.out);
                processed.map_err(|e| self.named(e))?;
                self.out.take_error()?;
                self.rt.after_batch()?;
            }
            Element::Watermark(w) => {
                let fired = self.op.watermark(w, &mut self.out);
                fired.map_err(|e| self.named(e))?;
                self.out.take_error()?;
                if self.op.forwards_watermarks() {
                    self.out.watermark(w)?;
                }
            }
            Element::WatermarkStatus(status) => self.out.emit_watermark_status(status)?,
            Element::Barrier(barrier) => {
                // Everything before the barrier was handed over: a single input is aligned as
                // soon as its barrier arrives.
                let stats = AlignmentStats {
                    start_delay_ms: start_delay(barrier),
                    ..AlignmentStats::default()
                };
                self.rt.snapshot(&mut self.op, barrier, None, stats);
                self.out.barrier(barrier)?;
            }
            Element::EndOfInput => {
                let finished = self.op.finish(&mut self.out);
                finished.map_err(|e| self.named(e))?;
                self.out.end_of_input()?;
                self.rt.metrics.set_out(self.out.records_out());
                self.rt.finished();
                return Ok(());
            }
        }
        self.rt.metrics.set_out(self.out.records_out());
        Ok(())
    }

    /// An error of the operator itself, named: it surfaces as its head's failure.
    fn named(&self, error: TaskError) -> TaskError {
        let what = format!(
            "'{}' subtask {} (chained behind its producer)",
            self.rt.uid, self.rt.subtask.index
        );
        match error {
            TaskError::ChannelClosed | TaskError::Injected => error,
            TaskError::BadInput(m) => TaskError::BadInput(format!("{what}: {m}")),
            other => TaskError::User(format!("{what}: {other}")),
        }
    }

    /// Hands on, ahead of the data, a barrier that overtakes it: to the subtasks this one
    /// sends to, as an unchained subtask forwards an unaligned barrier it was announced.
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        for downstream in &self.rt.downstream {
            let _ = downstream.send(TaskControl::PriorityBarrier(barrier));
        }
        self.out.announce(barrier)
    }
}

impl<I, O, Op> ChainMember for ChainedOperator<I, O, Op>
where
    I: Send + 'static,
    O: Clone + Send,
    Op: OneInputOperator<I, O>,
{
    fn subtask(&self) -> SubtaskId {
        self.rt.subtask
    }

    fn open(&mut self) -> Result<(), TaskError> {
        let restored = std::mem::take(&mut self.rt.restored);
        let opened = self.op.open(&self.rt.ctx, restored);
        opened.map_err(|e| self.named(e))?;
        // What its input channel held in an unaligned checkpoint taken while it was not
        // chained came before anything its producer emits after the restore.
        for element in std::mem::take(&mut self.replay) {
            self.element(element)?;
        }
        self.rt.report(TaskStatus::Running);
        Ok(())
    }

    fn control(&mut self, control: TaskControl) -> Result<(), TaskError> {
        let handled = match control {
            TaskControl::NotifyComplete(id) => self.op.notify_complete(id),
            TaskControl::NotifyAborted(id) => self.op.notify_aborted(id),
            _ => Ok(()),
        };
        handled.map_err(|e| self.named(e))
    }

    fn deadline(&self) -> Option<Instant> {
        let flush = self
            .out
            .buffered_since()
            .map(|t| t + self.rt.buffer_timeout);
        let timer = self.op.next_processing_timer().map(|d| Instant::now() + d);
        flush.into_iter().chain(timer).min()
    }

    fn on_time(&mut self, now: Instant) -> Result<(), TaskError> {
        if self.op.next_processing_timer().is_some_and(|d| d.is_zero()) {
            let fired = self.op.on_processing_time(&mut self.out);
            fired.map_err(|e| self.named(e))?;
            self.out.take_error()?;
        }
        let flush_due = self
            .out
            .buffered_since()
            .is_some_and(|t| now >= t + self.rt.buffer_timeout);
        // Not into a full channel while unaligned checkpoints are on: the head would stop
        // watching its control channel.
        if flush_due && (!self.rt.unaligned || self.out.has_room()) {
            self.out.flush()?;
        }
        self.rt.metrics.set_out(self.out.records_out());
        Ok(())
    }
}

/// The sink a chained operator's producer writes into.
struct ChainedSink<I, O, Op>(Arc<Mutex<ChainedOperator<I, O, Op>>>);

impl<I, O, Op> ChainedSink<I, O, Op> {
    fn lock(&self) -> Result<MutexGuard<'_, ChainedOperator<I, O, Op>>, TaskError> {
        self.0.lock().map_err(|_| poisoned())
    }
}

impl<I, O, Op> ChannelSink<I> for ChainedSink<I, O, Op>
where
    I: Send + 'static,
    O: Clone + Send + 'static,
    Op: OneInputOperator<I, O>,
{
    fn send(&self, element: Element<I>) -> Result<(), TaskError> {
        self.lock()?.element(element)
    }
    fn has_room(&self) -> bool {
        self.lock().map_or(true, |c| c.out.has_room())
    }
    fn announce(&self, barrier: Barrier) -> Result<(), TaskError> {
        self.lock()?.announce(barrier)
    }
    fn flush(&self) -> Result<(), TaskError> {
        self.lock()?.out.flush()
    }
}
