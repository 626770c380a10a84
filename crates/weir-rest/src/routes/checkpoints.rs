//! The checkpoint statistics routes: the overview, the configuration, one checkpoint's details
//! and one vertex's subtasks in one checkpoint.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::{json, path, Shared};
use crate::error::ApiError;
use crate::ids::{parse_checkpoint_id, shorten, vertex_id};
use crate::schema::checkpoints::{CheckpointConfigInfo, CheckpointView};

pub async fn statistics(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    let stats = state.stats().await?;
    state.learn_all();
    let known = state.known();
    let view = CheckpointView {
        job,
        stats: &stats,
        known: &known,
    };
    Ok(json(StatusCode::OK, &view.statistics()))
}

pub async fn config(
    State(state): State<Shared>,
    jobid: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let job = state.job(&path(jobid)?)?;
    Ok(json(
        StatusCode::OK,
        &CheckpointConfigInfo::of(job.checkpoint_config(), job.state_backend()),
    ))
}

pub async fn details(
    State(state): State<Shared>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (jobid, checkpointid) = path(params)?;
    let job = state.job(&jobid)?;
    let id = parse_checkpoint_id(&checkpointid)?;
    let stats = state.stats().await?;
    let known = state.known();
    let view = CheckpointView {
        job,
        stats: &stats,
        known: &known,
    };
    let entry = stats.entry(id).ok_or_else(|| {
        ApiError::not_found(format!(
            "Could not find checkpoint statistics for checkpoint {}: it is unknown or older \
             than the remembered history (web.checkpoints.history)",
            id.0
        ))
    })?;
    Ok(json(StatusCode::OK, &view.entry(entry, true)))
}

pub async fn subtasks(
    State(state): State<Shared>,
    params: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (jobid, checkpointid, vertexid) = path(params)?;
    let job = state.job(&jobid)?;
    let id = parse_checkpoint_id(&checkpointid)?;
    if crate::ids::parse_hex128(&vertexid).is_none() {
        return Err(ApiError::bad_request(format!(
            "invalid vertex id '{}': expected 32 hexadecimal digits",
            shorten(&vertexid)
        )));
    }
    let vertex = job
        .vertices()
        .iter()
        .position(|v| vertex_id(&v.uid) == vertexid.to_ascii_lowercase())
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "Job {} has no vertex {}",
                job.id(),
                shorten(&vertexid)
            ))
        })?;
    let stats = state.stats().await?;
    let known = state.known();
    let view = CheckpointView {
        job,
        stats: &stats,
        known: &known,
    };
    let entry = stats.entry(id).ok_or_else(|| {
        ApiError::not_found(format!(
            "Could not find checkpoint statistics for checkpoint {}",
            id.0
        ))
    })?;
    Ok(json(StatusCode::OK, &view.subtasks(entry, vertex)))
}
