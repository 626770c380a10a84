//! The JSON bodies of Flink's REST API v1, as Weir fills them in.
//!
//! Each type mirrors a schema of Flink's `rest_v1_dispatcher` specification (named in its doc
//! comment) field for field: the same names, and the same JSON types — numbers are always
//! numbers (Flink's `-1` where a time is not known yet, `0` where Weir has no such measure,
//! e.g. the bytes buffered during alignment), never `null`. Values Weir has no counterpart for are
//! documented where they are set.

pub mod checkpoints;
pub mod cluster;
pub mod jobs;
pub mod operations;

use serde::Serialize;
use weir_checkpoint::{JobStatus, SummarySnapshot};

/// Flink's REST content type, sent with every JSON answer.
pub const JSON_CONTENT_TYPE: &str = "application/json; charset=UTF-8";

/// Flink's `JobStatus` values, in Flink's order.
pub const JOB_STATUSES: [&str; 11] = [
    "INITIALIZING",
    "CREATED",
    "RUNNING",
    "FAILING",
    "FAILED",
    "CANCELLING",
    "CANCELED",
    "FINISHED",
    "RESTARTING",
    "SUSPENDED",
    "RECONCILING",
];

/// Flink's `ExecutionState` values (of a task), in Flink's order.
pub const EXECUTION_STATES: [&str; 10] = [
    "CREATED",
    "SCHEDULED",
    "DEPLOYING",
    "RUNNING",
    "FINISHED",
    "CANCELING",
    "CANCELED",
    "FAILED",
    "RECONCILING",
    "INITIALIZING",
];

/// A job status under Flink's name (note Flink's spelling `CANCELED`).
pub fn job_status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Created => "CREATED",
        JobStatus::Running => "RUNNING",
        JobStatus::Failing => "FAILING",
        JobStatus::Restarting => "RESTARTING",
        JobStatus::Cancelling => "CANCELLING",
        JobStatus::Cancelled => "CANCELED",
        JobStatus::Finished => "FINISHED",
        JobStatus::Failed => "FAILED",
        JobStatus::Suspended => "SUSPENDED",
    }
}

/// Whether the job has reached a final status.
pub fn is_terminal(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled | JobStatus::Suspended
    )
}

/// The state of every task of a job in `status`: Weir's subtasks live and die with their job.
pub fn execution_state(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Created => "CREATED",
        JobStatus::Running => "RUNNING",
        JobStatus::Restarting => "DEPLOYING",
        JobStatus::Failing | JobStatus::Cancelling => "CANCELING",
        JobStatus::Cancelled | JobStatus::Suspended => "CANCELED",
        JobStatus::Finished => "FINISHED",
        JobStatus::Failed => "FAILED",
    }
}

/// Flink's `StatsSummaryDto`: min, max and average as integers, percentiles as doubles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StatsSummaryDto {
    pub min: i64,
    pub max: i64,
    pub avg: i64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
}

impl StatsSummaryDto {
    pub fn from_snapshot(s: &SummarySnapshot) -> StatsSummaryDto {
        StatsSummaryDto {
            min: clamp(s.min),
            max: clamp(s.max),
            avg: clamp(s.avg),
            p50: s.p50 as f64,
            p90: s.p90 as f64,
            p95: s.p95 as f64,
            p99: s.p99 as f64,
            p999: s.p999 as f64,
        }
    }

    /// The summary of a few values (a checkpoint's subtasks), nearest-rank percentiles.
    pub fn of(values: &[u64]) -> StatsSummaryDto {
        if values.is_empty() {
            return StatsSummaryDto::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let rank = |q: f64| {
            let r = (q * sorted.len() as f64).ceil() as usize;
            sorted[r.clamp(1, sorted.len()) - 1] as f64
        };
        let sum: u128 = sorted.iter().map(|&v| v as u128).sum();
        StatsSummaryDto {
            min: clamp(sorted[0]),
            max: clamp(sorted[sorted.len() - 1]),
            avg: clamp((sum / sorted.len() as u128) as u64),
            p50: rank(0.5),
            p90: rank(0.9),
            p95: rank(0.95),
            p99: rank(0.99),
            p999: rank(0.999),
        }
    }
}

/// A count or size as Flink's `long`.
pub fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A timestamp that may be unknown: Flink writes `-1`.
pub fn or_minus_one(v: Option<u64>) -> i64 {
    v.map(clamp).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancelled_is_spelled_as_flink_spells_it() {
        assert_eq!(job_status_name(JobStatus::Cancelled), "CANCELED");
        for s in [JobStatus::Created, JobStatus::Running, JobStatus::Finished] {
            assert!(JOB_STATUSES.contains(&job_status_name(s)));
            assert!(EXECUTION_STATES.contains(&execution_state(s)));
        }
    }

    #[test]
    fn a_summary_of_no_values_is_all_zero_numbers() {
        let json = serde_json::to_value(StatsSummaryDto::of(&[])).unwrap();
        for key in ["min", "max", "avg", "p50", "p90", "p95", "p99", "p999"] {
            assert!(json[key].is_number(), "{key}");
        }
    }

    #[test]
    fn a_summary_uses_nearest_rank_percentiles() {
        let s = StatsSummaryDto::of(&[5, 1, 3, 2, 4]);
        assert_eq!((s.min, s.max, s.avg), (1, 5, 3));
        assert_eq!((s.p50, s.p90), (3.0, 5.0));
    }
}
