//! Summary statistics (min, average, max and percentiles) over completed checkpoints, for the
//! checkpoint overview in REST and the UI.
//!
//! Minimum, maximum and average cover every sample; percentiles cover the newest
//! [`SUMMARY_WINDOW`] samples, as Flink's histogram window does, and are computed when read so
//! that recording a sample stays O(1).

use serde::{Serialize, Serializer};
use std::collections::VecDeque;

/// How many of the newest samples percentiles are computed over.
pub const SUMMARY_WINDOW: usize = 10_000;

/// A running summary of one measure (a duration in ms or a size in bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatsSummary {
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
    // Invariant: at most SUMMARY_WINDOW samples, oldest first.
    window: VecDeque<u64>,
}

/// A summary as read: what [`StatsSummary`] serialises to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SummarySnapshot {
    pub count: u64,
    pub min: u64,
    pub max: u64,
    pub avg: u64,
    pub p50: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
}

impl StatsSummary {
    pub fn add(&mut self, sample: u64) {
        if self.count == 0 {
            self.min = sample;
            self.max = sample;
        } else {
            self.min = self.min.min(sample);
            self.max = self.max.max(sample);
        }
        self.count += 1;
        self.sum += sample as u128;
        if self.window.len() == SUMMARY_WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(sample);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Min, average, max and percentiles; all zero before the first sample.
    pub fn snapshot(&self) -> SummarySnapshot {
        if self.count == 0 {
            return SummarySnapshot::default();
        }
        let mut sorted: Vec<u64> = self.window.iter().copied().collect();
        sorted.sort_unstable();
        SummarySnapshot {
            count: self.count,
            min: self.min,
            max: self.max,
            avg: (self.sum / self.count as u128) as u64,
            p50: nearest_rank(&sorted, 0.50),
            p90: nearest_rank(&sorted, 0.90),
            p95: nearest_rank(&sorted, 0.95),
            p99: nearest_rank(&sorted, 0.99),
            p999: nearest_rank(&sorted, 0.999),
        }
    }
}

/// The smallest sample with at least `q` of all samples at or below it.
fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Serialize for StatsSummary {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.snapshot().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut s = StatsSummary::default();
        assert_eq!(s.snapshot(), SummarySnapshot::default());
        for v in 1..=100 {
            s.add(v);
        }
        let snap = s.snapshot();
        assert_eq!((snap.min, snap.max, snap.avg), (1, 100, 50));
        assert_eq!((snap.p50, snap.p90, snap.p99, snap.p999), (50, 90, 99, 100));
    }

    #[test]
    fn percentiles_forget_samples_beyond_the_window_but_min_and_max_do_not() {
        let mut s = StatsSummary::default();
        s.add(1_000_000);
        for _ in 0..SUMMARY_WINDOW {
            s.add(7);
        }
        let snap = s.snapshot();
        assert_eq!(snap.max, 1_000_000);
        assert_eq!(snap.p999, 7);
        assert_eq!(snap.count, SUMMARY_WINDOW as u64 + 1);
    }
}
