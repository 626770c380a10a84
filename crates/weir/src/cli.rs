//! Command-line flags, and the configuration they build (file, environment, `-D`, flags —
//! later ones win).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use weir_core::config::{parse_duration, CheckpointConfig, Config};
use weir_runtime::StartMode;

use crate::CliError;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "Weir: stateful stream processing with exactly-once checkpoints"
)]
pub struct Cli {
    /// Log more (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            // A job run logs its restarts; the demo keeps its terminal for the progress line.
            0 if matches!(
                self.command,
                Command::Run(_) | Command::Jobmanager(_) | Command::Taskmanager(_)
            ) =>
            {
                "info"
            }
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the demo job: generated purchases → running spend per user → file sink, with
    /// checkpoints every second.
    Demo(DemoArgs),
    /// Run a built-in job.
    #[command(subcommand)]
    Run(RunCommand),
    /// Measure throughput of the demo pipeline.
    Bench(BenchArgs),
    /// Look at a job's checkpoints.
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// List the jobs a REST API serves (like `flink list`).
    Jobs(crate::jobs::ClientArgs),
    /// Take a checkpoint of a running job now, through its REST API.
    Checkpoint(crate::jobs::JobCommandArgs),
    /// Take a savepoint of a running job, through its REST API.
    Savepoint(crate::jobs::SavepointArgs),
    /// Stop a running job with a final savepoint, through its REST API.
    Stop(crate::jobs::StopArgs),
    /// Cancel a running job (no final checkpoint), through its REST API.
    Cancel(crate::jobs::JobCommandArgs),
    /// Run a job on a cluster: this process coordinates, task managers run the subtasks
    /// (`weir jobmanager -- run wordcount …`).
    Jobmanager(crate::cluster::JobManagerArgs),
    /// Offer slots for a job manager's job: run the subtasks it places here.
    Taskmanager(crate::cluster::TaskManagerArgs),
}

/// Options every job run shares.
#[derive(Args, Debug, Clone)]
pub struct JobArgs {
    /// Where checkpoints go (execution.checkpointing.dir).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint interval, e.g. 500ms, 1s, 1min (execution.checkpointing.interval).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub checkpoint_interval: Option<Duration>,
    /// Parallelism of every operator.
    #[arg(long, short = 'p')]
    pub parallelism: Option<u32>,
    /// Continue from the latest completed checkpoint in the checkpoint directory; with
    /// --from-savepoint, start from the savepoint while the directory holds none yet.
    #[arg(long, conflicts_with = "fresh")]
    pub resume: bool,
    /// Delete the job's existing checkpoints and start over.
    #[arg(long)]
    pub fresh: bool,
    /// A config file of `key: value` lines with Flink's option names.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Set an option, e.g. -D execution.checkpointing.num-retained=5.
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub define: Vec<String>,
    #[command(flatten)]
    pub rest: crate::rest_args::RestArgs,
    /// Start from a savepoint (or a retained checkpoint directory) instead.
    #[arg(long, value_name = "PATH")]
    pub from_savepoint: Option<PathBuf>,
    /// With --from-savepoint: skip state of operators no longer in the job.
    #[arg(long, requires = "from_savepoint")]
    pub allow_non_restored_state: bool,
    /// With --from-savepoint: `no-claim` (default) never deletes the savepoint; `claim` lets
    /// Weir own it and delete it once a newer checkpoint completed.
    #[arg(long, value_name = "MODE", default_value = "no-claim", value_parser = ["no-claim", "claim"], requires = "from_savepoint")]
    pub claim_mode: String,
}

impl JobArgs {
    /// Applies the restore flags to an execution configuration.
    pub fn apply_restore(&self, exec: &mut weir_runtime::ExecutionConfig) {
        exec.from_savepoint = self.from_savepoint.clone();
        exec.allow_non_restored_state = self.allow_non_restored_state;
        exec.claim_mode = if self.claim_mode == "claim" {
            weir_runtime::ClaimMode::Claim
        } else {
            weir_runtime::ClaimMode::NoClaim
        };
    }
}

impl JobArgs {
    pub fn start_mode(&self) -> StartMode {
        if self.resume {
            StartMode::Resume
        } else if self.fresh {
            StartMode::Fresh
        } else {
            StartMode::New
        }
    }

    /// The configuration from file, environment, -D and flags, in rising precedence; the
    /// given defaults apply where none of them says anything.
    pub fn config(&self, defaults: &[(&str, &str)]) -> Result<Config, CliError> {
        let mut config = Config::new();
        for (k, v) in defaults {
            config.set(k, v)?;
        }
        if let Some(file) = &self.config {
            config.load_file(file)?;
        }
        config.load_env(std::env::vars());
        for pair in &self.define {
            config.set_pair(pair)?;
        }
        if let Some(dir) = &self.checkpoint_dir {
            config.set("execution.checkpointing.dir", &dir.to_string_lossy())?;
        }
        if let Some(i) = self.checkpoint_interval {
            config.set(
                "execution.checkpointing.interval",
                &format!("{}ms", i.as_millis()),
            )?;
        }
        if let Some(p) = self.parallelism {
            if p == 0 {
                return Err(CliError::usage("--parallelism must be at least 1"));
            }
            config.set("parallelism.default", &p.to_string())?;
        }
        CheckpointConfig::from_config(&config)?;
        weir_core::config::HighAvailabilityConfig::from_config(&config)?;
        Ok(config)
    }

    /// [`JobArgs::config`] for a job run in this one process, where a job manager failover
    /// cannot happen: high availability is refused rather than promised.
    pub fn local_config(&self, defaults: &[(&str, &str)]) -> Result<Config, CliError> {
        let config = self.config(defaults)?;
        if config
            .get("high-availability.type")
            .is_some_and(|t| !t.eq_ignore_ascii_case("none"))
        {
            return Err(CliError::usage(
                "high-availability.type: ZooKeeper needs cluster mode (weir jobmanager … -- run …); a job run in one process has no job manager to fail over",
            ));
        }
        Ok(config)
    }
}

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// How long to run, e.g. 20s or 2min; Ctrl-C stops earlier, with a final checkpoint.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = duration_arg)]
    pub duration: Duration,
    /// Distinct users in the generated events (the number of keys).
    #[arg(long, default_value_t = 100_000)]
    pub users: u64,
    /// Where the output files go.
    #[arg(long, value_name = "DIR", default_value = "./weir-data/output/demo")]
    pub output: PathBuf,
    /// Make the sources bounded: each source subtask stops after N events, and the job ends
    /// with a final checkpoint once all are processed.
    #[arg(long, value_name = "N")]
    pub events: Option<u64>,
    /// Limit each source subtask to N events per second.
    #[arg(long, value_name = "N")]
    pub rate: Option<u64>,
}

#[derive(Subcommand, Debug)]
pub enum RunCommand {
    /// Count words exactly once: every occurrence of a word becomes a line `word<TAB>count`
    /// (its count so far) in committed files of the output directory.
    Wordcount(WordcountArgs),
    /// Sum each user's spend per tumbling event-time window of generated purchases, exactly
    /// once: a line `user<TAB>window start<TAB>spend<TAB>purchases` per window, in committed
    /// files of the output directory.
    SpendWindows(SpendWindowsArgs),
}

#[derive(Args, Debug, Clone)]
pub struct SpendWindowsArgs {
    /// Where committed output files go; in-progress files there are hidden (dot-prefixed).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub job: JobArgs,
    /// Purchases per source split (one split per source subtask of the first run); one
    /// purchase per millisecond of event time.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub events: u64,
    /// Limit each source subtask to N purchases per second.
    #[arg(long, value_name = "N")]
    pub rate: Option<u64>,
    /// Distinct users (the keys).
    #[arg(long, default_value_t = 1_000)]
    pub users: u64,
    /// The windows' size in milliseconds of event time (purchases per split).
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    pub window: u64,
    /// The generator's seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

#[derive(Args, Debug, Clone)]
pub struct WordcountArgs {
    /// A UTF-8 text file, or a directory of them (new files are picked up in name order).
    #[arg(long, value_name = "PATH")]
    pub input: PathBuf,
    /// Where committed output files go; in-progress files there are hidden (dot-prefixed).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub job: JobArgs,
    /// Keep watching the input directory for new files at this interval (e.g. 1s) instead of
    /// ending once every file is read (Flink's source.monitor-interval). The job then runs until
    /// stopped (`weir stop`, Ctrl-C). New files must appear whole: write them under a hidden
    /// name (leading `.`) and rename them into place.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub monitor_interval: Option<Duration>,
    /// Skip (and count) lines that are not UTF-8 instead of failing.
    #[arg(long)]
    pub skip_invalid_utf8: bool,
    /// exactly-once (two-phase commit) or at-least-once (duplicates after failures).
    #[arg(long, value_name = "MODE", default_value = "exactly-once", value_parser = ["exactly-once", "at-least-once"])]
    pub sink_mode: String,
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Suites with flags of their own (`weir bench nexmark --help`).
    #[command(subcommand)]
    pub suite: Option<crate::bench_suite::BenchSuite>,
    /// What to measure: `pipeline` is the demo job end to end; `checkpoint` measures the state
    /// backend and checkpoint storage directly (snapshots, full and incremental writes, restore).
    #[arg(value_parser = ["pipeline", "checkpoint"], default_value = "pipeline")]
    pub target: String,
    /// How long each run lasts.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    pub duration: Duration,
    /// Checkpoint interval, or `off`.
    #[arg(long, default_value = "1s", value_parser = interval_arg)]
    pub checkpoint_interval: Interval,
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    #[arg(long, default_value_t = 100_000)]
    pub users: u64,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
    /// `checkpoint`: keys of keyed state.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// `checkpoint`: the fraction of keys changed between two checkpoints.
    #[arg(long, default_value_t = 0.01)]
    pub changed: f64,
    /// `checkpoint`: bytes of each key's value.
    #[arg(long, default_value_t = 100)]
    pub value_bytes: usize,
    /// `checkpoint`: where to write (a directory, or s3://bucket/prefix); a temporary
    /// directory by default.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum CheckpointsCommand {
    /// List the checkpoints of every job under a checkpoint directory (or of one job): id,
    /// completion time, size, bytes the checkpoint wrote itself (incremental), status.
    List {
        /// A checkpoint directory (a path or s3://bucket/prefix), or one job's directory in it.
        dir: String,
    },
    /// Show what checkpoints hold: operators, subtasks, key-group ranges, files and sizes.
    Inspect {
        /// One checkpoint (…/<job>/chk-<id>), a job's directory, or a checkpoint directory.
        path: String,
    },
    /// Check every checksum of every file; exit status 0 only when all are intact.
    Verify {
        /// One checkpoint (…/<job>/chk-<id>), a job's directory, or a checkpoint directory.
        path: String,
    },
}

pub fn duration_arg(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// A checkpoint interval that may be `off`.
#[derive(Clone, Copy, Debug)]
pub struct Interval(pub Option<Duration>);

fn interval_arg(text: &str) -> Result<Interval, String> {
    if text.eq_ignore_ascii_case("off") {
        Ok(Interval(None))
    } else {
        duration_arg(text).map(|d| Interval(Some(d)))
    }
}
