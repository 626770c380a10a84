//! Weir's REST API, web dashboard and metrics: how people and tools look at a running job.
//!
//! # Role in the flows
//!
//! A running job is seen and steered through its [`weir_runtime::JobHandle`]. This crate serves
//! that handle over HTTP, beside the job, on a thread of its own ([`RestServer`]):
//!
//! - **Flink's REST API v1** (a subset, [`routes`]): the same paths, field names, JSON types
//!   and status codes as Flink's published `rest_v1_dispatcher` specification, bare and under
//!   `/v1`, so Flink's own command line (`flink list`, `flink savepoint`, `flink stop`,
//!   `flink cancel`) works against a Weir job. Checkpoint statistics come from the
//!   coordinator's `CheckpointStats` ([`schema::checkpoints`]). Triggering a checkpoint, a
//!   savepoint or a stop with savepoint (flow 1, "Trigger … REST or CLI") returns a trigger id
//!   whose status is polled ([`operations`]).
//! - **A dashboard** at `/` ([`routes::dashboard`]): one page, embedded in the binary, that
//!   polls the REST API — job graph with records/s, checkpoint history, charts, per-subtask
//!   details, failures, and buttons to checkpoint, savepoint and stop.
//! - **Prometheus metrics** at `/metrics` ([`metrics`]) under Flink's metric names.
//!
//! Safety: the server binds to loopback unless told otherwise, and refuses another address
//! without a bearer token ([`RestConfig::validate`]); savepoint targets in requests must lie
//! under configured roots ([`savepoint_target`]); every bad request gets a 4xx answer in
//! Flink's `{"errors": [...]}` form and never disturbs the job.
//!
//! [`client`] is the small blocking client the `weir` command line uses to talk to it.
//!
//! ```no_run
//! use weir_rest::{RestConfig, RestServer};
//! # fn run(handle: weir_runtime::JobHandle) -> Result<(), weir_rest::StartError> {
//! let server = RestServer::start(RestConfig::default(), handle, 128)?;
//! println!("dashboard: {}", server.url());
//! # Ok(()) }
//! ```

pub mod client;
pub mod config;
pub mod error;
pub mod ids;
pub mod java_throwable;
pub mod metrics;
pub mod operations;
pub mod rates;
pub mod routes;
pub mod savepoint_target;
pub mod schema;
pub mod server;

pub use client::{ClientError, RestClient};
pub use config::RestConfig;
pub use error::{ApiError, StartError};
pub use server::RestServer;
