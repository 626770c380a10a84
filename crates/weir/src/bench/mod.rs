//! `weir bench`, every benchmark. `weir bench pipeline` (here): records per second of the demo
//! pipeline, end to end, with checkpointing on or off; `weir bench checkpoint`: the state
//! backend and checkpoint storage measured directly ([`checkpoint`]); and the suites with flags
//! of their own, `weir bench nexmark` ([`nexmark`]) and `weir bench keyed-count`
//! ([`keyed_count`]), which run and measure alike ([`suite`], [`alternate`]).

mod alternate;
mod checkpoint;
mod kafka;
pub mod keyed_count;
mod nexmark;
mod postgres;
mod process;
pub mod suite;

use clap::{Args, Subcommand};
use std::time::Duration;
use weir_core::config::Config;
use weir_runtime::{execute, StartMode, StopHandle};

use crate::args::{duration_arg, interval_arg, Interval};
use crate::demo::{demo_graph, execution_config};
use crate::progress::{bytes, si};
use crate::CliError;

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Suites with flags of their own (`weir bench nexmark --help`).
    #[command(subcommand)]
    pub suite: Option<BenchSuite>,
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
    /// `pipeline`: run every operator in a task loop of its own
    /// (`pipeline.operator-chaining.enabled: false`).
    #[arg(long)]
    pub no_chaining: bool,
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

/// The benchmark suites with their own flags.
#[derive(Subcommand, Debug, Clone)]
pub enum BenchSuite {
    /// A Nexmark query over generated people, auctions and bids.
    Nexmark(nexmark::NexmarkArgs),
    /// The simplest stateful job: count and sum per key.
    KeyedCount(keyed_count::KeyedCountArgs),
    /// The PostgreSQL sink (exactly-once) and CDC source against a plain COPY and INSERT.
    Postgres(postgres::PostgresBenchArgs),
    /// Topic to topic through the Kafka source and exactly-once sink against the broker's
    /// own produce and consume rates.
    Kafka(kafka::KafkaBenchArgs),
}

pub fn run(mut args: BenchArgs) -> Result<(), CliError> {
    match args.suite.take() {
        Some(BenchSuite::Nexmark(args)) => return nexmark::run(args),
        Some(BenchSuite::KeyedCount(args)) => return keyed_count::run(args),
        Some(BenchSuite::Postgres(args)) => return postgres::run(args),
        Some(BenchSuite::Kafka(args)) => return kafka::run(args),
        None => {}
    }
    if args.target == "checkpoint" {
        return checkpoint::run(&args);
    }
    if args.parallelism == 0 || args.users == 0 {
        return Err(CliError::usage(
            "--parallelism and --users must be at least 1",
        ));
    }
    let scratch = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    let mut config = Config::new();
    config.set("parallelism.default", &args.parallelism.to_string())?;
    if args.no_chaining {
        config.set("pipeline.operator-chaining.enabled", "false")?;
    }
    config.set(
        "execution.checkpointing.dir",
        &scratch.join("checkpoints").to_string_lossy(),
    )?;
    if let Some(i) = args.checkpoint_interval.0 {
        config.set(
            "execution.checkpointing.interval",
            &format!("{}ms", i.as_millis()),
        )?;
    }
    let exec = execution_config(&config, StartMode::Fresh)?;
    let generator = weir_connectors::EventGenerator::new(crate::demo::SEED, args.users);
    let graph = demo_graph(&config, generator, &scratch.join("output"))?;
    let stop = StopHandle::new();
    let timer = stop.clone();
    let duration = args.duration;
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        timer.stop();
    });
    let result = execute(&graph, &exec, &stop, &mut |_| {});
    let _ = std::fs::remove_dir_all(&scratch);
    let summary = result?;
    let secs = summary.elapsed.as_secs_f64().max(1e-9);
    let rate = summary.records as f64 / secs;
    let d = summary.stats.summary.end_to_end_duration_ms.snapshot();
    let interval = args
        .checkpoint_interval
        .0
        .map(|i| format!("\"{}ms\"", i.as_millis()))
        .unwrap_or_else(|| "null".into());
    let size = summary.last_checkpoint.map(|c| c.size_bytes).unwrap_or(0);
    if args.json {
        println!(
            "{{\"target\":\"pipeline\",\"parallelism\":{},\"users\":{},\"checkpoint_interval\":{interval},\"seconds\":{secs:.3},\"records\":{},\"records_per_second\":{rate:.0},\"checkpoints_completed\":{},\"checkpoints_failed\":{},\"checkpoint_duration_p50_ms\":{},\"checkpoint_duration_p99_ms\":{},\"last_checkpoint_bytes\":{size}}}",
            args.parallelism,
            args.users,
            summary.records,
            summary.checkpoints_completed,
            summary.checkpoints_failed,
            d.p50,
            d.p99,
        );
    } else {
        println!(
            "pipeline, parallelism {}, {} users, checkpoints {}: {} records in {:.1} s = {} records/s; {} checkpoints (p50 {} ms, p99 {} ms, last {})",
            args.parallelism,
            args.users,
            args.checkpoint_interval.0
                .map(|i| format!("every {:?}", i))
                .unwrap_or_else(|| "off".into()),
            summary.records,
            secs,
            si(rate),
            summary.checkpoints_completed,
            d.p50,
            d.p99,
            bytes(size)
        );
    }
    Ok(())
}
