//! `weir jobmanager` and `weir taskmanager`: one job over several processes.
//!
//! Application mode: `weir jobmanager [options] -- run wordcount <its usual flags>` runs that
//! job with its subtasks on the task managers that register (`weir taskmanager --jobmanager
//! HOST:PORT --slots N`). Each task manager gets the job's flags from the job manager and
//! builds the same job graph from them: paths in them must mean the same on every machine.
//!
//! Both listen on loopback unless the cluster has mutual TLS (`-D
//! security.ssl.internal.enabled=true` with each process's certificate and key and the
//! cluster's CA) or a secret (`-D security.internal.secret…` or `WEIR_CLUSTER_SECRET`, the same
//! on every process); these options stay out of the job's flags, which travel to every task
//! manager.

use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use weir_cluster::jobmanager::{JobManager, JobManagerOptions};
use weir_cluster::leadership::{run_as_leader, LeaderOutcome};
use weir_cluster::security::{ClusterSecret, SECRET_ENV};
use weir_cluster::taskmanager::{run_task_manager, TaskManagerExit, TaskManagerOptions};
use weir_cluster::tls::ClusterTls;
use weir_core::config::{Config, HighAvailabilityConfig};
use weir_runtime::graph::JobGraph;
use weir_runtime::ExecutionConfig;
use weir_runtime::StopHandle;

use crate::runnable::ClusterJob;
use crate::CliError;

#[derive(Args, Debug)]
pub struct JobManagerArgs {
    /// The control plane's port (jobmanager.rpc.port); 0 picks a free one.
    #[arg(long, default_value_t = 6123)]
    pub rpc_port: u16,
    /// The address the control plane listens on (jobmanager.bind-host); any other than
    /// loopback needs mutual TLS (-D security.ssl.internal.enabled=true …) or the cluster's
    /// secret (-D security.internal.secret-file=FILE, or WEIR_CLUSTER_SECRET).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Deploy the job once this many task managers registered (and offer enough slots); after
    /// a failure, the job is redeployed as soon as the slots suffice.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub wait_for_task_managers: u32,
    /// Set a cluster option, e.g. -D heartbeat.timeout=10s (the job's own options go after --).
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub define: Vec<String>,
    /// The job and its flags, after `--`: for example `-- run wordcount --input … --output …`.
    #[arg(last = true, required = true, value_name = "JOB")]
    pub job: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TaskManagerArgs {
    /// The job manager's control plane (host:port).
    #[arg(long, value_name = "HOST:PORT")]
    pub jobmanager: String,
    /// Subtask slots: slot i runs subtask i of every operator (taskmanager.numberOfTaskSlots).
    #[arg(long, default_value_t = 1)]
    pub slots: u32,
    /// The data plane's port (taskmanager.data.port); 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    pub data_port: u16,
    /// The host other task managers reach this one at (taskmanager.host); the data plane
    /// listens on it (on every interface for a name other than localhost), and beyond
    /// loopback only with mutual TLS or the cluster's secret.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// This task manager's id in the cluster; `<host>:<data port>` by default.
    #[arg(long)]
    pub id: Option<String>,
    /// How long to keep trying to reach the job manager.
    #[arg(long, default_value = "60s", value_parser = crate::args::duration_arg)]
    pub connect_timeout: Duration,
    /// Set an option of the job on this task manager only (after the job manager's), e.g.
    /// -D s3.endpoint=http://10.0.0.5:9000 where the store has another address; and
    /// heartbeat.timeout, how long a silent job manager is waited for before this task manager
    /// cancels its subtasks and looks for one again (10s by default).
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub define: Vec<String>,
}

/// The options of `-D KEY=VALUE` flags; unknown options and malformed flags are refused.
fn options_of(defines: &[String]) -> Result<Config, CliError> {
    let mut config = Config::new();
    for define in defines {
        let (key, value) = define
            .split_once('=')
            .ok_or_else(|| CliError::usage(format!("-D {define}: expected KEY=VALUE")))?;
        config.set(key.trim(), value.trim())?;
    }
    Ok(config)
}

/// The options of the cluster's own security: each process's own, never the job's.
const SECURITY_OPTIONS: [&str; 2] = ["security.internal.", "security.ssl.internal."];

/// Whether a -D flag sets the cluster's secret or its TLS.
fn is_secret_option(define: &str) -> bool {
    let define = define.trim_start();
    SECURITY_OPTIONS.iter().any(|o| define.starts_with(o))
}

/// The job's own -D flags among a process's, as -D arguments.
fn job_defines(defines: &[String]) -> Vec<String> {
    defines
        .iter()
        .filter(|d| !is_secret_option(d))
        .flat_map(|d| ["-D".to_string(), d.clone()])
        .collect()
}

/// The cluster's secret, from the -D options or the environment.
fn cluster_secret(config: &Config) -> Result<Option<ClusterSecret>, CliError> {
    ClusterSecret::from_config(config, std::env::var(SECRET_ENV).ok())
        .map_err(|e| CliError::usage(e.to_string()))
}

/// The cluster's mutual TLS, from the -D options: its files are read and checked now.
fn cluster_tls(config: &Config) -> Result<Option<ClusterTls>, CliError> {
    ClusterTls::from_config(config).map_err(|e| CliError::usage(e.to_string()))
}

/// `heartbeat.timeout` unless set: how long a job manager waits for a task manager's
/// heartbeat, and a task manager for the job manager's answers.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster options of the job manager, from its -D flags.
fn job_manager_options(args: &JobManagerArgs) -> Result<JobManagerOptions, CliError> {
    let config = options_of(&args.define)?;
    let duration = |key: &str, default: Duration| -> Result<Duration, CliError> {
        Ok(config.get_duration(key)?.unwrap_or(default))
    };
    let options = JobManagerOptions {
        rpc_address: SocketAddr::new(args.bind, args.rpc_port),
        secret: cluster_secret(&config)?,
        tls: cluster_tls(&config)?,
        job_args: args.job.clone(),
        heartbeat_interval: duration("heartbeat.interval", Duration::from_secs(1))?,
        heartbeat_timeout: duration("heartbeat.timeout", HEARTBEAT_TIMEOUT)?,
        slot_timeout: duration("slot.request.timeout", Duration::from_secs(300))?,
        min_task_managers: args.wait_for_task_managers,
        standby: false,
    };
    JobManager::check_bind(&options).map_err(|e| CliError::usage(e.to_string()))?;
    if options.heartbeat_interval.is_zero()
        || options.heartbeat_timeout <= options.heartbeat_interval
    {
        return Err(CliError::usage(format!(
            "heartbeat.timeout ({} ms) must be longer than heartbeat.interval ({} ms), which must be above 0",
            options.heartbeat_timeout.as_millis(),
            options.heartbeat_interval.as_millis()
        )));
    }
    Ok(options)
}

/// Finds the job a cluster runs from its flags after `--` (`run wordcount …`): the jobs that
/// run by name are listed in `registry.rs`.
pub type FindJob = fn(&[String]) -> Result<Box<dyn ClusterJob>, CliError>;

/// Builds the job as a task manager does.
fn build_job(find: FindJob, job: &[String]) -> Result<(JobGraph, ExecutionConfig), String> {
    let job = find(job).map_err(|e| e.message)?;
    job.build().map_err(|e| e.message)
}

pub fn job_manager(args: JobManagerArgs, find: FindJob) -> Result<(), CliError> {
    let mut options = job_manager_options(&args)?;
    if args
        .job
        .iter()
        .any(|a| SECURITY_OPTIONS.iter().any(|o| a.contains(o)))
    {
        return Err(CliError::usage(
            "the cluster's secret and TLS options go before --, not among the job's flags: those are sent to every task manager",
        ));
    }
    let mut job = find(&args.job)?;
    if job.takes_options() {
        // The job manager's -D options are the job's too: every option can be given on any
        // command line, and the task managers get them with the job's flags.
        // The secret and TLS are not among them: the job does not need them, and the task
        // managers have their own.
        let defines: Vec<String> = args
            .define
            .iter()
            .filter(|d| !is_secret_option(d))
            .cloned()
            .collect();
        job.add_options(&defines);
        options.job_args.extend(job_defines(&args.define));
    } else {
        // A job without options of its own: only the cluster's apply.
        let cluster_options = [
            "heartbeat.",
            "slot.request.timeout",
            "security.internal.",
            "security.ssl.internal.",
        ];
        if let Some(d) = args
            .define
            .iter()
            .find(|d| !cluster_options.iter().any(|o| d.trim().starts_with(o)))
        {
            return Err(CliError::usage(format!(
                "-D {d}: `{}` on a cluster takes only the cluster's options (heartbeat.*, slot.request.timeout, security.internal.*, security.ssl.internal.*)",
                job.command()
            )));
        }
    }
    // Fail on bad job flags here, before any task manager is involved.
    let ha = job.prepare()?;
    options.standby = !matches!(ha, HighAvailabilityConfig::None);
    let jm = JobManager::start(options).map_err(|e| CliError::usage(e.to_string()))?;
    eprintln!("job manager listening on {}", jm.address());
    let stop = StopHandle::new();
    if job.stops_on_interrupt() {
        let on_interrupt = stop.clone();
        let _ = ctrlc::set_handler(move || on_interrupt.stop());
    }
    let result = match ha {
        HighAvailabilityConfig::None => job.run_on(&mut jm.deployer(), None, &stop),
        HighAvailabilityConfig::ZooKeeper(zk) => {
            let outcome = run_as_leader(&jm, &zk, job.job_name(), &stop, |deployer, ha, term| {
                job.run_on(deployer, Some(ha), term)
            })
            .map_err(|e| CliError::usage(e.to_string()))?;
            match outcome {
                LeaderOutcome::Ran(result) => result,
                LeaderOutcome::Stopped => Ok(()),
                LeaderOutcome::AlreadyEnded(status) if status == "FINISHED" => Ok(()),
                LeaderOutcome::AlreadyEnded(status) => Err(CliError {
                    message: format!("the job already ended: {status} (recorded in ZooKeeper)"),
                    code: 1,
                }),
            }
        }
    };
    jm.finish(if result.is_ok() { "FINISHED" } else { "FAILED" });
    result
}

pub fn task_manager(args: TaskManagerArgs, find: FindJob) -> Result<(), CliError> {
    // Listen on the advertised address when it is one; on every interface for a host name.
    let ip = match args.host.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) if args.host.eq_ignore_ascii_case("localhost") => IpAddr::from([127, 0, 0, 1]),
        Err(_) => IpAddr::from([0, 0, 0, 0]),
    };
    let data_bind = SocketAddr::new(ip, args.data_port);
    // Bad options are refused now, not when the job manager sends the job.
    let config = options_of(&args.define)?;
    let heartbeat_timeout = config
        .get_duration("heartbeat.timeout")?
        .unwrap_or(HEARTBEAT_TIMEOUT);
    if heartbeat_timeout.is_zero() {
        return Err(CliError::usage("heartbeat.timeout must be above 0"));
    }
    let options = TaskManagerOptions {
        job_manager: args.jobmanager.clone(),
        id: args.id.clone().unwrap_or_default(),
        slots: args.slots,
        data_bind,
        data_host: args.host.clone(),
        connect_timeout: args.connect_timeout,
        heartbeat_timeout,
        secret: cluster_secret(&config)?,
        tls: cluster_tls(&config)?,
    };
    let defines = job_defines(&args.define);
    let build = move |job: &[String]| {
        let mut job = job.to_vec();
        job.extend(defines.iter().cloned());
        build_job(find, &job)
    };
    match run_task_manager(options, &build) {
        Ok(TaskManagerExit::JobEnded(status)) => {
            eprintln!("task manager: the job ended ({status})");
            Ok(())
        }
        Err(
            e @ (weir_cluster::ClusterError::Config(_) | weir_cluster::ClusterError::Insecure(_)),
        ) => Err(CliError::usage(e.to_string())),
        Err(e) => Err(CliError {
            message: e.to_string(),
            code: 1,
        }),
    }
}
