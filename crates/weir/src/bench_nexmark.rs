//! `weir bench nexmark --query Q --events N`: one Nexmark query over N generated events, from
//! the Nexmark source to a counting sink.

use std::sync::atomic::Ordering;
use weir_api::prelude::*;
use weir_connectors::nexmark::{self, queries, Event, NexmarkConfig, NexmarkSource};
use weir_runtime::{execute_job, JobHandle};

use crate::bench_suite::{CountingSink, NexmarkArgs, Setup};
use crate::CliError;

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
