//! The cluster-level bodies: `/config` (`DashboardConfiguration`) and `/overview`
//! (`ClusterOverviewWithVersion`). A Weir process is a cluster of one job manager and one
//! task manager running one job, with a slot per subtask.

use serde::Serialize;
use weir_checkpoint::JobStatus;

/// What `flink-version` reports: Weir's own version, so tools can tell Weir apart.
pub fn version() -> String {
    format!("weir-{}", env!("CARGO_PKG_VERSION"))
}

/// How often the dashboard refreshes, in milliseconds.
pub const REFRESH_INTERVAL_MS: i64 = 1000;

/// Flink's `Features`: which actions the web UI offers.
#[derive(Clone, Debug, Serialize)]
pub struct Features {
    #[serde(rename = "web-submit")]
    pub web_submit: bool,
    #[serde(rename = "web-cancel")]
    pub web_cancel: bool,
    #[serde(rename = "web-rescale")]
    pub web_rescale: bool,
    #[serde(rename = "web-history")]
    pub web_history: bool,
}

/// Flink's `DashboardConfiguration` (`GET /config`).
#[derive(Clone, Debug, Serialize)]
pub struct DashboardConfiguration {
    #[serde(rename = "refresh-interval")]
    pub refresh_interval: i64,
    #[serde(rename = "timezone-name")]
    pub timezone_name: String,
    #[serde(rename = "timezone-offset")]
    pub timezone_offset: i32,
    #[serde(rename = "flink-version")]
    pub flink_version: String,
    #[serde(rename = "flink-revision")]
    pub flink_revision: String,
    pub features: Features,
}

impl DashboardConfiguration {
    pub fn current() -> DashboardConfiguration {
        DashboardConfiguration {
            refresh_interval: REFRESH_INTERVAL_MS,
            // Times are sent as UTC milliseconds; the dashboard shows them in the browser's zone.
            timezone_name: "UTC".into(),
            timezone_offset: 0,
            flink_version: version(),
            flink_revision: "weir".into(),
            features: Features {
                web_submit: false,
                web_cancel: true,
                web_rescale: false,
                web_history: false,
            },
        }
    }
}

/// Flink's `ClusterOverviewWithVersion` (`GET /overview`).
#[derive(Clone, Debug, Serialize)]
pub struct ClusterOverviewWithVersion {
    pub taskmanagers: i32,
    #[serde(rename = "taskmanagers-blocked")]
    pub taskmanagers_blocked: i32,
    #[serde(rename = "slots-total")]
    pub slots_total: i32,
    #[serde(rename = "slots-available")]
    pub slots_available: i32,
    #[serde(rename = "slots-free-and-blocked")]
    pub slots_free_and_blocked: i32,
    #[serde(rename = "jobs-running")]
    pub jobs_running: i32,
    #[serde(rename = "jobs-finished")]
    pub jobs_finished: i32,
    #[serde(rename = "jobs-cancelled")]
    pub jobs_cancelled: i32,
    #[serde(rename = "jobs-failed")]
    pub jobs_failed: i32,
    #[serde(rename = "flink-version")]
    pub flink_version: String,
    #[serde(rename = "flink-commit")]
    pub flink_commit: String,
}

impl ClusterOverviewWithVersion {
    /// The overview of a process running one job with `subtasks` subtasks in `status`.
    pub fn of(status: JobStatus, subtasks: usize) -> ClusterOverviewWithVersion {
        let count = |s: &[JobStatus]| i32::from(s.contains(&status));
        let slots = i32::try_from(subtasks).unwrap_or(i32::MAX);
        let running = !super::is_terminal(status);
        ClusterOverviewWithVersion {
            taskmanagers: 1,
            taskmanagers_blocked: 0,
            slots_total: slots,
            slots_available: if running { 0 } else { slots },
            slots_free_and_blocked: 0,
            jobs_running: count(&[
                JobStatus::Created,
                JobStatus::Running,
                JobStatus::Restarting,
                JobStatus::Failing,
                JobStatus::Cancelling,
            ]),
            jobs_finished: count(&[JobStatus::Finished]),
            jobs_cancelled: count(&[JobStatus::Cancelled]),
            jobs_failed: count(&[JobStatus::Failed]),
            flink_version: version(),
            flink_commit: "weir".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_job_counts_once_and_holds_its_slots() {
        let o = ClusterOverviewWithVersion::of(JobStatus::Running, 6);
        assert_eq!((o.jobs_running, o.jobs_finished), (1, 0));
        assert_eq!((o.slots_total, o.slots_available), (6, 0));
        let json = serde_json::to_value(&o).unwrap();
        assert!(json["slots-free-and-blocked"].is_number());
    }

    #[test]
    fn the_dashboard_configuration_has_flinks_field_names() {
        let json = serde_json::to_value(DashboardConfiguration::current()).unwrap();
        assert!(json["refresh-interval"].is_i64());
        assert!(json["features"]["web-cancel"].is_boolean());
    }
}
