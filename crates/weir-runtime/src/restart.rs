//! Restart strategies: whether, and after how long, a failed job restarts from its latest
//! checkpoint. Flink's names and options; time is passed in, so the rules are tested without
//! sleeping.
//!
//! | `restart-strategy.type` | options (defaults) |
//! |---|---|
//! | `exponential-delay` (default with checkpointing) | `.exponential-delay.initial-backoff` (1 s), `.max-backoff` (1 min), `.backoff-multiplier` (1.5), `.reset-backoff-threshold` (1 h), `.attempts-before-reset-backoff` (unlimited) |
//! | `fixed-delay` | `.fixed-delay.attempts` (1), `.fixed-delay.delay` (1 s) |
//! | `failure-rate` | `.failure-rate.max-failures-per-interval` (1), `.failure-rate.failure-rate-interval` (1 min), `.failure-rate.delay` (1 s) |
//! | `none` (default without checkpointing) | — |

use std::collections::VecDeque;
use std::time::Duration;
use weir_core::config::{Config, ConfigError};

/// A restart strategy and its options.
#[derive(Clone, Debug, PartialEq)]
pub enum RestartStrategy {
    None,
    FixedDelay {
        attempts: u32,
        delay: Duration,
    },
    FailureRate {
        max_failures_per_interval: u32,
        interval: Duration,
        delay: Duration,
    },
    ExponentialDelay {
        initial_backoff: Duration,
        max_backoff: Duration,
        multiplier: f64,
        reset_threshold: Duration,
        /// `None`: unlimited.
        attempts: Option<u32>,
    },
}

impl RestartStrategy {
    /// Reads `restart-strategy.*`; the default depends on whether checkpointing is on.
    pub fn from_config(
        config: &Config,
        checkpointing: bool,
    ) -> Result<RestartStrategy, ConfigError> {
        let key = "restart-strategy.type";
        let kind = config
            .get(key)
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_else(|| {
                if checkpointing {
                    "exponential-delay"
                } else {
                    "none"
                }
                .into()
            });
        let dur = |k: &str, d: u64| -> Result<Duration, ConfigError> {
            Ok(config.get_duration(k)?.unwrap_or(Duration::from_millis(d)))
        };
        Ok(match kind.as_str() {
            "none" | "off" | "disable" => RestartStrategy::None,
            "fixed-delay" | "fixeddelay" => RestartStrategy::FixedDelay {
                attempts: config
                    .get_u32("restart-strategy.fixed-delay.attempts")?
                    .unwrap_or(1),
                delay: dur("restart-strategy.fixed-delay.delay", 1000)?,
            },
            "failure-rate" | "failurerate" => RestartStrategy::FailureRate {
                max_failures_per_interval: config
                    .get_u32("restart-strategy.failure-rate.max-failures-per-interval")?
                    .unwrap_or(1),
                interval: dur(
                    "restart-strategy.failure-rate.failure-rate-interval",
                    60_000,
                )?,
                delay: dur("restart-strategy.failure-rate.delay", 1000)?,
            },
            "exponential-delay" | "exponentialdelay" => {
                let multiplier_key = "restart-strategy.exponential-delay.backoff-multiplier";
                let multiplier = match config.get(multiplier_key) {
                    None => 1.5,
                    Some(v) => match v.parse::<f64>() {
                        Ok(m) if m >= 1.0 && m.is_finite() => m,
                        _ => {
                            return Err(ConfigError::Invalid {
                                key: multiplier_key.into(),
                                value: v.into(),
                                reason: "expected a number ≥ 1.0".into(),
                            })
                        }
                    },
                };
                let initial_backoff =
                    dur("restart-strategy.exponential-delay.initial-backoff", 1000)?;
                let max_backoff = dur("restart-strategy.exponential-delay.max-backoff", 60_000)?;
                RestartStrategy::ExponentialDelay {
                    initial_backoff,
                    max_backoff: max_backoff.max(initial_backoff),
                    multiplier,
                    reset_threshold: dur(
                        "restart-strategy.exponential-delay.reset-backoff-threshold",
                        3_600_000,
                    )?,
                    attempts: config.get_u32(
                        "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                    )?,
                }
            }
            other => {
                return Err(ConfigError::Invalid {
                    key: key.into(),
                    value: other.into(),
                    reason: "expected none, fixed-delay, failure-rate or exponential-delay".into(),
                })
            }
        })
    }
}

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartDecision {
    RestartAfter(Duration),
    GiveUp,
}

/// The state of a strategy over a job's life.
#[derive(Clone, Debug)]
pub struct RestartTracker {
    strategy: RestartStrategy,
    restarts: u32,
    failures: VecDeque<u64>,
    backoff: Duration,
    last_failure_ms: Option<u64>,
}

impl RestartTracker {
    pub fn new(strategy: RestartStrategy) -> RestartTracker {
        let backoff = match &strategy {
            RestartStrategy::ExponentialDelay {
                initial_backoff, ..
            } => *initial_backoff,
            _ => Duration::ZERO,
        };
        RestartTracker {
            strategy,
            restarts: 0,
            failures: VecDeque::new(),
            backoff,
            last_failure_ms: None,
        }
    }

    /// Records a failure at `now_ms` and decides.
    pub fn on_failure(&mut self, now_ms: u64) -> RestartDecision {
        let previous = self.last_failure_ms.replace(now_ms);
        match &self.strategy {
            RestartStrategy::None => RestartDecision::GiveUp,
            RestartStrategy::FixedDelay { attempts, delay } => {
                if self.restarts >= *attempts {
                    return RestartDecision::GiveUp;
                }
                self.restarts += 1;
                RestartDecision::RestartAfter(*delay)
            }
            RestartStrategy::FailureRate {
                max_failures_per_interval,
                interval,
                delay,
            } => {
                let window = interval.as_millis() as u64;
                while self
                    .failures
                    .front()
                    .is_some_and(|t| now_ms.saturating_sub(*t) >= window)
                {
                    self.failures.pop_front();
                }
                self.failures.push_back(now_ms);
                if self.failures.len() as u32 > *max_failures_per_interval {
                    RestartDecision::GiveUp
                } else {
                    RestartDecision::RestartAfter(*delay)
                }
            }
            RestartStrategy::ExponentialDelay {
                initial_backoff,
                max_backoff,
                multiplier,
                reset_threshold,
                attempts,
            } => {
                // A job that ran long enough since its last failure starts over with the
                // initial backoff.
                if previous
                    .is_some_and(|p| now_ms.saturating_sub(p) >= reset_threshold.as_millis() as u64)
                {
                    self.backoff = *initial_backoff;
                    self.restarts = 0;
                }
                if attempts.is_some_and(|a| self.restarts >= a) {
                    return RestartDecision::GiveUp;
                }
                self.restarts += 1;
                let delay = self.backoff;
                self.backoff = self.backoff.mul_f64(*multiplier).min(*max_backoff);
                RestartDecision::RestartAfter(delay)
            }
        }
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        let mut c = Config::new();
        for (k, v) in pairs {
            c.set(k, v).unwrap();
        }
        c
    }

    #[test]
    fn exponential_delay_is_the_default_with_checkpointing_and_none_without() {
        let c = Config::new();
        assert!(matches!(
            RestartStrategy::from_config(&c, true).unwrap(),
            RestartStrategy::ExponentialDelay { .. }
        ));
        assert_eq!(
            RestartStrategy::from_config(&c, false).unwrap(),
            RestartStrategy::None
        );
    }

    #[test]
    fn none_never_restarts() {
        let mut t = RestartTracker::new(RestartStrategy::None);
        assert_eq!(t.on_failure(0), RestartDecision::GiveUp);
    }

    #[test]
    fn fixed_delay_restarts_the_given_number_of_times_then_gives_up() {
        let c = config(&[
            ("restart-strategy.type", "fixed-delay"),
            ("restart-strategy.fixed-delay.attempts", "2"),
            ("restart-strategy.fixed-delay.delay", "50 ms"),
        ]);
        let mut t = RestartTracker::new(RestartStrategy::from_config(&c, true).unwrap());
        assert_eq!(
            t.on_failure(0),
            RestartDecision::RestartAfter(Duration::from_millis(50))
        );
        assert_eq!(
            t.on_failure(10),
            RestartDecision::RestartAfter(Duration::from_millis(50))
        );
        assert_eq!(t.on_failure(20), RestartDecision::GiveUp);
    }

    #[test]
    fn failure_rate_gives_up_only_when_too_many_failures_fall_in_one_interval() {
        let c = config(&[
            ("restart-strategy.type", "failure-rate"),
            (
                "restart-strategy.failure-rate.max-failures-per-interval",
                "2",
            ),
            ("restart-strategy.failure-rate.failure-rate-interval", "1 s"),
            ("restart-strategy.failure-rate.delay", "0 ms"),
        ]);
        let mut t = RestartTracker::new(RestartStrategy::from_config(&c, true).unwrap());
        assert!(matches!(t.on_failure(0), RestartDecision::RestartAfter(_)));
        assert!(matches!(
            t.on_failure(500),
            RestartDecision::RestartAfter(_)
        ));
        // The first failure left the window: still two in the last second.
        assert!(matches!(
            t.on_failure(1200),
            RestartDecision::RestartAfter(_)
        ));
        assert_eq!(t.on_failure(1300), RestartDecision::GiveUp);
    }

    #[test]
    fn exponential_delay_grows_by_the_multiplier_up_to_the_maximum_and_resets_after_a_quiet_period()
    {
        let c = config(&[
            ("restart-strategy.type", "exponential-delay"),
            (
                "restart-strategy.exponential-delay.initial-backoff",
                "100 ms",
            ),
            ("restart-strategy.exponential-delay.max-backoff", "300 ms"),
            ("restart-strategy.exponential-delay.backoff-multiplier", "2"),
            (
                "restart-strategy.exponential-delay.reset-backoff-threshold",
                "10 s",
            ),
        ]);
        let mut t = RestartTracker::new(RestartStrategy::from_config(&c, true).unwrap());
        let ms = |n| RestartDecision::RestartAfter(Duration::from_millis(n));
        assert_eq!(t.on_failure(0), ms(100));
        assert_eq!(t.on_failure(1000), ms(200));
        assert_eq!(t.on_failure(2000), ms(300));
        assert_eq!(t.on_failure(3000), ms(300));
        assert_eq!(t.on_failure(20_000), ms(100));
    }

    #[test]
    fn exponential_delay_gives_up_after_its_attempts() {
        let c = config(&[
            (
                "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                "1",
            ),
            ("restart-strategy.exponential-delay.initial-backoff", "1 ms"),
        ]);
        let mut t = RestartTracker::new(RestartStrategy::from_config(&c, true).unwrap());
        assert!(matches!(t.on_failure(0), RestartDecision::RestartAfter(_)));
        assert_eq!(t.on_failure(1), RestartDecision::GiveUp);
    }

    #[test]
    fn an_unknown_strategy_or_a_bad_multiplier_is_a_clear_error() {
        let c = config(&[("restart-strategy.type", "sometimes")]);
        assert!(RestartStrategy::from_config(&c, true)
            .unwrap_err()
            .to_string()
            .contains("fixed-delay"));
        let c = config(&[(
            "restart-strategy.exponential-delay.backoff-multiplier",
            "0.5",
        )]);
        assert!(RestartStrategy::from_config(&c, true).is_err());
    }
}
