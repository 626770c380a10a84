//! The REST flags of a running job (`--rest-port`, `--rest-bind`, `--rest-token`, `--no-rest`,
//! `--savepoint-root`) and starting the REST server, dashboard and metrics beside the job.

use clap::Args;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;
use weir_rest::config::DEFAULT_PORT;
use weir_rest::{RestConfig, RestServer};
use weir_runtime::deploy::LocalDeployer;
use weir_runtime::graph::JobGraph;
use weir_runtime::{execute_with, ExecutionConfig, JobHandle, JobSummary, StopHandle};

use crate::CliError;

/// The environment variable that may hold the REST token (kept out of `ps` output).
pub const TOKEN_ENV: &str = "WEIR_REST_TOKEN";

/// How long a stopped job keeps answering so its caller can read the savepoint's outcome.
const LINGER: Duration = Duration::from_secs(5);

#[derive(Args, Debug, Clone, Default)]
pub struct RestArgs {
    /// Port of the REST API, dashboard and /metrics [default: 8081]; 0 picks a free port (the
    /// address is printed at start).
    #[arg(long, value_name = "PORT")]
    pub rest_port: Option<u16>,
    /// Address to serve the REST API on [default: 127.0.0.1]; any other address needs
    /// --rest-token.
    #[arg(long, value_name = "ADDR")]
    pub rest_bind: Option<IpAddr>,
    /// A bearer token every REST request must carry (`Authorization: Bearer TOKEN`); also read
    /// from WEIR_REST_TOKEN.
    #[arg(long, value_name = "TOKEN")]
    pub rest_token: Option<String>,
    /// Serve no REST API, dashboard or metrics.
    #[arg(long, conflicts_with_all = ["rest_port", "rest_bind", "rest_token"])]
    pub no_rest: bool,
    /// Another directory REST requests may write savepoints under (repeatable); the savepoint
    /// directory (execution.checkpointing.savepoint-dir) always may.
    #[arg(long, value_name = "DIR")]
    pub savepoint_root: Vec<PathBuf>,
}

impl RestArgs {
    /// The server's settings for a job run with `exec`.
    pub fn config(&self, exec: &ExecutionConfig) -> RestConfig {
        RestConfig {
            bind: self.rest_bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port: self.rest_port.unwrap_or(DEFAULT_PORT),
            token: self
                .rest_token
                .clone()
                .or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())),
            default_savepoint_dir: exec.savepoint_dir.clone(),
            savepoint_roots: self.savepoint_root.clone(),
            ..RestConfig::default()
        }
    }
}

/// The REST server of a running job, if it serves one.
pub struct Served(Option<RestServer>);

impl Served {
    /// After the job ended: keep answering until the outcome of every operation a caller
    /// triggered (a stop's savepoint) was fetched, for at most a few seconds.
    pub fn finish(self) {
        if let Some(server) = self.0 {
            server.linger(LINGER);
            server.shutdown();
        }
    }
}

/// Starts the REST server for `handle` (unless `--no-rest`) and prints its address. An
/// explicit port that is taken, or an unsafe binding, is an error; the default port being
/// taken (another job runs) only skips the server, with a warning.
pub fn serve(
    args: &RestArgs,
    handle: &JobHandle,
    exec: &ExecutionConfig,
    max_parallelism: u32,
) -> Result<Served, CliError> {
    if args.no_rest {
        return Ok(Served(None));
    }
    let config = args.config(exec);
    match RestServer::start(config, handle.clone(), max_parallelism) {
        Ok(server) => {
            println!("REST API and dashboard: {}", server.url());
            Ok(Served(Some(server)))
        }
        Err(e) if e.is_address_in_use() && args.rest_port.is_none() => {
            eprintln!("warning: no REST API for this job: {e}");
            Ok(Served(None))
        }
        Err(e) => Err(CliError::usage(e.to_string())),
    }
}

/// Runs `graph` in this process until it ends or Ctrl-C stops it (with a final checkpoint),
/// serving REST as `args` says, and prints one line about it:
/// `{job} stopped|finished after … s: N {records}, C checkpoints, R restarts`.
pub fn run_local(
    job: &str,
    records: &str,
    graph: &JobGraph,
    exec: &ExecutionConfig,
    args: &RestArgs,
) -> Result<JobSummary, CliError> {
    let stop = StopHandle::new();
    let on_interrupt = stop.clone();
    let _ = ctrlc::set_handler(move || on_interrupt.stop());
    let handle = JobHandle::new(graph, &exec.checkpoint, stop);
    let served = serve(args, &handle, exec, graph.max_parallelism)?;
    let summary = execute_with(graph, exec, &handle, &mut |_| {}, &mut LocalDeployer, None);
    served.finish();
    let summary = summary?;
    println!(
        "{job} {} after {:.1} s: {} {records}, {} checkpoints, {} restarts",
        if summary.cancelled {
            "stopped"
        } else {
            "finished"
        },
        summary.elapsed.as_secs_f64(),
        summary.records,
        summary.checkpoints_completed,
        summary.restarts,
    );
    Ok(summary)
}
