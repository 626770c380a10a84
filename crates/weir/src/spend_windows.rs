//! `weir run spend-windows`: each user's spend per tumbling event-time window of generated
//! purchases, exactly once, through the two-phase-commit file sink.
//!
//! The generator's event time is an event's position in its split (one event per millisecond
//! of event time), so the expected output is a pure function of the flags: the job is the
//! keyed, timer-driven counterpart of `wordcount` for testing restores. Each window's line
//! `user<TAB>window start<TAB>spend<TAB>purchases` is committed once, when the watermark passes
//! the window's end.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::{CommittingFileSink, Event, EventGenerator, SinkMode};
use weir_runtime::deploy::{Deployer, LocalDeployer};
use weir_runtime::graph::JobGraph;
use weir_runtime::{
    execute_with, ExecutionConfig, HighAvailabilityServices, JobHandle, StopHandle,
};

use crate::args::JobArgs;
use crate::demo::execution_config;
use crate::runnable::{BuildsAlike, ClusterJob, OnCluster, Runnable};
use crate::CliError;

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
    /// Hold each window result this long (e.g. 1ms) before the sink, in an operator of its own
    /// (`slow-sink`): the job then runs under back-pressure, as with a slow external system.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration_arg)]
    pub slow_sink: Option<Duration>,
}

/// The event time of a generated event: its position in its split, in milliseconds.
pub fn event_time(event: &Event) -> i64 {
    event.seq as i64
}

/// Sums spend and counts purchases.
#[derive(Clone, Copy, Debug, Default)]
struct SpendAndCount;

impl AggregateFunction<Event> for SpendAndCount {
    type Acc = (u64, u64);
    type Out = (u64, u64);
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, acc: &mut (u64, u64), event: Event) {
        acc.0 += event.amount;
        acc.1 += 1;
    }
    fn merge(&self, acc: &mut (u64, u64), other: &(u64, u64)) {
        acc.0 += other.0;
        acc.1 += other.1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
}

/// The spend-windows job built from its flags.
pub struct SpendWindows {
    pub graph: JobGraph,
    pub exec: ExecutionConfig,
    /// The options the job was built with (file, environment, `-D`, flags).
    pub config: weir_core::Config,
}

/// Builds the job from its flags. Every process of a cluster calls this with the same flags
/// (`cluster`); a job run in one process refuses high availability.
pub fn build(args: &SpendWindowsArgs, cluster: bool) -> Result<SpendWindows, CliError> {
    if args.job.checkpoint_dir.is_none() {
        return Err(CliError::usage("spend-windows needs --checkpoint-dir DIR"));
    }
    if args.users == 0 || args.window == 0 || args.events == 0 {
        return Err(CliError::usage(
            "--users, --window and --events must be at least 1",
        ));
    }
    if args.output.exists() && !args.output.is_dir() {
        return Err(CliError::usage(format!(
            "output {} exists and is not a directory",
            args.output.display()
        )));
    }
    let defaults = [("execution.checkpointing.interval", "1s")];
    let config = if cluster {
        args.job.config(&defaults)?
    } else {
        args.job.local_config(&defaults)?
    };
    let mut exec = execution_config(&config, args.job.start_mode())?;
    args.job.apply_restore(&mut exec);

    let mut generator = EventGenerator::new(args.seed, args.users).with_limit(args.events);
    if let Some(rate) = args.rate {
        generator = generator.with_rate(rate);
    }
    // A subtask's event time goes back by less than a batch (see the generator), so a bound of
    // a few batches means no record is ever late: every window's result is a function of the
    // input alone.
    let strategy =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(10_000), event_time);
    let env = StreamEnv::with_config("spend-windows", &config)?;
    let format = Arc::new(
        |result: &WindowResult<u64, (u64, u64)>, line: &mut Vec<u8>| {
            let (spend, purchases) = result.value;
            let _ = write!(
                line,
                "{}\t{}\t{spend}\t{purchases}",
                result.key, result.window.start
            );
        },
    );
    let results = env
        .source_with_watermarks("purchases", generator, strategy)
        .key_by(|e: &Event| e.user)
        .window(
            TumblingEventTimeWindows::of(Duration::from_millis(args.window)),
            event_time,
        )
        .aggregate("spend-per-window", SpendAndCount);
    crate::demo::slowed(results, args.slow_sink).sink(
        "output",
        CommittingFileSink::new(&args.output, format, SinkMode::ExactlyOnce),
    );
    let graph = env.build()?;
    Ok(SpendWindows {
        graph,
        exec,
        config,
    })
}

pub fn run(args: SpendWindowsArgs) -> Result<(), CliError> {
    let stop = StopHandle::new();
    let on_interrupt = stop.clone();
    let _ = ctrlc::set_handler(move || on_interrupt.stop());
    let job = build(&args, false)?;
    run_on(&args, &job, &mut LocalDeployer, None, &stop)
}

/// Runs the job with its attempts deployed by `deployer` — in this process, or on a cluster's
/// task managers (`weir jobmanager -- run spend-windows …`) — and its checkpoint ids and
/// completed checkpoints kept by `ha` (ZooKeeper) or in this process; `stop` stops or cancels
/// it.
pub fn run_on(
    args: &SpendWindowsArgs,
    job: &SpendWindows,
    deployer: &mut dyn Deployer,
    ha: Option<&mut dyn HighAvailabilityServices>,
    stop: &StopHandle,
) -> Result<(), CliError> {
    let SpendWindows { graph, exec, .. } = job;
    let handle = JobHandle::new(graph, &exec.checkpoint, stop.clone());
    let served = crate::rest_args::serve(&args.job.rest, &handle, exec, graph.max_parallelism)?;
    let summary = execute_with(graph, exec, &handle, &mut |_| {}, deployer, ha);
    served.finish();
    let summary = summary?;
    println!(
        "spend-windows {} after {:.1} s: {} events, {} checkpoints, {} restarts",
        if summary.cancelled {
            "cancelled"
        } else {
            "finished"
        },
        summary.elapsed.as_secs_f64(),
        summary.records,
        summary.checkpoints_completed,
        summary.restarts,
    );
    if stop.is_stopped() {
        return Err(CliError {
            message: "stopped before all input was processed; continue with --resume".into(),
            code: 130,
        });
    }
    Ok(())
}

impl Runnable for SpendWindowsArgs {
    fn run(self: Box<Self>) -> Result<(), CliError> {
        run(*self)
    }

    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError> {
        Ok(Box::new(OnCluster::new(*self)))
    }
}

impl BuildsAlike for SpendWindowsArgs {
    type Built = SpendWindows;
    const COMMAND: &'static str = "run spend-windows";

    fn defines(&mut self) -> &mut Vec<String> {
        &mut self.job.define
    }

    fn build(&self, cluster: bool) -> Result<SpendWindows, CliError> {
        build(self, cluster)
    }

    fn parts(built: &SpendWindows) -> (&JobGraph, &ExecutionConfig, &weir_core::Config) {
        (&built.graph, &built.exec, &built.config)
    }

    fn run_built(
        &self,
        built: &SpendWindows,
        deployer: &mut dyn Deployer,
        ha: Option<&mut dyn HighAvailabilityServices>,
        stop: &StopHandle,
    ) -> Result<(), CliError> {
        run_on(self, built, deployer, ha, stop)
    }
}
