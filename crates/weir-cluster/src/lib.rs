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
//! # Security
//!
//! A port beyond loopback needs mutual TLS ([`tls`]) or the cluster's shared secret
//! ([`security`]), or both. With TLS, every process presents a certificate of the cluster's CA
//! and accepts only peers that do, and both planes are encrypted; with the secret, the job
//! manager accepts only calls that prove they know it, and task managers exchange data only
//! with peers that do.
//!
//! # A job of your own on a cluster
//!
//! A job is compiled code, so a binary built on the Weir library serves the same two roles
//! itself: every process builds the graph from the same job arguments.
//!
//! ```no_run
//! use std::time::Duration;
//! use weir_cluster::jobmanager::{JobManager, JobManagerOptions};
//! use weir_cluster::security::ClusterSecret;
//! use weir_cluster::taskmanager::{run_task_manager, TaskManagerOptions};
//! use weir_cluster::tls::ClusterTls;
//! use weir_runtime::graph::JobGraph;
//! use weir_runtime::{execute_with, ExecutionConfig, JobHandle, StopHandle};
//!
//! /// The job, from its arguments (the same on every process).
//! fn build(args: &[String]) -> Result<(JobGraph, ExecutionConfig), String> {
//!     unimplemented!("StreamEnv::new(…) … env.build()")
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let role = std::env::args().nth(1).unwrap_or_default();
//!     let job_args: Vec<String> = std::env::args().skip(2).collect();
//!     // Each process's certificate and key, and the cluster's CA; without TLS or a secret
//!     // (the same on every machine), only 127.0.0.1 may be bound.
//!     let tls = Some(ClusterTls::from_files(
//!         "/etc/weir/tls/process.crt".as_ref(),
//!         "/etc/weir/tls/process.key".as_ref(),
//!         "/etc/weir/tls/ca.crt".as_ref(),
//!     )?);
//!     let secret: Option<ClusterSecret> = None;
//!     if role == "jobmanager" {
//!         let (graph, config) = build(&job_args)?;
//!         let jm = JobManager::start(JobManagerOptions {
//!             rpc_address: "0.0.0.0:6123".parse()?,
//!             secret,
//!             tls,
//!             job_args,
//!             heartbeat_interval: Duration::from_secs(1),
//!             heartbeat_timeout: Duration::from_secs(10),
//!             slot_timeout: Duration::from_secs(300),
//!             min_task_managers: 2,
//!             standby: false, // true with high availability: see leadership::run_as_leader
//!         })?;
//!         let handle = JobHandle::new(&graph, &config.checkpoint, StopHandle::new());
//!         let result =
//!             execute_with(&graph, &config, &handle, &mut |_| {}, &mut jm.deployer(), None);
//!         jm.finish(if result.is_ok() { "FINISHED" } else { "FAILED" });
//!         result?;
//!     } else {
//!         let options = TaskManagerOptions {
//!             job_manager: "jobmanager:6123".into(),
//!             id: String::new(), // host:data port
//!             slots: 2,
//!             data_bind: "0.0.0.0:6121".parse()?,
//!             data_host: "10.0.0.11".into(),
//!             connect_timeout: Duration::from_secs(60),
//!             heartbeat_timeout: Duration::from_secs(10),
//!             secret,
//!             tls,
//!         };
//!         run_task_manager(options, &build)?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Failure
//!
//! A task manager whose session breaks or whose heartbeats stop is lost; the attempt fails, and
//! the executor's restart strategy redeploys the whole job on the remaining slots (waiting for
//! new task managers if there are too few) from the latest completed checkpoint. A task manager
//! in turn gives up a job manager that stops answering its keepalive pings for
//! `heartbeat_timeout`: it cancels its subtasks and looks for a job manager again, so that a
//! partition leaves no subtask running for a job manager that is gone.

pub mod error;
pub mod ha;
pub mod jobmanager;
pub mod leadership;
pub mod net;
pub mod security;
pub mod taskmanager;
pub mod tls;
pub mod wire;

/// The control plane's messages and gRPC service, generated from `proto/cluster.proto` by
/// `scripts/gen-proto.sh`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!("proto/weir.cluster.v1.rs");
}

pub use error::ClusterError;
