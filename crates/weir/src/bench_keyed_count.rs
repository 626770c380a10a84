//! `weir bench keyed-count --records N --keys K`: the simplest stateful job — generated
//! `(key, value)` records, keyed by key, a count and a sum per key in keyed state — and a
//! counting sink. By default each key's count and sum is emitted once, when the input ends
//! (an event-time timer at the end of time, fired by the final watermark); with
//! `--emit-updates`, every record emits its key's new count and sum, like a streaming
//! `GROUP BY`.

use std::sync::atomic::Ordering;
use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator};
use weir_runtime::execute;

use crate::bench_suite::{CountingSink, KeyedCountArgs, Setup};
use crate::CliError;

/// Count and sum per key.
#[derive(Clone)]
struct CountAndSum {
    emit_updates: bool,
}

impl KeyedProcessFunction<u64, Event, (u64, u64, u64)> for CountAndSum {
    type State = ValueState<u64, (u64, u64)>;

    fn state(&self) -> Self::State {
        ValueState::new("count-and-sum")
    }

    #[inline]
    fn process_element(
        &mut self,
        key: &CurrentKey<'_, u64>,
        event: Event,
        state: &mut Self::State,
        ctx: &mut TimerContext<'_, u64>,
        out: &mut Output<(u64, u64, u64)>,
    ) -> Result<(), TaskError> {
        let mut new = false;
        let (count, sum) = state.get_or_insert_with(key, || {
            new = true;
            (0, 0)
        });
        *count += 1;
        *sum += event.amount;
        if self.emit_updates {
            out.emit((*key.key, *count, *sum));
        } else if new {
            ctx.register_event_time_timer(i64::MAX);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &CurrentKey<'_, u64>,
        _timer: Timer,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, u64>,
        out: &mut Output<(u64, u64, u64)>,
    ) -> Result<(), TaskError> {
        if let Some((count, sum)) = state.get(key) {
            out.emit((*key.key, *count, *sum));
        }
        Ok(())
    }
}

pub fn run(args: KeyedCountArgs) -> Result<(), CliError> {
    if args.keys == 0 || (args.records == 0 && args.run.duration.is_none()) {
        return Err(CliError::usage("--records and --keys must be at least 1"));
    }
    let setup = Setup::new(&args.run, "keyed-count")?;
    let env = StreamEnv::new("keyed-count");
    let p = args.run.parallelism;
    env.set_parallelism(p);
    let mut generator = EventGenerator::new(7, args.keys);
    if args.run.duration.is_none() {
        // Each source subtask generates its share; the first ones take the remainder.
        generator = generator.with_limit(args.records.div_ceil(p as u64));
    }
    let sink = CountingSink::default();
    env.source("records", generator)
        .key_by(|e: &Event| e.user)
        .process(
            "count-and-sum",
            CountAndSum {
                emit_updates: args.emit_updates,
            },
        )
        .sink("sink", sink.clone());
    let summary = execute(&env.build()?, &setup.exec, &setup.stop, &mut |_| {})?;
    let measured = setup.finish(&summary);
    let records = summary.records;
    let results = sink.0.load(Ordering::Relaxed);
    let extra = format!(
        "\"keys\":{},\"emit_updates\":{},\"results\":{results},",
        args.keys, args.emit_updates
    );
    if args.run.json {
        println!(
            "{}",
            measured.json("keyed-count", records, &args.run, &extra)
        );
    } else {
        println!("{}", measured.sentence("keyed-count", records));
    }
    Ok(())
}
