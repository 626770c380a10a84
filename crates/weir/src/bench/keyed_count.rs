//! `weir bench keyed-count --records N --keys K`: the simplest stateful job — generated
//! `(key, value)` records, keyed by key, a count and a sum per key in keyed state — and a
//! counting sink. By default each key's count and sum is emitted once, when the input ends
//! (an event-time timer at the end of time, fired by the final watermark); with
//! `--emit-updates`, every record emits its key's new count and sum, like a streaming
//! `GROUP BY`. With `--value-bytes N`, each key's state also holds N bytes that change with
//! every update, so that the state is as large as a job's whose values are N bytes.

use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use weir_api::prelude::*;
use weir_connectors::generator::splitmix64;
use weir_connectors::{Event, EventGenerator};
use weir_core::config::HighAvailabilityConfig;
use weir_runtime::deploy::{Deployer, LocalDeployer};
use weir_runtime::graph::JobGraph;
use weir_runtime::{
    execute_with, ExecutionConfig, HighAvailabilityServices, JobHandle, StopHandle,
};

use super::suite::execution_config;
use super::suite::{CountingSink, RunArgs, Setup};
use crate::one_value::OneValue;
use crate::rest_args::{serve, RestArgs};
use crate::runnable::{ClusterJob, Runnable};
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct KeyedCountArgs {
    /// Records to generate.
    #[arg(long, default_value_t = 100_000_000)]
    pub records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Emit every key's updated count and sum for every record (a changelog, as a streaming
    /// GROUP BY does) instead of once per key at the end of the input.
    #[arg(long)]
    pub emit_updates: bool,
    /// Each key's count and sum expires this long after its last update (state time-to-live,
    /// cleaned up incrementally on the heap and by compactions in RocksDB): an expired key
    /// starts over from zero.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration_arg)]
    pub state_ttl: Option<std::time::Duration>,
    /// Bytes of payload each key's state holds beside its count and sum, rewritten by every
    /// update (as a job whose values are this large; incompressible, so that the state on disk
    /// is as large too). 0: a count and a sum alone.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub value_bytes: usize,
    /// Generate at most this many records per second per source subtask.
    #[arg(long, value_name = "RECORDS")]
    pub rate: Option<u64>,
    /// What each record costs the sink (e.g. 20us): a sink subtask then takes at most one
    /// record per that long, and the job runs back-pressured at the sink's pace when it is
    /// slower than the sources (with --emit-updates every record reaches it).
    #[arg(long, value_name = "DURATION", value_parser = crate::args::duration_arg)]
    pub sink_cost: Option<std::time::Duration>,
    /// Serve the REST API on this port while the benchmark runs (0: any free port, printed),
    /// so that savepoints can be taken of it (`weir savepoint keyed-count DIR --rest URL`).
    #[arg(long, value_name = "PORT")]
    pub rest_port: Option<u16>,
    /// A directory REST requests may write savepoints under (repeatable).
    #[arg(long, value_name = "DIR", requires = "rest_port")]
    pub savepoint_root: Vec<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// What one key's state holds: its count and sum, and whatever else a job keeps.
trait Tally: Value {
    fn new(value_bytes: usize) -> Self;
    /// Counts a record of `key` spending `amount`: the new count and sum.
    fn add(&mut self, key: u64, amount: u64) -> (u64, u64);
    fn totals(&self) -> (u64, u64);
}

impl Tally for (u64, u64) {
    fn new(_: usize) -> Self {
        (0, 0)
    }

    #[inline]
    fn add(&mut self, _: u64, amount: u64) -> (u64, u64) {
        self.0 += 1;
        self.1 += amount;
        *self
    }

    fn totals(&self) -> (u64, u64) {
        *self
    }
}

/// A count and sum with `--value-bytes` of payload, rewritten by every update from the key and
/// its count (a hash: as incompressible as a job's own data).
#[derive(Clone, Serialize, Deserialize)]
struct Padded {
    count: u64,
    sum: u64,
    payload: Vec<u8>,
}

impl Tally for Padded {
    fn new(value_bytes: usize) -> Self {
        Padded {
            count: 0,
            sum: 0,
            payload: vec![0; value_bytes],
        }
    }

    #[inline]
    fn add(&mut self, key: u64, amount: u64) -> (u64, u64) {
        self.count += 1;
        self.sum += amount;
        let mut word = key ^ self.count.rotate_left(32);
        for chunk in self.payload.chunks_mut(8) {
            // Every byte of the payload changes with every update.
            let z = splitmix64(word);
            word = word.wrapping_add(0x9e37_79b9_7f4a_7c15);
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        (self.count, self.sum)
    }

    fn totals(&self) -> (u64, u64) {
        (self.count, self.sum)
    }
}

/// Count and sum per key, in `S`: a [`ValueState`], or a [`TtlValueState`] with `--state-ttl`,
/// of a [`Tally`] `V`.
struct CountAndSum<S: OneValue<u64, V>, V: Tally> {
    emit_updates: bool,
    value_bytes: usize,
    config: S::Config,
}

impl<S: OneValue<u64, V>, V: Tally> Clone for CountAndSum<S, V> {
    fn clone(&self) -> Self {
        CountAndSum {
            emit_updates: self.emit_updates,
            value_bytes: self.value_bytes,
            config: self.config.clone(),
        }
    }
}

impl<S, V> KeyedProcessFunction<u64, Event, (u64, u64, u64)> for CountAndSum<S, V>
where
    S: OneValue<u64, V>,
    V: Tally,
{
    type State = S;

    fn state(&self) -> S {
        S::make("count-and-sum", &self.config)
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
        let value_bytes = self.value_bytes;
        let tally = state.get_or_insert_with(key, || {
            new = true;
            V::new(value_bytes)
        });
        let (count, sum) = tally.add(*key.key, event.amount);
        if self.emit_updates {
            out.emit((*key.key, count, sum));
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
        if let Some(tally) = state.get(key) {
            let (count, sum) = tally.totals();
            out.emit((*key.key, count, sum));
        }
        Ok(())
    }
}

/// A counting sink that takes `cost` per record: it waits the batch's cost after each batch
/// (sleeping, so that a slow sink does not take a core from the rest of the job).
#[derive(Clone)]
struct SlowSink {
    counted: CountingSink,
    cost: std::time::Duration,
}

impl<T: Send + 'static> SinkFunction<T> for SlowSink {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        let wait = self
            .cost
            .saturating_mul(u32::try_from(batch.len()).unwrap_or(u32::MAX));
        std::thread::sleep(wait);
        self.counted.write_batch(batch)
    }
}

/// The job's graph, and the sink that counts its results (in the process that runs it).
pub fn job(args: &KeyedCountArgs) -> Result<(JobGraph, CountingSink), CliError> {
    if args.keys == 0 || (args.records == 0 && args.run.duration.is_none()) {
        return Err(CliError::usage("--records and --keys must be at least 1"));
    }
    if args.run.parallelism == 0 {
        return Err(CliError::usage("--parallelism must be at least 1"));
    }
    let env = StreamEnv::new("keyed-count");
    env.set_operator_chaining(!args.run.no_chaining);
    let p = args.run.parallelism;
    env.set_parallelism(p);
    let mut generator = EventGenerator::new(7, args.keys);
    if let Some(rate) = args.rate {
        generator = generator.with_rate(rate);
    }
    if args.run.duration.is_none() {
        // Each source subtask generates its share; the first ones take the remainder.
        generator = generator.with_limit(args.records.div_ceil(p as u64));
    }
    let sink = CountingSink::default();
    let keyed = env.source("records", generator).key_by(|e: &Event| e.user);
    let counted = if args.value_bytes == 0 {
        count_and_sum::<(u64, u64)>(keyed, args)
    } else {
        count_and_sum::<Padded>(keyed, args)
    };
    match args.sink_cost {
        None => counted.sink("sink", sink.clone()),
        Some(cost) => counted.sink(
            "sink",
            SlowSink {
                counted: sink.clone(),
                cost,
            },
        ),
    };
    Ok((env.build()?, sink))
}

/// The keyed count of `keyed`, in a [`ValueState`] (or a [`TtlValueState`] with
/// `--state-ttl`) of `V`.
fn count_and_sum<V: Tally>(
    keyed: KeyedStream<Event, u64, impl Fn(&Event) -> u64 + Clone + Send + Sync + 'static>,
    args: &KeyedCountArgs,
) -> DataStream<(u64, u64, u64)> {
    let emit_updates = args.emit_updates;
    let value_bytes = args.value_bytes;
    match args.state_ttl {
        None => keyed.process(
            "count-and-sum",
            CountAndSum::<ValueState<_, V>, V> {
                emit_updates,
                value_bytes,
                config: (),
            },
        ),
        Some(ttl) => keyed.process(
            "count-and-sum",
            CountAndSum::<TtlValueState<_, V>, V> {
                emit_updates,
                value_bytes,
                config: ttl,
            },
        ),
    }
}

pub fn run(args: KeyedCountArgs) -> Result<(), CliError> {
    run_on(args, &mut LocalDeployer, false)
}

/// Runs the benchmark with its attempts deployed by `deployer`: in this process, or on a
/// cluster's task managers (`weir jobmanager -- bench keyed-count …`; the results are then
/// counted on the task managers and not reported here).
pub fn run_on(
    args: KeyedCountArgs,
    deployer: &mut dyn Deployer,
    cluster: bool,
) -> Result<(), CliError> {
    if cluster && args.run.alternate.is_some() {
        return Err(CliError::usage(
            "--alternate measures the CPU time of the process that runs the job: run it without a cluster",
        ));
    }
    if cluster && args.rest_port.is_some() {
        return Err(CliError::usage(
            "--rest-port serves a benchmark run in this process; a cluster's job manager serves its own",
        ));
    }
    let (graph, sink) = job(&args)?;
    let mut setup = Setup::new(&args.run, "keyed-count")?;
    let handle = JobHandle::new(&graph, &setup.exec.checkpoint, setup.stop.clone());
    setup.watch(&handle);
    // Never on a cluster (refused above).
    let served = match args.rest_port {
        Some(port) => {
            let rest = RestArgs {
                rest_port: Some(port),
                savepoint_root: args.savepoint_root.clone(),
                ..RestArgs::default()
            };
            Some(serve(&rest, &handle, &setup.exec, graph.max_parallelism)?)
        }
        None => None,
    };
    let summary = execute_with(&graph, &setup.exec, &handle, &mut |_| {}, deployer, None);
    if let Some(served) = served {
        served.finish();
    }
    let summary = summary?;
    let mut measured = setup.finish(&summary);
    if cluster {
        // The subtasks ran on the task managers: this process's CPU and memory say nothing.
        measured.cpu_seconds = 0.0;
        measured.peak_rss_bytes = 0;
    }
    let records = summary.records;
    let results = sink.0.load(Ordering::Relaxed);
    let extra = format!(
        "\"keys\":{},\"value_bytes\":{},\"emit_updates\":{},\"state_ttl_ms\":{},\"results\":{results},",
        args.keys,
        args.value_bytes,
        args.emit_updates,
        args.state_ttl.map_or(0, |t| t.as_millis())
    );
    if args.run.json {
        println!(
            "{}",
            measured.json("keyed-count", records, &args.run, &extra)
        );
    } else if cluster {
        println!(
            "keyed-count on the cluster: {records} events in {:.2} s = {:.2} M events/s; {} checkpoints (p50 {} ms, p99 {} ms); CPU and memory were the task managers'",
            measured.seconds,
            records as f64 / measured.seconds / 1e6,
            measured.checkpoints_completed,
            measured.p50,
            measured.p99
        );
    } else {
        println!("{}", measured.sentence("keyed-count", records));
    }
    Ok(())
}

impl Runnable for KeyedCountArgs {
    fn run(self: Box<Self>) -> Result<(), CliError> {
        run(*self)
    }

    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError> {
        // Every process writes its subtasks' state (a final checkpoint at least) where the job
        // manager reads it: a scratch directory of one process will not do.
        let Some(checkpoint_dir) = self.run.checkpoint_dir.clone() else {
            return Err(CliError::usage(
                "on a cluster, `bench keyed-count` needs --checkpoint-dir DIR (the same for every process)",
            ));
        };
        Ok(Box::new(ClusterKeyedCount {
            args: *self,
            checkpoint_dir,
        }))
    }
}

/// The keyed-count benchmark on a cluster, to measure throughput over the network, with
/// checkpoints in `checkpoint_dir`. It takes no options of its own: only the cluster's apply.
struct ClusterKeyedCount {
    args: KeyedCountArgs,
    checkpoint_dir: PathBuf,
}

impl ClusterJob for ClusterKeyedCount {
    fn build(&self) -> Result<(JobGraph, ExecutionConfig), CliError> {
        let (graph, _) = job(&self.args)?;
        Ok((
            graph,
            execution_config(&self.args.run, self.checkpoint_dir.clone())?,
        ))
    }

    fn takes_options(&self) -> bool {
        false
    }

    fn prepare(&mut self) -> Result<HighAvailabilityConfig, CliError> {
        Ok(HighAvailabilityConfig::None)
    }

    fn command(&self) -> &'static str {
        "bench keyed-count"
    }

    fn job_name(&self) -> &str {
        "keyed-count"
    }

    fn stops_on_interrupt(&self) -> bool {
        false
    }

    fn run_on(
        &self,
        deployer: &mut dyn Deployer,
        _ha: Option<&mut dyn HighAvailabilityServices>,
        _stop: &StopHandle,
    ) -> Result<(), CliError> {
        run_on(self.args.clone(), deployer, true)
    }
}
