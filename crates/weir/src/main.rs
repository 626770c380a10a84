//! The `weir` command: runs the built-in jobs (`demo`), benchmarks them (`bench`), looks at
//! checkpoints (`checkpoints`) and steers running jobs through their REST API (`jobs`,
//! `checkpoint`, `savepoint`, `stop`, `cancel`). Errors become one clear line on stderr and a non-zero exit
//! status: 2 for bad input (flags, config, paths, job definitions), 1 for a job that failed.

mod args;
mod bench;
mod checkpoints;
mod cli;
mod cluster;
mod demo;
mod jobs;
mod kafka_wordcount;
mod one_value;
mod pg_replicate;
mod progress;
mod registry;
mod rest_args;
mod runnable;
mod spend_windows;
mod wordcount;

use clap::Parser;
use std::process::ExitCode;

/// Batches and events are allocated on one subtask's thread and freed on another's: mimalloc
/// handles that cross-thread traffic much faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints usage errors (exit 2) and --help/--version (exit 0) itself.
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    if matches!(
        cli.command,
        cli::Command::Checkpoints(_) | cli::Command::Jobs(_)
    ) {
        quiet_on_closed_pipe();
    }
    init_logging(cli.log_level());
    let result = match cli.command {
        cli::Command::Demo(args) => demo::run(args),
        cli::Command::Run(command) => registry::run(command),
        cli::Command::Bench(args) => bench::run(args),
        cli::Command::Checkpoints(args) => checkpoints::run(args),
        cli::Command::Jobs(args) => jobs::list(args),
        cli::Command::Checkpoint(args) => jobs::checkpoint(args),
        cli::Command::Savepoint(args) => jobs::savepoint(args),
        cli::Command::Stop(args) => jobs::stop(args),
        cli::Command::Cancel(args) => jobs::cancel(args),
        cli::Command::Jobmanager(args) => cluster::job_manager(args, registry::cluster_job),
        cli::Command::Taskmanager(args) => cluster::task_manager(args, registry::cluster_job),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// A failure of a command: the line to print and the exit status.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: u8,
}

impl CliError {
    /// Bad input: flags, configuration, paths.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 2,
        }
    }
}

impl From<weir_runtime::JobError> for CliError {
    fn from(e: weir_runtime::JobError) -> CliError {
        CliError {
            code: e.exit_code(),
            message: e.to_string(),
        }
    }
}

impl From<weir_core::ConfigError> for CliError {
    fn from(e: weir_core::ConfigError) -> CliError {
        CliError::usage(e.to_string())
    }
}

/// The listing commands end quietly, as other command-line tools do, when what reads their
/// output stops early (`weir checkpoints list DIR | head`): the default action of SIGPIPE,
/// which Rust's runtime ignores (so `println!` would panic). Only for those commands: a job's
/// sockets and pipes must see a closed peer as an error, not end the process.
fn quiet_on_closed_pipe() {
    // SAFETY: called once on the main thread before any other thread starts; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
