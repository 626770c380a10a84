//! Weir's cluster mode: one job spread over several processes and machines.
//!
//! # Processes
//!
//! A **job manager** (`weir jobmanager`) runs the checkpoint coordinator and the executor's
//! supervision — the same code as local mode — and deploys each attempt of the job on the
//! slots of its **task managers** (`weir taskmanager`), which run the subtasks. A Rust job is
//! compiled code, so every process runs the same binary and builds the same job graph from the
//! same job arguments, which the job manager hands to each task manager when it registers.
//!
//! # Planes
//!
//! - **Control** ([`jobmanager`], [`taskmanager`], gRPC via tonic; messages in
//!   `proto/cluster.proto`): register and heartbeat, deploy, task controls (trigger checkpoint,
//!   notify complete or aborted, cancel, shut down), reports (acknowledge, decline, task status,
//!   job events). The coordinator's driver reaches a remote subtask through a
//!   [`weir_runtime::control::ControlSender::Remote`]; acknowledgements reach the driver on the
//!   same channel as in local mode.
//! - **Data** ([`net`]): TCP between task managers, one connection per pair and attempt,
//!   credit-based flow control per channel; channels within one task manager stay in memory.
//!   Barriers and watermarks travel in-band on both.
//!
//! # Failure
//!
//! A task manager whose session breaks or whose heartbeats stop is lost; the attempt fails, and
//! the executor's restart strategy redeploys the whole job on the remaining slots (waiting for
//! new task managers if there are too few) from the latest completed checkpoint.

mod deployer;
pub mod error;
pub mod ha;
pub mod jobmanager;
pub mod net;
pub mod taskmanager;
pub mod wire;

/// The control plane's messages and gRPC service, generated from `proto/cluster.proto` by
/// `scripts/gen-proto.sh`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!("proto/weir.cluster.v1.rs");
}

pub use error::ClusterError;
