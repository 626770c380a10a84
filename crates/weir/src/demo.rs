//! `weir demo`: the main job. Generated purchase events feed a keyed running sum of spend per
//! user; every time a user's total passes another 10,000 a line goes to the file sink.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator, FileSink};
use weir_core::config::{CheckpointConfig, Config, StateBackendConfig, StateBackendKind};
use weir_runtime::graph::JobGraph;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::FailureInjection;
use weir_runtime::{execute_job, ExecutionConfig, JobError, JobHandle, StartMode, StopHandle};

use crate::args::{duration_arg, JobArgs};
use crate::progress::{print_summary, ProgressLine};
use crate::CliError;

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

/// The generator's seed: fixed, so runs (and resumed runs) see the same events.
pub const SEED: u64 = 0x5745_4952;
/// A milestone line is written each time a user's spend passes a multiple of this.
pub const MILESTONE: u64 = 10_000;

/// Keeps each user's total spend; emits `(user, total)` when it passes a milestone.
#[derive(Clone)]
pub struct SpendMilestones;

impl KeyedProcessFunction<u64, Event, (u64, u64)> for SpendMilestones {
    type State = ValueState<u64, u64>;

    fn state(&self) -> Self::State {
        ValueState::new("spend")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, u64>,
        event: Event,
        spend: &mut Self::State,
        out: &mut Output<(u64, u64)>,
    ) -> Result<(), TaskError> {
        let total = spend.get_or_insert_with(key, || 0);
        let before = *total;
        *total += event.amount;
        if *total / MILESTONE > before / MILESTONE {
            out.emit((*key.key, *total));
        }
        Ok(())
    }
}

/// The demo job's graph over `generator`'s events.
pub fn demo_graph(
    config: &Config,
    generator: EventGenerator,
    output: &std::path::Path,
) -> Result<JobGraph, JobError> {
    let env =
        StreamEnv::with_config("demo", config).map_err(|e| JobError::InvalidJob(e.to_string()))?;
    let format = Arc::new(|(user, total): &(u64, u64), line: &mut Vec<u8>| {
        let _ = write!(line, "{user}\t{total}");
    });
    env.source("events", generator)
        .key_by(|e: &Event| e.user)
        .process("spend-per-user", SpendMilestones)
        .sink("milestones", FileSink::new(output, format));
    env.build()
}

/// `stream`, slowed down to at most one record per `cost` (if given) by an operator of its own,
/// `slow-sink`, right before the sink: the job then runs at that pace and every channel ahead
/// of it stays full, as with a slow external system (`--slow-sink` of the built-in jobs).
pub fn slowed<T: Data>(stream: DataStream<T>, cost: Option<Duration>) -> DataStream<T> {
    match cost {
        None => stream,
        Some(cost) => stream.map("slow-sink", move |record: T| {
            std::thread::sleep(cost);
            record
        }),
    }
}

/// The execution settings of a job run from the CLI.
pub fn execution_config(config: &Config, start: StartMode) -> Result<ExecutionConfig, CliError> {
    let mut exec = ExecutionConfig {
        checkpoint: CheckpointConfig::from_config(config)?,
        state_backend: state_backend(config)?,
        start,
        ..ExecutionConfig::default()
    };
    if let Some(t) = config.get_duration("execution.buffer-timeout.interval")? {
        exec.buffer_timeout = t;
    }
    exec.restart = RestartStrategy::from_config(config, exec.checkpoint.interval.is_some())?;
    exec.savepoint_dir = config
        .get("execution.checkpointing.savepoint-dir")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from);
    exec.failure_injection = FailureInjection::from_env().map_err(CliError::usage)?;
    Ok(exec)
}

/// The `state.backend.*` options, refusing a backend this build does not have.
pub fn state_backend(config: &Config) -> Result<StateBackendConfig, CliError> {
    let backend = StateBackendConfig::from_config(config)?;
    if backend.kind == StateBackendKind::RocksDb {
        if !cfg!(feature = "rocksdb") {
            return Err(CliError::usage(
                weir_runtime::operators::keyed_backend::ROCKSDB_MISSING,
            ));
        }
        // Here, before the job starts, rather than in every subtask and every restart.
        let dir = &backend.rocksdb_local_dir;
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::usage(format!(
                "state.backend.rocksdb.localdir {}: cannot create it: {e}",
                dir.display()
            ))
        })?;
    }
    Ok(backend)
}

pub fn run(args: DemoArgs) -> Result<(), CliError> {
    if args.users == 0 {
        return Err(CliError::usage("--users must be at least 1"));
    }
    let config = args.job.local_config(&[
        ("parallelism.default", "2"),
        ("execution.checkpointing.interval", "1s"),
        (
            "execution.checkpointing.savepoint-dir",
            "./weir-data/savepoints",
        ),
    ])?;
    let mut exec = execution_config(&config, args.job.start_mode())?;
    args.job.apply_restore(&mut exec);
    let mut generator = EventGenerator::new(SEED, args.users);
    if let Some(n) = args.events {
        generator = generator.with_limit(n);
    }
    if let Some(r) = args.rate {
        generator = generator.with_rate(r);
    }
    let graph = demo_graph(&config, generator, &args.output)?;

    let stop = StopHandle::new();
    let on_interrupt = stop.clone();
    let mut interrupted = false;
    let _ = ctrlc::set_handler(move || {
        if on_interrupt.is_stopped() {
            std::process::exit(130); // a second Ctrl-C: stop now
        }
        on_interrupt.stop();
    });
    let timer = stop.clone();
    let duration = args.duration;
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        timer.stop();
    });

    println!(
        "Weir demo: {} users, parallelism {}, checkpoints every {} to {}",
        args.users,
        graph.nodes[0].parallelism,
        exec.checkpoint
            .interval
            .map(|d| format!("{d:?}"))
            .unwrap_or_else(|| "(off)".into()),
        exec.checkpoint.dir.join(&graph.name).display()
    );
    let handle = JobHandle::new(&graph, &exec.checkpoint, stop.clone());
    let served = crate::rest_args::serve(&args.job.rest, &handle, &exec, graph.max_parallelism)?;
    let mut line = ProgressLine::new();
    let summary = execute_job(&graph, &exec, &handle, &mut |p| line.update(p));
    line.finish();
    served.finish();
    let summary = summary?;
    if stop.is_stopped() && summary.elapsed < duration {
        interrupted = true;
    }
    print_summary(
        &summary,
        &exec.checkpoint.dir.join(&graph.name),
        &args.output,
        interrupted,
    );
    Ok(())
}
