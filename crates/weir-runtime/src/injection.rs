//! Failure injection for tests: makes chosen operators fail at random points.
//!
//! Off unless `WEIR_INJECT_FAILURES` is set, as `uid[,uid…]:probability`, e.g.
//! `counts,sink:0.002`: every batch a subtask of a named operator processes (or a source
//! emits) fails its attempt with that probability. Checked once per batch, never per record.

use std::time::{SystemTime, UNIX_EPOCH};

/// Which operators fail, and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureInjection {
    pub uids: Vec<String>,
    pub probability: f64,
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
                "{}='{text}': expected uid[,uid…]:probability, e.g. counts:0.01",
                Self::ENV
            )
        };
        let (uids, p) = text.rsplit_once(':').ok_or_else(bad)?;
        let probability: f64 = p.trim().parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&probability) {
            return Err(bad());
        }
        let uids: Vec<String> = uids
            .split(',')
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if uids.is_empty() {
            return Err(bad());
        }
        Ok(FailureInjection { uids, probability })
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
        Some(FailureInjector {
            state: seed | 1,
            threshold: (self.probability * u64::MAX as f64) as u64,
        })
    }
}

/// One subtask's dice.
#[derive(Clone, Debug)]
pub struct FailureInjector {
    state: u64,
    threshold: u64,
}

impl FailureInjector {
    /// Rolls once; true means: fail now.
    pub fn roll(&mut self) -> bool {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) < self.threshold
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
    }
}
