//! The jobs that run by name: `weir run` runs them in this process, and a cluster runs those
//! marked for it (`weir jobmanager -- run wordcount …`). A new job is one entry of [`JOBS`] and
//! a [`Runnable`] implementation beside the job.

use clap::Parser;

use crate::bench::keyed_count::KeyedCountArgs;
use crate::bench::{BenchArgs, BenchSuite};
use crate::cli::{Cli, Command, RunCommand};
use crate::kafka_wordcount::KafkaWordcountArgs;
use crate::pg_replicate::PgReplicateArgs;
use crate::runnable::{ClusterJob, Runnable};
use crate::spend_windows::SpendWindowsArgs;
use crate::wordcount::WordcountArgs;
use crate::CliError;

/// The job a command line names, or the command line back if it names another.
type Taken = Result<Box<dyn Runnable>, Box<Command>>;

/// One job that runs by name.
pub struct RunnableJob {
    /// The command that names it after `weir`, as messages quote it.
    pub name: &'static str,
    /// Whether a cluster runs it.
    pub on_cluster: bool,
    /// The job with its flags, if a parsed command line names this job.
    take: fn(Box<Command>) -> Taken,
}

/// Every job that runs by name.
pub const JOBS: &[RunnableJob] = &[
    RunnableJob {
        name: "run wordcount",
        on_cluster: true,
        take: |command| match *command {
            Command::Run(RunCommand::Wordcount(args)) => Ok(Box::<WordcountArgs>::new(args)),
            other => Err(Box::new(other)),
        },
    },
    RunnableJob {
        name: "run spend-windows",
        on_cluster: true,
        take: |command| match *command {
            Command::Run(RunCommand::SpendWindows(args)) => Ok(Box::<SpendWindowsArgs>::new(args)),
            other => Err(Box::new(other)),
        },
    },
    RunnableJob {
        name: "run pg-replicate",
        on_cluster: false,
        take: |command| match *command {
            Command::Run(RunCommand::PgReplicate(args)) => Ok(Box::<PgReplicateArgs>::new(*args)),
            other => Err(Box::new(other)),
        },
    },
    RunnableJob {
        name: "run kafka-wordcount",
        on_cluster: false,
        take: |command| match *command {
            Command::Run(RunCommand::KafkaWordcount(args)) => {
                Ok(Box::<KafkaWordcountArgs>::new(*args))
            }
            other => Err(Box::new(other)),
        },
    },
    RunnableJob {
        name: "bench keyed-count",
        on_cluster: true,
        take: |command| match *command {
            Command::Bench(BenchArgs {
                suite: Some(BenchSuite::KeyedCount(args)),
                ..
            }) => Ok(Box::<KeyedCountArgs>::new(args)),
            other => Err(Box::new(other)),
        },
    },
];

/// The job `command` names, or the command back if it names none.
fn take(mut command: Box<Command>, jobs: impl Iterator<Item = &'static RunnableJob>) -> Taken {
    for job in jobs {
        match (job.take)(command) {
            Ok(runnable) => return Ok(runnable),
            Err(other) => command = other,
        }
    }
    Err(command)
}

/// Runs the job `weir run …` names in this process.
pub fn run(command: RunCommand) -> Result<(), CliError> {
    match take(Box::new(Command::Run(command)), JOBS.iter()) {
        Ok(job) => job.run(),
        Err(command) => unreachable!("every job of `weir run` is in the registry: {command:?}"),
    }
}

/// The job a cluster runs, from its flags after `--` (`run wordcount …`), parsed as
/// `weir <job…>` would parse them.
pub fn cluster_job(job: &[String]) -> Result<Box<dyn ClusterJob>, CliError> {
    let argv = std::iter::once("weir".to_string()).chain(job.iter().cloned());
    let cli = Cli::try_parse_from(argv)
        .map_err(|e| CliError::usage(format!("the job's flags after --: {e}")))?;
    match take(Box::new(cli.command), JOBS.iter().filter(|j| j.on_cluster)) {
        Ok(runnable) => runnable.on_cluster(),
        Err(_) => {
            let names: Vec<String> = JOBS
                .iter()
                .filter(|j| j.on_cluster)
                .map(|j| format!("`{} …`", j.name))
                .collect();
            let (last, others) = names.split_last().expect("some job runs on a cluster");
            Err(CliError::usage(format!(
                "a cluster runs {} or {last}, not {:?}",
                others.join(", "),
                job.join(" ")
            )))
        }
    }
}
