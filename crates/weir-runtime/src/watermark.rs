//! Watermark generation: how event time starts moving.
//!
//! A [`WatermarkStrategy`] says how to read a record's event time and how far out of order
//! records may arrive. Attached to a source (the job graph's `source_factory_with_watermarks`) it runs inside
//! the source's task loop: every batch is observed before it is emitted, and the watermark —
//! the largest event time seen, minus the allowed out-of-orderness, minus one millisecond — is
//! emitted *after* the batch, at most once per [`WatermarkStrategy::with_interval`] (200 ms by
//! default, Flink's `pipeline.auto-watermark-interval`). A source that finds nothing to read
//! for longer than [`WatermarkStrategy::with_idleness`] marks itself idle, so it does not hold
//! back the watermark of the operators it feeds; it becomes active again before its next batch.
//! A bounded source that is exhausted emits the final watermark `i64::MAX`, which fires every
//! remaining event-time timer and window downstream.
//!
//! [`TimestampsAndWatermarksOperator`] does the same in the middle of a job, replacing the
//! watermarks of its input with its own.
//!
//! ```
//! use std::time::Duration;
//! use weir_runtime::watermark::{WatermarkGenerator, WatermarkStrategy};
//!
//! // Records are (event time in ms, value); up to 5 s out of order.
//! let mut strategy =
//!     WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(5), |r: &(i64, u32)| r.0);
//! assert_eq!(strategy.generator().current_watermark(), None);
//! strategy.generator_mut().on_batch(&[(10_000, 1), (12_000, 2), (11_000, 3)]);
//! assert_eq!(strategy.generator().current_watermark(), Some(12_000 - 5_000 - 1));
//! ```

use std::time::{Duration, Instant};
use weir_core::WatermarkStatus;

use crate::alignment::{AlignmentGroups, AlignmentMember};
use crate::error::TaskError;
use crate::operator::OneInputOperator;
use crate::output::Output;

/// Flink's default `pipeline.auto-watermark-interval`.
pub const DEFAULT_WATERMARK_INTERVAL: Duration = Duration::from_millis(200);

/// Turns the event times of observed records into a watermark.
pub trait WatermarkGenerator<T>: Clone + Send + 'static {
    /// Observes a batch of records (before they are emitted).
    fn on_batch(&mut self, batch: &[T]);
    /// The current watermark: no record observed later will have a smaller event time, unless
    /// it is late. `None` before any record.
    fn current_watermark(&self) -> Option<i64>;
}

/// Watermarks for records at most a fixed time out of order: the largest event time seen,
/// minus the bound, minus one (Flink's `BoundedOutOfOrdernessWatermarks`).
#[derive(Clone)]
pub struct BoundedOutOfOrderness<F> {
    timestamp: F,
    bound_ms: i64,
    max_timestamp: i64,
}

impl<F> BoundedOutOfOrderness<F> {
    pub fn new(bound: Duration, timestamp: F) -> BoundedOutOfOrderness<F> {
        BoundedOutOfOrderness {
            timestamp,
            bound_ms: bound.as_millis().min(i64::MAX as u128 / 2) as i64,
            max_timestamp: i64::MIN,
        }
    }
}

impl<T, F> WatermarkGenerator<T> for BoundedOutOfOrderness<F>
where
    F: Fn(&T) -> i64 + Clone + Send + 'static,
{
    #[inline]
    fn on_batch(&mut self, batch: &[T]) {
        let max = batch.iter().map(&self.timestamp).max();
        if let Some(max) = max {
            self.max_timestamp = self.max_timestamp.max(max);
        }
    }

    fn current_watermark(&self) -> Option<i64> {
        (self.max_timestamp != i64::MIN)
            .then(|| self.max_timestamp.saturating_sub(self.bound_ms + 1))
    }
}

/// How a stream's event time is read and its watermarks made.
#[derive(Clone)]
pub struct WatermarkStrategy<G> {
    generator: G,
    interval: Duration,
    idleness: Option<Duration>,
    /// The alignment group and its maximum drift.
    alignment: Option<(String, Duration)>,
}

impl<F> WatermarkStrategy<BoundedOutOfOrderness<F>> {
    /// Records at most `bound` out of order; `timestamp` reads a record's event time in
    /// milliseconds.
    pub fn for_bounded_out_of_orderness(
        bound: Duration,
        timestamp: F,
    ) -> WatermarkStrategy<BoundedOutOfOrderness<F>> {
        WatermarkStrategy::new(BoundedOutOfOrderness::new(bound, timestamp))
    }

    /// Records in event-time order (per source subtask).
    pub fn for_monotonous_timestamps(timestamp: F) -> WatermarkStrategy<BoundedOutOfOrderness<F>> {
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO, timestamp)
    }
}

impl<G> WatermarkStrategy<G> {
    /// A strategy with a generator of its own.
    pub fn new(generator: G) -> WatermarkStrategy<G> {
        WatermarkStrategy {
            generator,
            interval: DEFAULT_WATERMARK_INTERVAL,
            idleness: None,
            alignment: None,
        }
    }

    /// Emit watermarks at most this often (they are also emitted when the source ends).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Mark the source idle when it found nothing to read for this long.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// Align this source's subtasks with every other source of alignment group `group`: a
    /// subtask whose watermark is more than `max_drift` ahead of the group's slowest member
    /// pauses reading until it is not (see the runtime's `alignment` module). This bounds the state that
    /// windows and joins downstream hold for a fast input while a slow one catches up.
    pub fn with_watermark_alignment(mut self, group: &str, max_drift: Duration) -> Self {
        self.alignment = Some((group.to_string(), max_drift));
        self
    }

    pub fn generator(&self) -> &G {
        &self.generator
    }

    /// How often watermarks are emitted at most.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// After how long without a record a source (or a split) counts as idle, if ever.
    pub fn idleness(&self) -> Option<Duration> {
        self.idleness
    }

    pub fn generator_mut(&mut self) -> &mut G {
        &mut self.generator
    }
}

/// What a source's task loop does about event time; see the module documentation.
pub trait SourceWatermarks<T: Clone + Send>: Send + 'static {
    /// A batch is about to be emitted.
    fn before_batch(&mut self, batch: &[T], out: &mut Output<T>) -> Result<(), TaskError>;
    /// The batch was emitted.
    fn after_batch(&mut self, out: &mut Output<T>) -> Result<(), TaskError>;
    /// The source had nothing to read.
    fn on_idle(&mut self, out: &mut Output<T>) -> Result<(), TaskError>;
    /// The source is bounded and exhausted: event time is over.
    fn on_exhausted(&mut self, out: &mut Output<T>) -> Result<(), TaskError> {
        out.emit_watermark(i64::MAX)
    }
    /// Whether the source must not read now: it is too far ahead of its alignment group.
    fn paused(&mut self) -> bool {
        false
    }
}

/// A source without event time. It still ends event time when it is exhausted.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoWatermarks;

impl<T: Clone + Send> SourceWatermarks<T> for NoWatermarks {
    fn before_batch(&mut self, _: &[T], _: &mut Output<T>) -> Result<(), TaskError> {
        Ok(())
    }
    fn after_batch(&mut self, _: &mut Output<T>) -> Result<(), TaskError> {
        Ok(())
    }
    fn on_idle(&mut self, _: &mut Output<T>) -> Result<(), TaskError> {
        Ok(())
    }
}

/// A [`WatermarkStrategy`] running in a source's task loop.
pub struct SourceWatermarkDriver<G> {
    strategy: WatermarkStrategy<G>,
    next_emit: Instant,
    idle_since: Option<Instant>,
    alignment: Option<AlignmentMember>,
}

impl<G> SourceWatermarkDriver<G> {
    pub fn new(strategy: WatermarkStrategy<G>) -> SourceWatermarkDriver<G> {
        SourceWatermarkDriver {
            next_emit: Instant::now() + strategy.interval,
            strategy,
            idle_since: None,
            alignment: None,
        }
    }

    /// Joins the strategy's alignment group, if it has one, among `groups`.
    pub fn aligned(mut self, groups: &AlignmentGroups) -> Self {
        self.alignment = self
            .strategy
            .alignment
            .as_ref()
            .map(|(name, drift)| groups.join(name, *drift));
        self
    }
}

impl<T, G> SourceWatermarks<T> for SourceWatermarkDriver<G>
where
    T: Clone + Send,
    G: WatermarkGenerator<T>,
{
    #[inline]
    fn before_batch(&mut self, batch: &[T], out: &mut Output<T>) -> Result<(), TaskError> {
        self.idle_since = None;
        if out.is_idle() {
            out.emit_watermark_status(WatermarkStatus::Active)?;
        }
        self.strategy.generator.on_batch(batch);
        if let Some(member) = &self.alignment {
            member.publish(self.strategy.generator.current_watermark());
        }
        Ok(())
    }

    #[inline]
    fn after_batch(&mut self, out: &mut Output<T>) -> Result<(), TaskError> {
        let now = Instant::now();
        if now < self.next_emit {
            return Ok(());
        }
        self.next_emit = now + self.strategy.interval;
        match self.strategy.generator.current_watermark() {
            Some(w) => out.emit_watermark(w),
            None => Ok(()),
        }
    }

    fn on_idle(&mut self, out: &mut Output<T>) -> Result<(), TaskError> {
        self.after_batch(out)?;
        let Some(timeout) = self.strategy.idleness else {
            return Ok(());
        };
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= timeout && !out.is_idle() {
            out.emit_watermark_status(WatermarkStatus::Idle)?;
            if let Some(member) = &self.alignment {
                member.publish(None);
            }
        }
        Ok(())
    }

    fn on_exhausted(&mut self, out: &mut Output<T>) -> Result<(), TaskError> {
        if let Some(member) = &self.alignment {
            member.publish(None);
        }
        out.emit_watermark(i64::MAX)
    }

    #[inline]
    fn paused(&mut self) -> bool {
        match &mut self.alignment {
            Some(member) => {
                member.ahead(self.strategy.generator.current_watermark(), Instant::now())
            }
            None => false,
        }
    }
}

/// Assigns event time in the middle of a job: forwards records unchanged and emits watermarks
/// from what it sees, in place of its input's watermarks (only the final `i64::MAX` of a
/// bounded input passes through).
#[derive(Clone)]
pub struct TimestampsAndWatermarksOperator<G> {
    strategy: WatermarkStrategy<G>,
    next_emit: Option<Instant>,
}

impl<G> TimestampsAndWatermarksOperator<G> {
    pub fn new(strategy: WatermarkStrategy<G>) -> TimestampsAndWatermarksOperator<G> {
        TimestampsAndWatermarksOperator {
            strategy,
            next_emit: None,
        }
    }
}

impl<T, G> OneInputOperator<T, T> for TimestampsAndWatermarksOperator<G>
where
    T: Clone + Send + 'static,
    G: WatermarkGenerator<T>,
{
    fn process_batch(&mut self, batch: Vec<T>, out: &mut Output<T>) -> Result<(), TaskError> {
        self.strategy.generator.on_batch(&batch);
        out.emit_batch(batch);
        let now = Instant::now();
        let due = *self.next_emit.get_or_insert(now);
        if now >= due {
            self.next_emit = Some(now + self.strategy.interval);
            if let Some(w) = self.strategy.generator.current_watermark() {
                out.emit_watermark(w)?;
            }
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, out: &mut Output<T>) -> Result<(), TaskError> {
        if watermark == i64::MAX {
            out.emit_watermark(i64::MAX)?;
        }
        Ok(())
    }

    fn forwards_watermarks(&self) -> bool {
        false
    }

    fn finish(&mut self, out: &mut Output<T>) -> Result<(), TaskError> {
        if let Some(w) = self.strategy.generator.current_watermark() {
            out.emit_watermark(w)?;
        }
        Ok(())
    }
}
