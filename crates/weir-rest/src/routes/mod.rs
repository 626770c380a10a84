//! The HTTP routes: Flink's REST API v1 subset (bare and under `/v1`), the dashboard and
//! `/metrics`, with the guards every request passes ([`guard`]) and the strict JSON body
//! reader ([`body`]).
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/config` | `DashboardConfiguration` |
//! | GET | `/overview` | `ClusterOverviewWithVersion` |
//! | GET | `/jobs` | `JobIdsWithStatusOverview` |
//! | GET | `/jobs/overview` | `MultipleJobsDetails` |
//! | GET | `/jobs/:jobid` | `JobDetailsInfo` |
//! | PATCH | `/jobs/:jobid?mode=cancel` | 202, cancels the job |
//! | GET | `/jobs/:jobid/exceptions` | `JobExceptionsInfoWithHistory` |
//! | GET | `/jobs/:jobid/checkpoints` | `CheckpointingStatistics` |
//! | POST | `/jobs/:jobid/checkpoints` | 202 `TriggerResponse` |
//! | GET | `/jobs/:jobid/checkpoints/:triggerid` | `AsynchronousOperationResult` (`CheckpointInfo`) |
//! | GET | `/jobs/:jobid/checkpoints/config` | `CheckpointConfigInfo` |
//! | GET | `/jobs/:jobid/checkpoints/details/:checkpointid` | `CheckpointStatistics` |
//! | GET | `/jobs/:jobid/checkpoints/details/:checkpointid/subtasks/:vertexid` | `TaskCheckpointStatisticsWithSubtaskDetails` |
//! | POST | `/jobs/:jobid/savepoints` | 202 `TriggerResponse` |
//! | GET | `/jobs/:jobid/savepoints/:triggerid` | `AsynchronousOperationResult` (`SavepointInfo`) |
//! | POST | `/jobs/:jobid/stop` | 202 `TriggerResponse` |

pub mod body;
pub mod checkpoints;
pub mod cluster;
pub mod dashboard;
pub mod guard;
pub mod jobs;
pub mod operations;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_checkpoint::CheckpointStats;
use weir_core::CheckpointId;
use weir_runtime::{JobHandle, RequestStatus};

use crate::config::RestConfig;
use crate::error::ApiError;
use crate::ids::{parse_job_id, shorten};
use crate::operations::{OperationKind, Operations};
use crate::rates::Rates;
use crate::schema::checkpoints::KnownCheckpoint;
use crate::schema::JSON_CONTENT_TYPE;

/// What every handler shares.
pub struct AppState {
    pub job: JobHandle,
    pub config: RestConfig,
    pub max_parallelism: u32,
    pub operations: Operations,
    pub rates: Rates,
    /// Savepoint locations and stop-with-savepoint ids, by checkpoint.
    pub known: Mutex<HashMap<CheckpointId, KnownCheckpoint>>,
}

pub type Shared = Arc<AppState>;

impl AppState {
    pub fn new(job: JobHandle, config: RestConfig, max_parallelism: u32) -> AppState {
        AppState {
            job,
            config,
            max_parallelism,
            operations: Operations::default(),
            rates: Rates::default(),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The job, if `id` names it: 400 for a malformed id, 404 for another job.
    pub fn job(&self, id: &str) -> Result<&JobHandle, ApiError> {
        let parsed = parse_job_id(id)?;
        if parsed != self.job.id() {
            return Err(ApiError::not_found(format!(
                "Job {} not found: this server runs job {} ({})",
                shorten(id),
                self.job.id(),
                self.job.name()
            )));
        }
        Ok(&self.job)
    }

    /// The coordinator's statistics. Asking the coordinator can take a moment, so this runs
    /// off the async workers.
    pub async fn stats(&self) -> Result<CheckpointStats, ApiError> {
        let job = self.job.clone();
        let history = self.job.checkpoint_config().history_size;
        tokio::task::spawn_blocking(move || job.checkpoint_stats())
            .await
            .map_err(|e| ApiError::internal(format!("reading checkpoint statistics failed: {e}")))
            .map(|s| s.unwrap_or_else(|| CheckpointStats::new(history)))
    }

    /// Remembers what a finished operation tells about its checkpoint (a savepoint's
    /// location, a stop), for the statistics.
    pub fn learn(&self, kind: OperationKind, status: &RequestStatus) {
        if let RequestStatus::Completed {
            checkpoint,
            location,
        } = status
        {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            let entry = known.entry(*checkpoint).or_default();
            if location.is_some() {
                entry.location = location.clone();
            }
            entry.stopped_job |= kind == OperationKind::StopWithSavepoint;
        }
    }

    /// Learns from every remembered operation that finished.
    pub fn learn_all(&self) {
        for (kind, request) in self.operations.all() {
            if let Some(status) = self.job.request(request) {
                self.learn(kind, &status);
            }
        }
    }

    pub fn known(&self) -> HashMap<CheckpointId, KnownCheckpoint> {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A JSON answer with Flink's content type; never cached (the dashboard polls).
pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = (status, bytes).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(e) => ApiError::internal(format!("could not encode the answer: {e}")).into_response(),
    }
}

/// Path parameters, or a 400 that says what was wrong with them.
pub fn path<T>(extracted: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    extracted
        .map(|Path(p)| p)
        .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())))
}

/// Flink's API routes, mounted bare and under `/v1`.
fn api() -> Router<Shared> {
    use axum::routing::post;
    Router::new()
        .route("/config", get(cluster::config))
        .route("/overview", get(cluster::overview))
        .route("/jobs", get(jobs::list))
        .route("/jobs/overview", get(jobs::overview))
        .route("/jobs/{jobid}", get(jobs::details).patch(jobs::terminate))
        .route("/jobs/{jobid}/exceptions", get(jobs::exceptions))
        .route(
            "/jobs/{jobid}/checkpoints",
            get(checkpoints::statistics).post(operations::trigger_checkpoint),
        )
        .route("/jobs/{jobid}/checkpoints/config", get(checkpoints::config))
        .route(
            "/jobs/{jobid}/checkpoints/{triggerid}",
            get(operations::checkpoint_status),
        )
        .route(
            "/jobs/{jobid}/checkpoints/details/{checkpointid}",
            get(checkpoints::details),
        )
        .route(
            "/jobs/{jobid}/checkpoints/details/{checkpointid}/subtasks/{vertexid}",
            get(checkpoints::subtasks),
        )
        .route(
            "/jobs/{jobid}/savepoints",
            post(operations::trigger_savepoint),
        )
        .route(
            "/jobs/{jobid}/savepoints/{triggerid}",
            get(operations::savepoint_status),
        )
        .route("/jobs/{jobid}/stop", post(operations::stop))
}

/// The whole application: API, dashboard and metrics behind the guards.
pub fn router(state: Shared) -> Router {
    Router::new()
        .merge(dashboard::routes())
        .route("/metrics", get(metrics))
        .merge(api())
        .nest("/v1", api())
        .fallback(not_found)
        .layer(axum::middleware::from_fn(guard::json_errors))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("Not found: {}", shorten(uri.path())))
}

async fn metrics(State(state): State<Shared>) -> Result<Response, ApiError> {
    let stats = state.stats().await?;
    let text = crate::metrics::render(&state.job, &stats, &state.rates);
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}
