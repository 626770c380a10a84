//! Records per second, per subtask: the job's counters sampled once a second.
//!
//! The runtime counts records in and out of each subtask (once per batch); a rate needs two
//! samples. The server's sampler calls [`Rates::sample`] every second and readers get the
//! rates over the last interval. A restart replaces the counters, so a count that went down
//! starts a fresh interval instead of producing a negative rate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use weir_runtime::handle::SubtaskCounts;

/// One subtask's rates over the last sampling interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SubtaskRate {
    pub records_in_per_second: f64,
    pub records_out_per_second: f64,
    /// Milliseconds per second blocked on full output channels (Flink's
    /// `backPressuredTimeMsPerSecond`).
    pub backpressured_ms_per_second: f64,
}

#[derive(Default)]
struct State {
    last: HashMap<(usize, u32), (u64, u64, u64)>,
    at: Option<Instant>,
    rates: HashMap<(usize, u32), SubtaskRate>,
}

/// Rates by (vertex index, subtask index).
#[derive(Default)]
pub struct Rates {
    state: Mutex<State>,
}

impl Rates {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a sample of the counters at `now`.
    pub fn sample(&self, counts: &[SubtaskCounts], now: Instant) {
        let mut s = self.lock();
        let elapsed =
            s.at.map(|at| now.saturating_duration_since(at).as_secs_f64());
        let mut rates = HashMap::with_capacity(counts.len());
        let mut last = HashMap::with_capacity(counts.len());
        for c in counts {
            let key = (c.vertex, c.index);
            if let (Some(dt), Some(&(prev_in, prev_out, prev_bp))) = (elapsed, s.last.get(&key)) {
                if dt > 0.0 && c.records_in >= prev_in && c.records_out >= prev_out {
                    let blocked = c.backpressured_ms.saturating_sub(prev_bp) as f64 / dt;
                    rates.insert(
                        key,
                        SubtaskRate {
                            records_in_per_second: (c.records_in - prev_in) as f64 / dt,
                            records_out_per_second: (c.records_out - prev_out) as f64 / dt,
                            backpressured_ms_per_second: blocked.min(1000.0),
                        },
                    );
                }
            }
            last.insert(key, (c.records_in, c.records_out, c.backpressured_ms));
        }
        s.last = last;
        s.at = Some(now);
        s.rates = rates;
    }

    /// The rate of one subtask (zero before two samples).
    pub fn subtask(&self, vertex: usize, index: u32) -> SubtaskRate {
        self.lock()
            .rates
            .get(&(vertex, index))
            .copied()
            .unwrap_or_default()
    }

    /// The summed rates of a vertex's subtasks.
    pub fn vertex(&self, vertex: usize) -> SubtaskRate {
        self.lock()
            .rates
            .iter()
            .filter(|((v, _), _)| *v == vertex)
            .fold(SubtaskRate::default(), |acc, (_, r)| SubtaskRate {
                records_in_per_second: acc.records_in_per_second + r.records_in_per_second,
                records_out_per_second: acc.records_out_per_second + r.records_out_per_second,
                // The most blocked subtask is the operator's back-pressure.
                backpressured_ms_per_second: acc
                    .backpressured_ms_per_second
                    .max(r.backpressured_ms_per_second),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn counts(vertex: usize, index: u32, records_in: u64, records_out: u64) -> SubtaskCounts {
        SubtaskCounts {
            vertex,
            index,
            records_in,
            records_out,
            backpressured_ms: 0,
            rocksdb: None,
        }
    }

    #[test]
    fn a_rate_is_the_difference_over_the_interval() {
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.sample(&[counts(0, 0, 0, 100), counts(0, 1, 0, 50)], t0);
        assert_eq!(rates.subtask(0, 0), SubtaskRate::default());
        rates.sample(
            &[counts(0, 0, 0, 300), counts(0, 1, 0, 150)],
            t0 + Duration::from_secs(2),
        );
        assert_eq!(rates.subtask(0, 0).records_out_per_second, 100.0);
        assert_eq!(rates.vertex(0).records_out_per_second, 150.0);
    }

    #[test]
    fn counters_that_restart_from_zero_give_no_negative_rate() {
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.sample(&[counts(1, 0, 1000, 1000)], t0);
        rates.sample(&[counts(1, 0, 10, 10)], t0 + Duration::from_secs(1));
        assert_eq!(rates.subtask(1, 0), SubtaskRate::default());
        rates.sample(&[counts(1, 0, 20, 30)], t0 + Duration::from_secs(2));
        assert_eq!(rates.subtask(1, 0).records_in_per_second, 10.0);
    }
}
