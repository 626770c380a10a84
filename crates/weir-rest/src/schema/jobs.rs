//! The job bodies: `/jobs` (`JobIdsWithStatusOverview`), `/jobs/overview`
//! (`MultipleJobsDetails` of `JobDetails`), `/jobs/:jobid` (`JobDetailsInfo` with its vertices
//! and plan) and `/jobs/:jobid/exceptions` (`JobExceptionsInfoWithHistory`).
//!
//! Weir runs each operator as its own task (no chaining), so a Flink "vertex" is one operator
//! of the job graph, and a "task" one subtask. Weir counts records, not bytes, and does not
//! measure busy, idle or back-pressured time: those IO metrics are reported as 0.

use serde::Serialize;
use std::collections::BTreeMap;
use weir_checkpoint::JobStatus;
use weir_runtime::graph::NodeRole;
use weir_runtime::JobHandle;

use super::{clamp, execution_state, is_terminal, job_status_name, EXECUTION_STATES, JOB_STATUSES};
use crate::ids::vertex_id;

/// Flink's `JobIdWithStatus`.
#[derive(Clone, Debug, Serialize)]
pub struct JobIdWithStatus {
    pub id: String,
    pub status: &'static str,
}

/// Flink's `JobIdsWithStatusOverview` (`GET /jobs`).
#[derive(Clone, Debug, Serialize)]
pub struct JobIdsWithStatusOverview {
    pub jobs: Vec<JobIdWithStatus>,
}

/// Flink's `JobDetails`: one line of `/jobs/overview`.
#[derive(Clone, Debug, Serialize)]
pub struct JobDetails {
    pub jid: String,
    pub name: String,
    #[serde(rename = "start-time")]
    pub start_time: i64,
    #[serde(rename = "end-time")]
    pub end_time: i64,
    pub duration: i64,
    pub state: &'static str,
    #[serde(rename = "last-modification")]
    pub last_modification: i64,
    /// `total` and the count of tasks in each execution state (lower case, as Flink writes).
    pub tasks: BTreeMap<String, i32>,
    #[serde(rename = "jobType")]
    pub job_type: &'static str,
    #[serde(rename = "schedulerType")]
    pub scheduler_type: &'static str,
    #[serde(rename = "pending-operators")]
    pub pending_operators: i32,
}

/// Flink's `MultipleJobsDetails` (`GET /jobs/overview`).
#[derive(Clone, Debug, Serialize)]
pub struct MultipleJobsDetails {
    pub jobs: Vec<JobDetails>,
}

/// Flink's `IOMetricsInfo`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IoMetricsInfo {
    #[serde(rename = "read-bytes")]
    pub read_bytes: i64,
    #[serde(rename = "read-bytes-complete")]
    pub read_bytes_complete: bool,
    #[serde(rename = "write-bytes")]
    pub write_bytes: i64,
    #[serde(rename = "write-bytes-complete")]
    pub write_bytes_complete: bool,
    #[serde(rename = "read-records")]
    pub read_records: i64,
    #[serde(rename = "read-records-complete")]
    pub read_records_complete: bool,
    #[serde(rename = "write-records")]
    pub write_records: i64,
    #[serde(rename = "write-records-complete")]
    pub write_records_complete: bool,
    #[serde(rename = "accumulated-backpressured-time")]
    pub accumulated_backpressured_time: i64,
    #[serde(rename = "accumulated-idle-time")]
    pub accumulated_idle_time: i64,
    #[serde(rename = "accumulated-busy-time")]
    pub accumulated_busy_time: f64,
}

/// Flink's `JobDetailsVertexInfo`.
#[derive(Clone, Debug, Serialize)]
pub struct JobDetailsVertexInfo {
    pub id: String,
    #[serde(rename = "slotSharingGroupId")]
    pub slot_sharing_group_id: String,
    pub name: String,
    #[serde(rename = "maxParallelism")]
    pub max_parallelism: i32,
    pub parallelism: i32,
    pub status: &'static str,
    #[serde(rename = "start-time")]
    pub start_time: i64,
    #[serde(rename = "end-time")]
    pub end_time: i64,
    pub duration: i64,
    pub tasks: BTreeMap<&'static str, i32>,
    pub metrics: IoMetricsInfo,
}

/// Flink's plan `Input`: an edge into a plan node.
#[derive(Clone, Debug, Serialize)]
pub struct PlanInput {
    pub num: i64,
    pub id: String,
    pub ship_strategy: String,
    pub exchange: &'static str,
}

/// Flink's `PlanNode`.
#[derive(Clone, Debug, Serialize)]
pub struct PlanNode {
    pub id: String,
    pub parallelism: i64,
    pub operator: &'static str,
    pub operator_strategy: &'static str,
    pub description: String,
    pub inputs: Vec<PlanInput>,
    pub optimizer_properties: serde_json::Map<String, serde_json::Value>,
}

/// Flink's `Plan`.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub jid: String,
    pub name: String,
    #[serde(rename = "type")]
    pub job_type: &'static str,
    pub nodes: Vec<PlanNode>,
}

/// Flink's `JobDetailsInfo` (`GET /jobs/:jobid`).
#[derive(Clone, Debug, Serialize)]
pub struct JobDetailsInfo {
    pub jid: String,
    pub name: String,
    #[serde(rename = "isStoppable")]
    pub is_stoppable: bool,
    pub state: &'static str,
    #[serde(rename = "job-type")]
    pub job_type: &'static str,
    #[serde(rename = "schedulerType")]
    pub scheduler_type: &'static str,
    #[serde(rename = "start-time")]
    pub start_time: i64,
    #[serde(rename = "end-time")]
    pub end_time: i64,
    pub duration: i64,
    #[serde(rename = "maxParallelism")]
    pub max_parallelism: i64,
    #[serde(rename = "application-id")]
    pub application_id: String,
    pub now: i64,
    pub timestamps: BTreeMap<&'static str, i64>,
    pub vertices: Vec<JobDetailsVertexInfo>,
    #[serde(rename = "status-counts")]
    pub status_counts: BTreeMap<&'static str, i32>,
    pub plan: Plan,
    #[serde(rename = "pending-operators")]
    pub pending_operators: i32,
}

/// Flink's `RootExceptionInfo`: one failure of the job.
#[derive(Clone, Debug, Serialize)]
pub struct RootExceptionInfo {
    #[serde(rename = "exceptionName")]
    pub exception_name: &'static str,
    pub stacktrace: String,
    pub timestamp: i64,
    #[serde(rename = "taskName")]
    pub task_name: Option<String>,
    pub endpoint: Option<String>,
    #[serde(rename = "taskManagerId")]
    pub task_manager_id: Option<String>,
    #[serde(rename = "failureLabels")]
    pub failure_labels: BTreeMap<String, String>,
    #[serde(rename = "concurrentExceptions")]
    pub concurrent_exceptions: Vec<serde_json::Value>,
}

/// Flink's `JobExceptionHistory`.
#[derive(Clone, Debug, Serialize)]
pub struct JobExceptionHistory {
    pub entries: Vec<RootExceptionInfo>,
    pub truncated: bool,
}

/// Flink's `JobExceptionsInfoWithHistory` (`GET /jobs/:jobid/exceptions`).
#[derive(Clone, Debug, Serialize)]
pub struct JobExceptionsInfoWithHistory {
    #[serde(rename = "exceptionHistory")]
    pub exception_history: JobExceptionHistory,
}

/// Start, end (`-1` while running) and duration of the job at `now_ms`.
fn times(job: &JobHandle, status: JobStatus, now_ms: u64) -> (i64, i64, i64) {
    let start = job.start_time_ms();
    let end = job.end_time_ms().filter(|_| is_terminal(status));
    let duration = end.unwrap_or(now_ms).saturating_sub(start);
    (clamp(start), end.map(clamp).unwrap_or(-1), clamp(duration))
}

fn total_subtasks(job: &JobHandle) -> i32 {
    job.vertices()
        .iter()
        .map(|v| i32::try_from(v.parallelism).unwrap_or(i32::MAX))
        .sum()
}

pub fn ids_with_status(job: &JobHandle) -> JobIdsWithStatusOverview {
    JobIdsWithStatusOverview {
        jobs: vec![JobIdWithStatus {
            id: job.id().to_string(),
            status: job_status_name(job.status()),
        }],
    }
}

pub fn overview(job: &JobHandle, now_ms: u64) -> MultipleJobsDetails {
    let status = job.status();
    let (start, end, duration) = times(job, status, now_ms);
    let total = total_subtasks(job);
    let mut tasks: BTreeMap<String, i32> = EXECUTION_STATES
        .iter()
        .map(|s| (s.to_lowercase(), 0))
        .collect();
    tasks.insert(execution_state(status).to_lowercase(), total);
    tasks.insert("total".into(), total);
    MultipleJobsDetails {
        jobs: vec![JobDetails {
            jid: job.id().to_string(),
            name: job.name().to_string(),
            start_time: start,
            end_time: end,
            duration,
            state: job_status_name(status),
            last_modification: end.max(start),
            tasks,
            job_type: "STREAMING",
            scheduler_type: "Default",
            pending_operators: 0,
        }],
    }
}

/// Records in and out of each vertex, summed over its subtasks.
fn vertex_records(job: &JobHandle) -> Vec<(u64, u64)> {
    let mut records = vec![(0u64, 0u64); job.vertices().len()];
    for c in job.subtask_counts() {
        if let Some(r) = records.get_mut(c.vertex) {
            r.0 += c.records_in;
            r.1 += c.records_out;
        }
    }
    records
}

pub fn details(job: &JobHandle, max_parallelism: u32, now_ms: u64) -> JobDetailsInfo {
    let status = job.status();
    let (start, end, duration) = times(job, status, now_ms);
    let state = execution_state(status);
    let records = vertex_records(job);
    let jid = job.id().to_string();
    let vertices: Vec<JobDetailsVertexInfo> = job
        .vertices()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut tasks: BTreeMap<&'static str, i32> =
                EXECUTION_STATES.iter().map(|s| (*s, 0)).collect();
            tasks.insert(state, i32::try_from(v.parallelism).unwrap_or(i32::MAX));
            let (records_in, records_out) = records.get(i).copied().unwrap_or_default();
            JobDetailsVertexInfo {
                id: vertex_id(&v.uid),
                slot_sharing_group_id: format!("{:032x}", 0u128),
                name: v.name.clone(),
                max_parallelism: i32::try_from(max_parallelism).unwrap_or(i32::MAX),
                parallelism: i32::try_from(v.parallelism).unwrap_or(i32::MAX),
                status: state,
                start_time: start,
                end_time: end,
                duration,
                tasks,
                metrics: IoMetricsInfo {
                    read_records: clamp(records_in),
                    write_records: clamp(records_out),
                    read_bytes_complete: true,
                    write_bytes_complete: true,
                    read_records_complete: true,
                    write_records_complete: true,
                    ..IoMetricsInfo::default()
                },
            }
        })
        .collect();
    let mut status_counts: BTreeMap<&'static str, i32> =
        EXECUTION_STATES.iter().map(|s| (*s, 0)).collect();
    status_counts.insert(state, i32::try_from(vertices.len()).unwrap_or(i32::MAX));
    let mut timestamps: BTreeMap<&'static str, i64> =
        JOB_STATUSES.iter().map(|s| (*s, 0)).collect();
    for s in ["INITIALIZING", "CREATED", "RUNNING"] {
        timestamps.insert(s, start);
    }
    if end >= 0 {
        timestamps.insert(job_status_name(status), end);
    }
    JobDetailsInfo {
        jid: jid.clone(),
        name: job.name().to_string(),
        is_stoppable: status == JobStatus::Running,
        state: job_status_name(status),
        job_type: "STREAMING",
        scheduler_type: "Default",
        start_time: start,
        end_time: end,
        duration,
        max_parallelism: i64::from(max_parallelism),
        application_id: jid.clone(),
        now: clamp(now_ms),
        timestamps,
        vertices,
        status_counts,
        plan: plan(job, &jid),
        pending_operators: 0,
    }
}

fn plan(job: &JobHandle, jid: &str) -> Plan {
    let vertices = job.vertices();
    let nodes = vertices
        .iter()
        .enumerate()
        .map(|(i, v)| PlanNode {
            id: vertex_id(&v.uid),
            parallelism: i64::from(v.parallelism),
            operator: match v.role {
                NodeRole::Source => "Source",
                NodeRole::Operator => "Operator",
                NodeRole::Sink => "Sink",
            },
            operator_strategy: "",
            description: v.name.clone(),
            inputs: job
                .edges()
                .iter()
                .filter(|e| e.to == i)
                .enumerate()
                .filter_map(|(num, e)| {
                    vertices.get(e.from).map(|from| PlanInput {
                        num: num as i64,
                        id: vertex_id(&from.uid),
                        ship_strategy: if e.chained {
                            format!("{} (chained)", e.partition)
                        } else {
                            e.partition.clone()
                        },
                        exchange: "pipelined_bounded",
                    })
                })
                .collect(),
            optimizer_properties: serde_json::Map::new(),
        })
        .collect();
    Plan {
        jid: jid.to_string(),
        name: job.name().to_string(),
        job_type: "STREAMING",
        nodes,
    }
}

pub fn exceptions(job: &JobHandle) -> JobExceptionsInfoWithHistory {
    let entries = job
        .failure()
        .map(|cause| RootExceptionInfo {
            exception_name: "weir.JobFailure",
            stacktrace: cause,
            timestamp: job.end_time_ms().map(clamp).unwrap_or(-1),
            task_name: None,
            endpoint: None,
            task_manager_id: None,
            failure_labels: BTreeMap::new(),
            concurrent_exceptions: Vec::new(),
        })
        .into_iter()
        .collect();
    JobExceptionsInfoWithHistory {
        exception_history: JobExceptionHistory {
            entries,
            truncated: false,
        },
    }
}
