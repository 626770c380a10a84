//! [`Output`]: where an operator emits records. It gathers them into batches and hands full
//! batches to the writers of every outgoing edge.

use std::time::Instant;
use weir_core::{Barrier, WatermarkStatus};

use crate::error::TaskError;
use crate::partition::EdgeWriter;

/// The collector an operator emits into.
///
/// `emit` never fails: a send error (a downstream subtask went away) is kept and surfaces from
/// the task loop after the current batch, so user code needs no error plumbing for it.
pub struct Output<T> {
    buffer: Vec<T>,
    batch_size: usize,
    writers: Vec<Box<dyn EdgeWriter<T>>>,
    /// When the oldest record still buffered (here or in a writer) was emitted.
    buffered_since: Option<Instant>,
    records_out: u64,
    error: Option<TaskError>,
    /// The last watermark sent downstream.
    // Invariant: watermarks leave an Output in strictly increasing order.
    watermark: i64,
    idle: bool,
}

impl<T: Clone + Send> Output<T> {
    pub fn new(writers: Vec<Box<dyn EdgeWriter<T>>>, batch_size: usize) -> Output<T> {
        Output {
            buffer: Vec::with_capacity(if writers.is_empty() { 0 } else { batch_size }),
            batch_size,
            writers,
            buffered_since: None,
            records_out: 0,
            error: None,
            watermark: i64::MIN,
            idle: false,
        }
    }

    /// Emits one record.
    #[inline]
    pub fn emit(&mut self, record: T) {
        if self.writers.is_empty() {
            return;
        }
        self.buffer.push(record);
        if self.buffer.len() >= self.batch_size {
            let batch = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.batch_size));
            self.route(batch);
        } else if self.buffered_since.is_none() {
            self.buffered_since = Some(Instant::now());
        }
    }

    /// Emits a whole batch. A batch that is large enough skips the buffer.
    pub fn emit_batch(&mut self, mut batch: Vec<T>) {
        if self.writers.is_empty() || batch.is_empty() {
            return;
        }
        if self.buffer.is_empty() && batch.len() * 2 >= self.batch_size {
            self.route(batch);
        } else {
            self.buffer.append(&mut batch);
            if self.buffer.len() >= self.batch_size {
                let full = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.batch_size));
                self.route(full);
            } else if self.buffered_since.is_none() {
                self.buffered_since = Some(Instant::now());
            }
        }
    }

    fn route(&mut self, batch: Vec<T>) {
        if self.error.is_some() {
            return;
        }
        self.records_out += batch.len() as u64;
        if self.buffered_since.is_none() {
            self.buffered_since = Some(Instant::now());
        }
        let result = match self.writers.split_last_mut() {
            None => Ok(()),
            Some((last, rest)) => rest
                .iter_mut()
                .try_for_each(|w| w.write_batch(batch.clone()))
                .and_then(|_| last.write_batch(batch)),
        };
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    /// Whether a batch routed now would go out without waiting for a full channel.
    pub(crate) fn has_room(&self) -> bool {
        self.writers.iter().all(|w| w.has_room())
    }

    /// Records emitted so far.
    pub fn records_out(&self) -> u64 {
        self.records_out + self.buffer.len() as u64
    }

    /// When buffered records have waited since, if any wait.
    pub(crate) fn buffered_since(&self) -> Option<Instant> {
        self.buffered_since
    }

    /// Sends everything buffered, here and in the writers.
    pub(crate) fn flush(&mut self) -> Result<(), TaskError> {
        if !self.buffer.is_empty() {
            let batch = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.batch_size));
            self.route(batch);
        }
        self.take_error()?;
        for w in &mut self.writers {
            w.flush()?;
        }
        self.buffered_since = None;
        Ok(())
    }

    /// Surfaces a send error kept by `emit`.
    pub(crate) fn take_error(&mut self) -> Result<(), TaskError> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Flushes, then forwards a barrier on every outgoing channel.
    pub(crate) fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.flush()?;
        self.writers.iter_mut().try_for_each(|w| w.barrier(barrier))
    }

    /// Tells every consumer, ahead of the data queued for it, that `barrier` follows (an
    /// unaligned checkpoint's barrier): a consumer in another process hears it through a
    /// priority frame of its channel.
    pub(crate) fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.writers
            .iter_mut()
            .try_for_each(|w| w.announce(barrier))
    }

    /// Sends a watermark downstream, after every record emitted before it. A watermark that
    /// is not larger than the last one sent is dropped, so event time never goes backwards.
    /// Operators whose own watermarks replace their input's (timestamp assigners) call this;
    /// others let the task loop forward their input's watermark.
    pub fn emit_watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        self.flush()?;
        self.writers
            .iter_mut()
            .try_for_each(|w| w.watermark(watermark))
    }

    /// The last watermark sent downstream (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    pub(crate) fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        self.emit_watermark(watermark)
    }

    /// Tells every consumer that this producer became idle or active; repeated statuses are
    /// dropped.
    pub fn emit_watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        let idle = status == WatermarkStatus::Idle;
        if idle == self.idle {
            return Ok(());
        }
        self.idle = idle;
        self.flush()?;
        self.writers
            .iter_mut()
            .try_for_each(|w| w.watermark_status(status))
    }

    /// Whether the last status sent was idle.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    pub(crate) fn end_of_input(&mut self) -> Result<(), TaskError> {
        self.flush()?;
        self.writers.iter_mut().try_for_each(|w| w.end_of_input())
    }
}
