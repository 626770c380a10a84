//! Failure injection for tests: makes chosen operators fail at random points.
//!
//! Off unless `WEIR_INJECT_FAILURES` is set, as `uid[,uid…]:probability`, e.g.
//! `counts,sink:0.002`: every batch a subtask of a named operator processes (or a source
//! emits) fails its attempt with that probability. Or as `uid[,uid…]:duration`, e.g.
//! `counts:10s`: each subtask of a named operator fails its attempt at the first batch after
//! that long (±20 %, drawn per subtask) since the attempt started — a failure every ~10 s
//! for as long as the job runs, whatever its throughput. Checked once per batch, never per
//! record.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Which operators fail, and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureInjection {
    pub uids: Vec<String>,
    /// Per batch; unused when `every` is set.
    pub probability: f64,
    /// Each attempt fails about this long after it started.
    pub every: Option<Duration>,
}

impl FailureInjection {
    pub const ENV: &'static str = "WEIR_INJECT_FAILURES";

    /// Reads [`Self::ENV`]; a malformed value is an error naming it.
    pub fn from_env() -> Result<Option<FailureInjection>, String> {
        match std::env::var(Self::ENV) {
            Ok(v) if !v.trim().is_empty() => Self::parse(&v).map(Some),
            _ => Ok(None),
        }
    }

    pub fn parse(text: &str) -> Result<FailureInjection, String> {
        let bad = || {
            format!(
                "{}='{text}': expected uid[,uid…]:probability or uid[,uid…]:duration, e.g. counts:0.01 or counts:10s",
                Self::ENV
            )
        };
        let (uids, p) = text.rsplit_once(':').ok_or_else(bad)?;
        let (probability, every) = match p.trim().parse::<f64>() {
            Ok(probability) if (0.0..=1.0).contains(&probability) => (probability, None),
            Ok(_) => return Err(bad()),
            Err(_) => match weir_core::config::parse_duration(p.trim()) {
                Ok(every) if !every.is_zero() => (0.0, Some(every)),
                _ => return Err(bad()),
            },
        };
        let uids: Vec<String> = uids
            .split(',')
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if uids.is_empty() {
            return Err(bad());
        }
        Ok(FailureInjection {
            uids,
            probability,
            every,
        })
    }

    /// The injector of one subtask, or `None` if its operator is not named.
    pub fn for_subtask(&self, uid: &str, index: u32, attempt: u32) -> Option<FailureInjector> {
        if !self.uids.iter().any(|u| u == uid) {
            return None;
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let seed =
            nanos ^ ((index as u64) << 32) ^ ((attempt as u64) << 48) ^ 0x9e37_79b9_7f4a_7c15;
        let mut injector = FailureInjector {
            state: seed | 1,
            threshold: (self.probability * u64::MAX as f64) as u64,
            deadline: None,
        };
        if let Some(every) = self.every {
            // 0.8 to 1.2 times the period, so that subtasks do not fail in lockstep.
            let spread = (injector.next() % 4001) as f64 / 10_000.0;
            injector.deadline = Some(Instant::now() + every.mul_f64(0.8 + spread));
        }
        Some(injector)
    }
}

/// One subtask's dice (or its deadline).
#[derive(Clone, Debug)]
pub struct FailureInjector {
    state: u64,
    threshold: u64,
    deadline: Option<Instant>,
}

impl FailureInjector {
    /// Rolls once; true means: fail now.
    pub fn roll(&mut self) -> bool {
        match self.deadline {
            Some(deadline) => Instant::now() >= deadline,
            None => self.next() < self.threshold,
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_names_operators_and_a_probability() {
        let f = FailureInjection::parse("counts, sink:0.25").unwrap();
        assert_eq!(f.uids, vec!["counts", "sink"]);
        assert!(f.for_subtask("other", 0, 0).is_none());
        let mut dice = f.for_subtask("sink", 1, 0).unwrap();
        let hits = (0..10_000).filter(|_| dice.roll()).count();
        assert!((2000..3000).contains(&hits), "{hits}");
        assert!(FailureInjection::parse("counts").is_err());
        assert!(FailureInjection::parse("counts:2").is_err());
        assert!(FailureInjection::parse(":0.1").is_err());
        assert!(FailureInjection::parse("counts:0s").is_err());
        assert!(FailureInjection::parse("counts:soon").is_err());
    }

    #[test]
    fn a_period_fails_each_attempt_once_it_has_run_that_long() {
        let f = FailureInjection::parse("counts:1h").unwrap();
        assert_eq!(f.every, Some(Duration::from_secs(3600)));
        let mut dice = f.for_subtask("counts", 0, 0).unwrap();
        assert!((0..1000).all(|_| !dice.roll()));
        let mut late = dice.clone();
        late.deadline = Some(Instant::now());
        assert!(late.roll());
    }
}
