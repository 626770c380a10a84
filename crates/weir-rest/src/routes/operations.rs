//! Triggering checkpoints, savepoints and stops, and polling their status by trigger id.
//!
//! A trigger is checked completely — job, body, savepoint target, trigger id — before the job
//! is asked for anything, so a refused request never starts a checkpoint. A job that is not
//! running answers 409. The operation then runs in the job; its status is polled under
//! `/checkpoints/:triggerid` or `/savepoints/:triggerid`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use std::path::PathBuf;
use weir_checkpoint::RequestId;
use weir_core::SavepointFormat;
use weir_runtime::handle::HandleError;
use weir_runtime::{Drain, JobHandle, RequestStatus};

use super::body::JsonBody;
use super::{json, path, Shared};
use crate::error::ApiError;
use crate::ids::TriggerId;
use crate::java_throwable::SerializedThrowable;
use crate::operations::{Namespace, OperationKind, Registered};
use crate::savepoint_target::{absolute_lexical, resolve_target};
use crate::schema::operations::{
    check_enum, AsynchronousOperationResult, CheckpointInfo, CheckpointTriggerRequest,
    SavepointInfo, SavepointTriggerRequest, StopWithSavepointRequest, TriggerResponse,
};
use crate::schema::{is_terminal, job_status_name};

const FORMAT_TYPES: &[&str] = &["CANONICAL", "NATIVE"];
const CHECKPOINT_TYPES: &[&str] = &["CONFIGURED", "FULL", "INCREMENTAL"];

fn accepted(id: TriggerId) -> Response {
    json(
        StatusCode::ACCEPTED,
        &TriggerResponse {
            request_id: id.to_string(),
        },
    )
}

fn refused(job: &JobHandle, e: HandleError) -> ApiError {
    match e {
        HandleError::NotRunning(status) => ApiError::conflict(format!(
            "job {} is {}: checkpoints and savepoints can be taken only while it is RUNNING",
            job.id(),
            job_status_name(status)
        )),
        HandleError::Timeout => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("job {} did not answer in time; try again", job.id()),
        ),
    }
}

/// The trigger id to use: the caller's (validated) or a fresh one, and whether it is new.
fn trigger_id(
    state: &Shared,
    given: Option<&str>,
    kind: OperationKind,
) -> Result<(TriggerId, Option<RequestId>), ApiError> {
    let id = match given {
        Some(text) => TriggerId::parse(text)?,
        None => TriggerId::random(),
    };
    match state.operations.check(id, kind) {
        Registered::New => Ok((id, None)),
        Registered::Existing(request) => Ok((id, Some(request))),
        Registered::Conflict(other) => Err(ApiError::conflict(format!(
            "trigger id {id} is already used by a {other:?} operation"
        ))),
    }
}

fn bad(message: String) -> ApiError {
    ApiError::bad_request(message)
}

pub async fn trigger_checkpoint(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<CheckpointTriggerRequest>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    check_enum(
        "checkpointType",
        body.checkpoint_type.as_deref(),
        CHECKPOINT_TYPES,
    )
    .map_err(bad)?;
    let kind = OperationKind::Checkpoint;
    let (id, existing) = trigger_id(&state, body.trigger_id.as_deref(), kind)?;
    if existing.is_none() {
        let request = job.trigger_checkpoint().map_err(|e| refused(job, e))?;
        state.operations.insert(id, kind, request);
        tracing::info!(job = %job.id(), trigger = %id, "checkpoint requested");
    }
    Ok(accepted(id))
}

/// A savepoint (`cancel-job: true` stops the job after it).
pub async fn trigger_savepoint(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<SavepointTriggerRequest>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    let format = format(body.format_type.as_deref())?;
    let target = target(&state, body.target_directory.as_deref())?;
    let kind = if body.cancel_job == Some(true) {
        OperationKind::StopWithSavepoint
    } else {
        OperationKind::Savepoint
    };
    savepoint(
        &state,
        job,
        kind,
        target,
        format,
        Drain::Keep,
        body.trigger_id.as_deref(),
    )
}

pub async fn stop(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<StopWithSavepointRequest>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    let format = format(body.format_type.as_deref())?;
    let target = target(&state, body.target_directory.as_deref())?;
    let kind = OperationKind::StopWithSavepoint;
    let drain = if body.drain == Some(true) {
        Drain::EndEventTime
    } else {
        Drain::Keep
    };
    savepoint(
        &state,
        job,
        kind,
        target,
        format,
        drain,
        body.trigger_id.as_deref(),
    )
}

/// The savepoint directory for a request: the validated target, or the default one — made
/// absolute, so that the location reported back is a full path.
fn target(state: &Shared, requested: Option<&str>) -> Result<Option<PathBuf>, ApiError> {
    let config = &state.config;
    let default = config.default_savepoint_dir.as_deref();
    let target = resolve_target(requested, &config.allowed_roots(), default)?;
    match (target, default) {
        (None, Some(default)) => absolute_lexical(default).map(Some),
        (target, _) => Ok(target),
    }
}

/// The savepoint format a request names (`formatType`; canonical when it names none).
fn format(requested: Option<&str>) -> Result<SavepointFormat, ApiError> {
    check_enum("formatType", requested, FORMAT_TYPES).map_err(bad)?;
    Ok(requested
        .and_then(SavepointFormat::from_flink)
        .unwrap_or_default())
}

fn savepoint(
    state: &Shared,
    job: &JobHandle,
    kind: OperationKind,
    target: Option<PathBuf>,
    format: SavepointFormat,
    drain: Drain,
    given_trigger: Option<&str>,
) -> Result<Response, ApiError> {
    let (id, existing) = trigger_id(state, given_trigger, kind)?;
    if existing.is_none() {
        let shown = target
            .as_ref()
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        let request = match kind {
            OperationKind::StopWithSavepoint => job.stop_with_savepoint(target, format, drain),
            _ => job.trigger_savepoint(target, format),
        }
        .map_err(|e| refused(job, e))?;
        state.operations.insert(id, kind, request);
        tracing::info!(job = %job.id(), trigger = %id, target = %shown, ?kind, ?format, "savepoint requested");
    }
    Ok(accepted(id))
}

/// Where request `request` stands; one still in progress when the job has ended never will
/// complete, and is reported as failed.
pub fn outcome(job: &JobHandle, request: RequestId) -> RequestStatus {
    match job.request(request) {
        Some(RequestStatus::InProgress) | None if is_terminal(job.status()) => {
            RequestStatus::Failed(format!(
                "the job ended ({}) before the operation completed",
                job_status_name(job.status())
            ))
        }
        Some(status) => status,
        None => RequestStatus::InProgress,
    }
}

/// The operation polled as `namespace`/`triggerid` of the job, and its status.
fn polled(
    state: &Shared,
    params: Result<Path<(String, String)>, PathRejection>,
    namespace: Namespace,
) -> Result<(OperationKind, RequestStatus, TriggerId), ApiError> {
    let (jobid, triggerid) = path(params)?;
    let job = state.job(&jobid)?;
    let id = TriggerId::parse(&triggerid)?;
    let what = match namespace {
        Namespace::Checkpoints => "checkpoint",
        Namespace::Savepoints => "savepoint",
    };
    let (kind, request) = state.operations.find(namespace, id).ok_or_else(|| {
        ApiError::not_found(format!(
            "There is no {what} operation with triggerId={id} for job {}",
            job.id()
        ))
    })?;
    let status = outcome(job, request);
    if status != RequestStatus::InProgress {
        state.learn(kind, &status);
        state.operations.mark_reported(namespace, id);
    }
    Ok((kind, status, id))
}

pub async fn checkpoint_status(
    State(state): State<Shared>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (_, status, _) = polled(&state, params, Namespace::Checkpoints)?;
    let result = match status {
        RequestStatus::InProgress => AsynchronousOperationResult::in_progress(),
        RequestStatus::Completed { checkpoint, .. } => {
            AsynchronousOperationResult::completed(CheckpointInfo {
                checkpoint_id: Some(crate::schema::clamp(checkpoint.0)),
                failure_cause: None,
            })
        }
        RequestStatus::Failed(reason) => AsynchronousOperationResult::completed(CheckpointInfo {
            checkpoint_id: None,
            failure_cause: Some(SerializedThrowable::new(&reason)),
        }),
    };
    Ok(json(StatusCode::OK, &result))
}

pub async fn savepoint_status(
    State(state): State<Shared>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (_, status, _) = polled(&state, params, Namespace::Savepoints)?;
    let result = match status {
        RequestStatus::InProgress => AsynchronousOperationResult::in_progress(),
        RequestStatus::Completed {
            location,
            checkpoint,
        } => AsynchronousOperationResult::completed(SavepointInfo {
            location: Some(
                location
                    .map(|l| l.display().to_string())
                    .unwrap_or_else(|| format!("<savepoint of checkpoint {}>", checkpoint.0)),
            ),
            failure_cause: None,
        }),
        RequestStatus::Failed(reason) => AsynchronousOperationResult::completed(SavepointInfo {
            location: None,
            failure_cause: Some(SerializedThrowable::new(&reason)),
        }),
    };
    Ok(json(StatusCode::OK, &result))
}
