//! `weir run wordcount`: counts words exactly once, through the two-phase-commit file sink.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use weir_api::prelude::*;
use weir_connectors::file_source::check_input;
use weir_connectors::{CommittingFileSink, FileSource, SinkMode};
use weir_runtime::deploy::{Deployer, LocalDeployer};
use weir_runtime::{execute_with, HighAvailabilityServices, JobHandle, StopHandle};

use crate::cli::WordcountArgs;
use crate::demo::execution_config;
use crate::CliError;

/// Keeps a running count per word; emits `(word, count)` for every occurrence.
#[derive(Clone)]
struct WordCount;

impl KeyedProcessFunction<String, String, (String, u64)> for WordCount {
    type State = ValueState<String, u64>;

    fn state(&self) -> Self::State {
        ValueState::new("count")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, String>,
        word: String,
        counts: &mut Self::State,
        out: &mut Output<(String, u64)>,
    ) -> Result<(), TaskError> {
        let count = counts.get_or_insert_with(key, || 0);
        *count += 1;
        let n = *count;
        out.emit((word, n));
        Ok(())
    }
}

/// The wordcount job built from its flags, and its count of skipped lines.
pub struct Wordcount {
    pub graph: weir_runtime::graph::JobGraph,
    pub exec: weir_runtime::ExecutionConfig,
    /// The options the job was built with (file, environment, `-D`, flags).
    pub config: weir_core::Config,
    skipped: Arc<std::sync::atomic::AtomicU64>,
}

/// Builds the job from its flags. Every process of a cluster calls this with the same flags
/// (`cluster`); a job run in one process refuses high availability.
pub fn build(args: &WordcountArgs, cluster: bool) -> Result<Wordcount, CliError> {
    if args.job.checkpoint_dir.is_none() {
        return Err(CliError::usage("wordcount needs --checkpoint-dir DIR"));
    }
    check_input(&args.input).map_err(CliError::usage)?;
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
    let skipped = source.skipped();
    let env = StreamEnv::with_config("wordcount", &config)?;
    let format = Arc::new(|(word, count): &(String, u64), line: &mut Vec<u8>| {
        let _ = write!(line, "{word}\t{count}");
    });
    env.source("lines", source)
        .flat_map("words", |line: String| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .key_by(|word: &String| word.clone())
        .process("counts", WordCount)
        .sink(
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
    let skipped = skipped.load(Ordering::Relaxed);
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
