//! `weir jobs`, `weir checkpoint JOB`, `weir savepoint JOB [DIR]`, `weir stop JOB
//! [--savepoint DIR]` and `weir cancel JOB`: steering a running job through its REST API
//! (`--rest URL`), as `flink list|checkpoint|savepoint|stop|cancel` do.

use clap::Args;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_core::SavepointFormat;
use weir_rest::client::DEFAULT_URL;
use weir_rest::{ClientError, RestClient};

use crate::args::duration_arg;
use crate::rest_args::TOKEN_ENV;
use crate::CliError;

/// Where the job's REST API is.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The job's REST API.
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    pub rest: String,
    /// The bearer token the REST API needs, if any; also read from WEIR_REST_TOKEN.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// How long to wait for a checkpoint or savepoint to complete.
    #[arg(long, value_name = "DURATION", default_value = "10min", value_parser = duration_arg)]
    pub timeout: Duration,
}

#[derive(Args, Debug, Clone)]
pub struct JobCommandArgs {
    /// The job: its id (32 hex digits) or its name.
    pub job: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args, Debug, Clone)]
pub struct SavepointArgs {
    /// The job: its id (32 hex digits) or its name.
    pub job: String,
    /// Where to write the savepoint (under the job's savepoint directory or a --savepoint-root
    /// it was started with; relative to this directory); the job's savepoint directory by
    /// default.
    pub dir: Option<String>,
    /// The savepoint's format (Flink's `--type`): `canonical`, every key in the format both
    /// state backends read; or `native`, a RocksDB job's table files as they are (streamed,
    /// never held in memory: for state larger than memory).
    #[arg(long = "type", value_enum, default_value_t = FormatArg::Canonical)]
    pub format: FormatArg,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// A savepoint format on the command line.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatArg {
    Canonical,
    Native,
}

impl From<FormatArg> for SavepointFormat {
    fn from(f: FormatArg) -> SavepointFormat {
        match f {
            FormatArg::Canonical => SavepointFormat::Canonical,
            FormatArg::Native => SavepointFormat::Native,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct StopArgs {
    /// The job: its id (32 hex digits) or its name.
    pub job: String,
    /// Where to write the final savepoint; the job's savepoint directory by default.
    #[arg(long, value_name = "DIR")]
    pub savepoint: Option<String>,
    /// End event time before the savepoint: every window and event-time timer fires and its
    /// output is committed. For a job that is not meant to resume.
    #[arg(long)]
    pub drain: bool,
    /// The final savepoint's format (see `weir savepoint --type`).
    #[arg(long = "type", value_enum, default_value_t = FormatArg::Canonical)]
    pub format: FormatArg,
    #[command(flatten)]
    pub client: ClientArgs,
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        let code = match &e {
            ClientError::BadUrl(_) | ClientError::NoSuchJob(_) => 2,
            ClientError::Refused { status, .. } if (400..500).contains(status) => 2,
            _ => 1,
        };
        CliError {
            message: e.to_string(),
            code,
        }
    }
}

/// A directory named on this command line, absolute: the job resolves paths against its own
/// working directory, which need not be this one.
fn absolute(dir: Option<&str>) -> Option<String> {
    dir.map(|d| {
        let path = std::path::Path::new(d);
        if path.is_absolute() || d.contains("://") || d.starts_with("file:") {
            d.to_string()
        } else {
            std::env::current_dir()
                .map(|cwd| cwd.join(path).display().to_string())
                .unwrap_or_else(|_| d.to_string())
        }
    })
}

fn client(args: &ClientArgs) -> Result<RestClient, CliError> {
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()));
    Ok(RestClient::new(&args.rest, token)?)
}

/// `weir jobs`: the jobs served at `--rest`.
pub fn list(args: ClientArgs) -> Result<(), CliError> {
    let jobs = client(&args)?.jobs()?;
    if jobs.is_empty() {
        println!("No jobs.");
        return Ok(());
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let width = jobs.iter().map(|j| j.name.len()).max().unwrap_or(4).max(4);
    println!("{:<32}  {:<width$}  {:<11}  STARTED", "ID", "NAME", "STATE");
    for j in jobs {
        let ago = if j.start_time_ms >= 0 {
            format!("{} s ago", (now_ms - j.start_time_ms).max(0) / 1000)
        } else {
            "-".into()
        };
        println!("{:<32}  {:<width$}  {:<11}  {ago}", j.id, j.name, j.state);
    }
    Ok(())
}

/// `weir checkpoint JOB`: takes a checkpoint now and waits for it.
pub fn checkpoint(args: JobCommandArgs) -> Result<(), CliError> {
    let c = client(&args.client)?;
    let job = c.resolve_job(&args.job)?;
    let trigger = c.trigger_checkpoint(&job)?;
    eprintln!("Triggered a checkpoint of job {job}; waiting for it to complete…");
    let id = c.wait_checkpoint(&job, &trigger, args.client.timeout)?;
    println!("Checkpoint {id} of job {job} completed.");
    Ok(())
}

/// `weir savepoint JOB [DIR]`: takes a savepoint and prints where it went.
pub fn savepoint(args: SavepointArgs) -> Result<(), CliError> {
    let c = client(&args.client)?;
    let job = c.resolve_job(&args.job)?;
    let target = absolute(args.dir.as_deref());
    let trigger = c.trigger_savepoint(&job, target.as_deref(), args.format.into())?;
    eprintln!("Triggered a savepoint of job {job}; waiting for it to complete…");
    let location = c.wait_savepoint(&job, &trigger, args.client.timeout)?;
    println!("Savepoint completed: {location}");
    Ok(())
}

/// `weir stop JOB [--savepoint DIR]`: stops the job with a final savepoint.
pub fn stop(args: StopArgs) -> Result<(), CliError> {
    let c = client(&args.client)?;
    let job = c.resolve_job(&args.job)?;
    let target = absolute(args.savepoint.as_deref());
    let trigger = c.stop_with_savepoint(&job, target.as_deref(), args.format.into(), args.drain)?;
    if args.drain {
        eprintln!("Stopping job {job}: ending event time, then a savepoint…");
    } else {
        eprintln!("Stopping job {job} with a savepoint…");
    }
    let location = c.wait_savepoint(&job, &trigger, args.client.timeout)?;
    println!("Job {job} stopped; savepoint: {location}");
    Ok(())
}

/// `weir cancel JOB`: cancels the job without a final checkpoint.
pub fn cancel(args: JobCommandArgs) -> Result<(), CliError> {
    let c = client(&args.client)?;
    let job = c.resolve_job(&args.job)?;
    c.cancel(&job)?;
    println!("Cancelled job {job}; its latest completed checkpoint stands.");
    Ok(())
}
