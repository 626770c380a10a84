//! The flags every job run shares ([`JobArgs`]), the configuration they build (file,
//! environment, `-D`, flags — later ones win), and the parsers of durations and intervals.

use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use weir_core::config::{parse_duration, CheckpointConfig, Config};
use weir_runtime::StartMode;

use crate::CliError;

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

pub fn interval_arg(text: &str) -> Result<Interval, String> {
    if text.eq_ignore_ascii_case("off") {
        Ok(Interval(None))
    } else {
        duration_arg(text).map(|d| Interval(Some(d)))
    }
}
