//! Event time per split, made inside a source (Flink's per-split watermarks).
//!
//! A source subtask that reads several splits — a Kafka topic's partitions, say — interleaves
//! their records. One watermark over the interleaved stream runs as far ahead as the fastest
//! split and makes the records of a split that lags late. [`SplitWatermarks`] keeps one
//! generator per split instead, fed by the source with each record as it reads it, and combines
//! them: the subtask's watermark is the smallest of its splits' watermarks. A split that read
//! nothing for longer than the strategy's idleness timeout is left out until it reads again;
//! when every split is idle (or the subtask holds none) the subtask is idle and does not hold
//! back the operators it feeds. A split that has read no record yet holds the watermark back,
//! as in Flink, until it goes idle.
//!
//! The source hands the result to its task loop through
//! [`SourceFunction::event_time`](crate::SourceFunction::event_time); [`SplitWatermarks::poll`]
//! answers at most once per the strategy's interval, so the loop may ask after every batch.
//! Such a source is added to a job without a watermark strategy of its own: the two would
//! compete for the same output.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use weir_runtime::split_watermarks::{SourceEventTime, SplitEventTime, SplitWatermarks};
//! use weir_runtime::watermark::WatermarkStrategy;
//!
//! // Records are (event time in ms, payload); two splits, one far behind the other.
//! let strategy = WatermarkStrategy::for_monotonous_timestamps(|r: &(i64, u8)| r.0)
//!     .with_interval(Duration::ZERO)
//!     .with_idleness(Duration::from_secs(1));
//! let mut splits = SplitWatermarks::new(strategy);
//! let start = Instant::now();
//! splits.set_splits(2, start);
//! splits.observe(0, &(50_000, 1));
//! splits.observe(1, &(10_000, 2));
//! assert_eq!(splits.poll(start), SourceEventTime::Watermark(9_999));
//! // Split 1 reads nothing for longer than the idleness timeout: split 0 alone counts.
//! splits.observe(0, &(60_000, 3));
//! assert_eq!(splits.poll(start + Duration::from_secs(2)), SourceEventTime::Watermark(59_999));
//! ```

use std::time::{Duration, Instant};

pub use crate::operator::SourceEventTime;
use crate::watermark::{WatermarkGenerator, WatermarkStrategy};

/// Per-split event time as a source sees it; [`NoSplitEventTime`] for a source without.
pub trait SplitEventTime<T>: Send + 'static {
    /// The subtask now reads `count` splits, numbered `0..count` (splits are only ever added
    /// while a subtask runs, so earlier numbers keep their meaning).
    fn set_splits(&mut self, count: usize, now: Instant);
    /// Split `split` read `record`.
    fn observe(&mut self, split: usize, record: &T);
    /// The combined event time, when it is due.
    fn poll(&mut self, now: Instant) -> SourceEventTime;
}

/// A source without event time of its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSplitEventTime;

impl<T> SplitEventTime<T> for NoSplitEventTime {
    #[inline]
    fn set_splits(&mut self, _: usize, _: Instant) {}
    #[inline]
    fn observe(&mut self, _: usize, _: &T) {}
    #[inline]
    fn poll(&mut self, _: Instant) -> SourceEventTime {
        SourceEventTime::Unchanged
    }
}

/// One generator per split, combined; see the module documentation.
#[derive(Clone)]
pub struct SplitWatermarks<G> {
    template: G,
    interval: Duration,
    idleness: Option<Duration>,
    splits: Vec<SplitClock<G>>,
    next_poll: Option<Instant>,
}

#[derive(Clone)]
struct SplitClock<G> {
    generator: G,
    /// A record was observed since the last poll.
    read: bool,
    /// When the split last read a record (or was added), as of the last poll.
    active_at: Instant,
}

impl<G: Clone> SplitWatermarks<G> {
    /// Per-split generators cloned from `strategy`'s, with its interval and idleness (a
    /// watermark-alignment group of the strategy does not apply here).
    pub fn new(strategy: WatermarkStrategy<G>) -> SplitWatermarks<G> {
        SplitWatermarks {
            interval: strategy.interval(),
            idleness: strategy.idleness(),
            template: strategy.generator().clone(),
            splits: Vec::new(),
            next_poll: None,
        }
    }
}

impl<T, G> SplitEventTime<T> for SplitWatermarks<G>
where
    G: WatermarkGenerator<T>,
{
    fn set_splits(&mut self, count: usize, now: Instant) {
        while self.splits.len() < count {
            self.splits.push(SplitClock {
                generator: self.template.clone(),
                read: false,
                active_at: now,
            });
        }
    }

    #[inline]
    fn observe(&mut self, split: usize, record: &T) {
        if let Some(clock) = self.splits.get_mut(split) {
            clock.generator.on_batch(std::slice::from_ref(record));
            clock.read = true;
        }
    }

    fn poll(&mut self, now: Instant) -> SourceEventTime {
        if self.next_poll.is_some_and(|at| now < at) {
            return SourceEventTime::Unchanged;
        }
        self.next_poll = Some(now + self.interval);
        let mut combined: Option<i64> = None;
        let mut active = 0;
        for clock in &mut self.splits {
            if std::mem::take(&mut clock.read) {
                clock.active_at = now;
            }
            let idle = self
                .idleness
                .is_some_and(|timeout| now.saturating_duration_since(clock.active_at) >= timeout);
            if idle {
                continue;
            }
            active += 1;
            match clock.generator.current_watermark() {
                // A split that has read nothing yet holds the watermark back.
                None => return SourceEventTime::Unchanged,
                Some(w) => combined = Some(combined.map_or(w, |c| c.min(w))),
            }
        }
        match combined {
            Some(w) => SourceEventTime::Watermark(w),
            None if active == 0 => SourceEventTime::Idle,
            None => SourceEventTime::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(
        idleness: Option<Duration>,
    ) -> WatermarkStrategy<impl WatermarkGenerator<(i64, u8)>> {
        let s = WatermarkStrategy::for_bounded_out_of_orderness(
            Duration::from_millis(100),
            |r: &(i64, u8)| r.0,
        )
        .with_interval(Duration::from_millis(200));
        match idleness {
            Some(t) => s.with_idleness(t),
            None => s,
        }
    }

    #[test]
    fn the_slowest_split_sets_the_watermark_and_one_that_read_nothing_holds_it_back() {
        let mut splits = SplitWatermarks::new(strategy(None));
        let t0 = Instant::now();
        splits.set_splits(3, t0);
        splits.observe(0, &(5_000, 0));
        splits.observe(1, &(2_000, 0));
        assert_eq!(
            splits.poll(t0),
            SourceEventTime::Unchanged,
            "split 2 read nothing"
        );
        splits.observe(2, &(9_000, 0));
        // Within the interval nothing is due.
        assert_eq!(
            splits.poll(t0 + Duration::from_millis(100)),
            SourceEventTime::Unchanged
        );
        assert_eq!(
            splits.poll(t0 + Duration::from_millis(200)),
            SourceEventTime::Watermark(2_000 - 101)
        );
        // Without idleness a split that stops reading holds the watermark for good.
        splits.observe(0, &(20_000, 0));
        splits.observe(2, &(20_000, 0));
        assert_eq!(
            splits.poll(t0 + Duration::from_secs(60)),
            SourceEventTime::Watermark(2_000 - 101)
        );
    }

    #[test]
    fn idle_splits_are_left_out_and_a_subtask_of_idle_splits_is_idle() {
        let mut splits = SplitWatermarks::new(strategy(Some(Duration::from_secs(1))));
        let t0 = Instant::now();
        splits.set_splits(2, t0);
        splits.observe(0, &(5_000, 0));
        // Split 1 never reads: once idle, split 0 alone counts.
        assert_eq!(splits.poll(t0), SourceEventTime::Unchanged);
        let t1 = t0 + Duration::from_millis(1_100);
        splits.observe(0, &(6_000, 0));
        assert_eq!(splits.poll(t1), SourceEventTime::Watermark(6_000 - 101));
        // Both quiet for longer than the timeout: idle.
        let t2 = t1 + Duration::from_millis(1_100);
        assert_eq!(splits.poll(t2), SourceEventTime::Idle);
        // Split 1 reads again, behind split 0: it counts again, and the combined watermark
        // is its own (the output drops a watermark that goes back).
        splits.observe(1, &(3_000, 0));
        let t3 = t2 + Duration::from_millis(200);
        assert_eq!(splits.poll(t3), SourceEventTime::Watermark(3_000 - 101));
    }

    #[test]
    fn a_subtask_without_splits_is_idle_and_splits_added_later_count() {
        let mut splits = SplitWatermarks::new(strategy(None));
        let t0 = Instant::now();
        assert_eq!(splits.poll(t0), SourceEventTime::Idle);
        splits.set_splits(1, t0);
        splits.observe(0, &(1_000, 0));
        assert_eq!(
            splits.poll(t0 + Duration::from_millis(200)),
            SourceEventTime::Watermark(1_000 - 101)
        );
        // A split out of range (not yet set) is ignored rather than a panic.
        splits.observe(5, &(0, 0));
    }
}
