//! `weir bench nexmark --query Q --events N`: one Nexmark query over N generated events, from
//! the Nexmark source to a counting sink.

use clap::Args;
use std::sync::atomic::Ordering;
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::nexmark::{self, queries, Event, NexmarkConfig, NexmarkSource};
use weir_runtime::{execute_job, JobHandle};

use super::suite::{CountingSink, RunArgs, Setup};
use crate::args::duration_arg;
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct NexmarkArgs {
    /// q0, q1, q2, q3, q4, q5, q7 or q8.
    #[arg(long, value_parser = weir_connectors::nexmark::queries::QUERIES)]
    pub query: String,
    /// Events to generate (people, auctions and bids together).
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Emit events at the generator's event rate (`--event-rate`) instead of as fast as
    /// possible.
    #[arg(long)]
    pub throttled: bool,
    /// Events per second of event time (nexmark-flink's default: 10 million).
    #[arg(long, default_value_t = 10_000_000)]
    pub event_rate: u64,
    /// How far ahead (in event time) a source subtask may run of the slowest one before it
    /// pauses: the watermark alignment of the sources (at least 1ms). By default the event
    /// time of 1,000,000 events at --event-rate: 100ms at the default rate.
    #[arg(long, value_name = "DURATION", value_parser = drift_arg)]
    pub max_watermark_drift: Option<Duration>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// A watermark drift: whole milliseconds of event time, at least one.
fn drift_arg(text: &str) -> Result<Duration, String> {
    let d = duration_arg(text)?;
    if d < Duration::from_millis(1) {
        return Err("must be at least 1ms (event time counts milliseconds)".into());
    }
    Ok(d)
}

/// Adds `query` between the events and the sink.
fn attach(query: &str, events: DataStream<Event>, sink: CountingSink) -> Result<(), CliError> {
    match query {
        "q0" => drop(queries::q0(events).sink("sink", sink)),
        "q1" => drop(queries::q1(events).sink("sink", sink)),
        "q2" => drop(queries::q2(events).sink("sink", sink)),
        "q3" => drop(queries::q3(events).sink("sink", sink)),
        "q4" => drop(queries::q4(events).sink("sink", sink)),
        "q5" => drop(queries::q5(events).sink("sink", sink)),
        "q7" => drop(queries::q7(events).sink("sink", sink)),
        "q8" => drop(queries::q8(events).sink("sink", sink)),
        other => return Err(CliError::usage(format!("unknown Nexmark query '{other}'"))),
    }
    Ok(())
}

pub fn run(args: NexmarkArgs) -> Result<(), CliError> {
    if args.events == 0 && args.run.duration.is_none() {
        return Err(CliError::usage("--events must be at least 1"));
    }
    let mut setup = Setup::new(&args.run, &format!("nexmark-{}", args.query))?;
    let env = StreamEnv::new(&format!("nexmark-{}", args.query));
    env.set_operator_chaining(!args.run.no_chaining);
    env.set_parallelism(args.run.parallelism);
    let config = NexmarkConfig {
        events_per_second: args.event_rate.max(1),
        ..NexmarkConfig::default()
    };
    let drift = args
        .max_watermark_drift
        .unwrap_or_else(|| nexmark::max_watermark_drift(config.events_per_second));
    let mut source = NexmarkSource::new(config);
    if args.run.duration.is_none() {
        source = source.with_limit(args.events);
    }
    if args.throttled {
        source = source.throttled();
    }
    let events =
        env.source_with_watermarks("nexmark", source, nexmark::watermarks_with_drift(drift));
    let sink = CountingSink::default();
    attach(&args.query, events, sink.clone())?;
    let graph = env.build()?;
    let handle = JobHandle::new(&graph, &setup.exec.checkpoint, setup.stop.clone());
    setup.watch(&handle);
    let summary = execute_job(&graph, &setup.exec, &handle, &mut |_| {})?;
    let measured = setup.finish(&summary);
    let events = summary.records;
    let results = sink.0.load(Ordering::Relaxed);
    if args.run.json {
        println!(
            "{}",
            measured.json(
                &args.query,
                events,
                &args.run,
                &format!(
                    "\"results\":{results},\"max_watermark_drift_ms\":{},",
                    drift.as_millis()
                )
            )
        );
    } else {
        println!(
            "{}",
            measured.sentence(
                &format!("nexmark {} ({results} results)", args.query),
                events
            )
        );
    }
    Ok(())
}
