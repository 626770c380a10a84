//! `weir run wordcount`: counts words exactly once, through the two-phase-commit file sink.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::file_source::check_input;
use weir_connectors::{CommittingFileSink, FileSource, SinkMode};
use weir_runtime::deploy::{Deployer, LocalDeployer};
use weir_runtime::graph::JobGraph;
use weir_runtime::{
    execute_with, ExecutionConfig, HighAvailabilityServices, JobHandle, StopHandle,
};

use crate::args::{duration_arg, JobArgs};
use crate::demo::execution_config;
use crate::one_value::OneValue;
use crate::runnable::{BuildsAlike, ClusterJob, OnCluster, Runnable};
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct WordcountArgs {
    /// A UTF-8 text file, or a directory of them (new files are picked up in name order).
    #[arg(long, value_name = "PATH")]
    pub input: PathBuf,
    /// Where committed output files go; in-progress files there are hidden (dot-prefixed).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// A second input beside --input (a file or a directory), read once by a source of its
    /// own: its words are counted with the others. Being bounded, it usually ends long before
    /// a large or watched --input; checkpoints go on after it ended, and a restore does not
    /// read it again.
    #[arg(long, value_name = "PATH")]
    pub side_input: Option<PathBuf>,
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
    /// A word's count expires this long (e.g. 1h) after the word was last seen, and starts over
    /// (state time-to-live). Its state is then of another kind: a savepoint taken with the
    /// flag restores only with it, and one taken without only without it.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub state_ttl: Option<Duration>,
    /// Hold each count this long (e.g. 50us; at least the operating system's sleep
    /// granularity) before the sink, in an operator of its own (`slow-sink`): the job then runs
    /// under back-pressure, as with a slow external system.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub slow_sink: Option<Duration>,
}

/// Keeps a running count per word in `S` (a [`ValueState`], or a [`TtlValueState`] with
/// `--state-ttl`); emits `(word, count)` for every occurrence.
struct WordCount<S: OneValue<String, u64>>(S::Config);

impl<S: OneValue<String, u64>> Clone for WordCount<S> {
    fn clone(&self) -> Self {
        WordCount(self.0.clone())
    }
}

impl<S: OneValue<String, u64>> KeyedProcessFunction<String, String, (String, u64)>
    for WordCount<S>
{
    type State = S;

    fn state(&self) -> S {
        S::make("count", &self.0)
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, String>,
        word: String,
        counts: &mut S,
        out: &mut Output<(String, u64)>,
    ) -> Result<(), TaskError> {
        let count = counts.get_or_insert_with(key, || 0);
        *count += 1;
        out.emit((word, *count));
        Ok(())
    }
}

/// The wordcount job built from its flags, and its count of skipped lines.
pub struct Wordcount {
    pub graph: weir_runtime::graph::JobGraph,
    pub exec: weir_runtime::ExecutionConfig,
    /// The options the job was built with (file, environment, `-D`, flags).
    pub config: weir_core::Config,
    /// Per source (--input, then --side-input).
    skipped: Vec<Arc<std::sync::atomic::AtomicU64>>,
}

/// Builds the job from its flags. Every process of a cluster calls this with the same flags
/// (`cluster`); a job run in one process refuses high availability.
pub fn build(args: &WordcountArgs, cluster: bool) -> Result<Wordcount, CliError> {
    if args.job.checkpoint_dir.is_none() {
        return Err(CliError::usage("wordcount needs --checkpoint-dir DIR"));
    }
    check_input(&args.input).map_err(CliError::usage)?;
    if let Some(side) = &args.side_input {
        check_input(side).map_err(|e| CliError::usage(format!("--side-input: {e}")))?;
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
    let mode = if args.sink_mode == "at-least-once" {
        SinkMode::AtLeastOnce
    } else {
        SinkMode::ExactlyOnce
    };

    let mut source = FileSource::new(&args.input);
    if args.skip_invalid_utf8 {
        source = source.skip_invalid_utf8();
    }
    if let Some(interval) = args.monitor_interval {
        source = source.monitor_continuously(interval);
    }
    let mut skipped = vec![source.skipped()];
    let env = StreamEnv::with_config("wordcount", &config)?;
    let format = Arc::new(|(word, count): &(String, u64), line: &mut Vec<u8>| {
        let _ = write!(line, "{word}\t{count}");
    });
    let mut lines = env.source("lines", source);
    if let Some(side) = &args.side_input {
        let mut source = FileSource::new(side);
        if args.skip_invalid_utf8 {
            source = source.skip_invalid_utf8();
        }
        skipped.push(source.skipped());
        lines = lines.union(env.source("side-lines", source));
    }
    let words = lines
        .flat_map("words", |line: String| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .key_by(|word: &String| word.clone());
    let counts = match args.state_ttl {
        None => words.process("counts", WordCount::<ValueState<_, _>>(())),
        Some(ttl) => words.process("counts", WordCount::<TtlValueState<_, _>>(ttl)),
    };
    crate::demo::slowed(counts, args.slow_sink).sink(
        "output",
        CommittingFileSink::new(&args.output, format, mode),
    );
    let graph = env.build()?;
    Ok(Wordcount {
        graph,
        exec,
        config,
        skipped,
    })
}

pub fn run(args: WordcountArgs) -> Result<(), CliError> {
    let stop = StopHandle::new();
    let on_interrupt = stop.clone();
    let _ = ctrlc::set_handler(move || on_interrupt.stop());
    let job = build(&args, false)?;
    run_on(&args, &job, &mut LocalDeployer, None, &stop)
}

/// Runs the job with its attempts deployed by `deployer` — in this process, or on a cluster's
/// task managers (`weir jobmanager -- run wordcount …`) — and its checkpoint ids and completed
/// checkpoints kept by `ha` (ZooKeeper) or in this process; `stop` stops or cancels it.
pub fn run_on(
    args: &WordcountArgs,
    job: &Wordcount,
    deployer: &mut dyn Deployer,
    ha: Option<&mut dyn HighAvailabilityServices>,
    stop: &StopHandle,
) -> Result<(), CliError> {
    let Wordcount {
        graph,
        exec,
        skipped,
        ..
    } = job;
    let handle = JobHandle::new(graph, &exec.checkpoint, stop.clone());
    let served = crate::rest_args::serve(&args.job.rest, &handle, exec, graph.max_parallelism)?;
    let summary = execute_with(graph, exec, &handle, &mut |_| {}, deployer, ha);
    served.finish();
    let summary = summary?;
    let secs = summary.elapsed.as_secs_f64();
    println!(
        "wordcount {} after {secs:.1} s: {} lines, {} checkpoints, {} restarts{}",
        if summary.cancelled {
            "cancelled"
        } else {
            "finished"
        },
        summary.records,
        summary.checkpoints_completed,
        summary.restarts,
        if summary.recovery_ms.is_empty() {
            String::new()
        } else {
            format!(" (recovery ms: {:?})", summary.recovery_ms)
        }
    );
    let skipped: u64 = skipped.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    if skipped > 0 {
        println!("skipped {skipped} lines that were not UTF-8");
    }
    if stop.is_stopped() {
        return Err(CliError {
            message: "stopped before all input was processed; continue with --resume".into(),
            code: 130,
        });
    }
    Ok(())
}

impl Runnable for WordcountArgs {
    fn run(self: Box<Self>) -> Result<(), CliError> {
        run(*self)
    }

    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError> {
        Ok(Box::new(OnCluster::new(*self)))
    }
}

impl BuildsAlike for WordcountArgs {
    type Built = Wordcount;
    const COMMAND: &'static str = "run wordcount";

    fn defines(&mut self) -> &mut Vec<String> {
        &mut self.job.define
    }

    fn build(&self, cluster: bool) -> Result<Wordcount, CliError> {
        build(self, cluster)
    }

    fn parts(built: &Wordcount) -> (&JobGraph, &ExecutionConfig, &weir_core::Config) {
        (&built.graph, &built.exec, &built.config)
    }

    fn run_built(
        &self,
        built: &Wordcount,
        deployer: &mut dyn Deployer,
        ha: Option<&mut dyn HighAvailabilityServices>,
        stop: &StopHandle,
    ) -> Result<(), CliError> {
        run_on(self, built, deployer, ha, stop)
    }
}
