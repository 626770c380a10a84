//! `GET /config` and `GET /overview`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{json, Shared};
use crate::schema::cluster::{ClusterOverviewWithVersion, DashboardConfiguration};

pub async fn config() -> Response {
    json(StatusCode::OK, &DashboardConfiguration::current())
}

pub async fn overview(State(state): State<Shared>) -> Response {
    let subtasks = state
        .job
        .vertices()
        .iter()
        .map(|v| v.parallelism as usize)
        .sum();
    json(
        StatusCode::OK,
        &ClusterOverviewWithVersion::of(state.job.status(), subtasks),
    )
}
