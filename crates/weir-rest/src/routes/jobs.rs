//! The job routes: `GET /jobs`, `GET /jobs/overview`, `GET /jobs/:jobid`,
//! `PATCH /jobs/:jobid` (cancel) and `GET /jobs/:jobid/exceptions`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::{json, path, Shared};
use crate::error::ApiError;
use crate::ids::shorten;
use crate::schema::{is_terminal, job_status_name, jobs};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub async fn list(State(state): State<Shared>) -> Response {
    json(StatusCode::OK, &jobs::ids_with_status(&state.job))
}

pub async fn overview(State(state): State<Shared>) -> Response {
    json(StatusCode::OK, &jobs::overview(&state.job, now_ms()))
}

pub async fn details(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    Ok(json(
        StatusCode::OK,
        &jobs::details(job, state.max_parallelism, now_ms()),
    ))
}

pub async fn exceptions(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    Ok(json(StatusCode::OK, &jobs::exceptions(job)))
}

/// How `PATCH /jobs/:jobid` was asked to end the job.
fn termination_mode(query: Option<&str>) -> Result<(), ApiError> {
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "mode" {
            continue;
        }
        match value.to_ascii_lowercase().as_str() {
            "cancel" => {}
            "stop" => {
                return Err(ApiError::bad_request(
                    "mode=stop is not supported: stop a job with POST /jobs/:jobid/stop, which \
                     takes a savepoint",
                ))
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "invalid mode '{}': the only supported value is 'cancel'",
                    shorten(other)
                )))
            }
        }
    }
    Ok(())
}

/// Cancels the job: no final checkpoint; the latest completed checkpoint stands.
pub async fn terminate(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    termination_mode(query.as_deref())?;
    let status = job.status();
    if is_terminal(status) {
        return Err(ApiError::conflict(format!(
            "job {} is already {}",
            job.id(),
            job_status_name(status)
        )));
    }
    tracing::info!(job = %job.id(), "cancelling the job on request");
    job.cancel();
    Ok(json(StatusCode::ACCEPTED, &serde_json::json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_is_the_default_and_only_termination_mode() {
        assert!(termination_mode(None).is_ok());
        assert!(termination_mode(Some("mode=cancel")).is_ok());
        assert!(termination_mode(Some("mode=CANCEL&x=1")).is_ok());
        assert_eq!(
            termination_mode(Some("mode=stop"))
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
        assert_eq!(
            termination_mode(Some("mode=nuke"))
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
    }
}
