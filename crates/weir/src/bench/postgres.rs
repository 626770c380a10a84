//! `weir bench postgres`: the PostgreSQL connectors against the server's own ceiling, on the
//! same rows and the same server.
//!
//! - **Sink**: a bounded job writes N generated rows `(id, customer, amount)` through
//!   [`PostgresSink`] (append, exactly-once: a prepared transaction per subtask and
//!   checkpoint) with checkpoints every `--checkpoint-interval`; the ceiling is one plain
//!   binary `COPY` of the same N rows into a table of the same shape.
//! - **CDC stream**: a job reads an empty table through [`PostgresCdcSource`]; then one
//!   `INSERT … SELECT generate_series` adds N rows; the rate is N over the time from the first
//!   change the job receives to the last. The ceiling beside it is the insert itself.
//! - **CDC snapshot**: the same source started on the N rows: the rate of the chunked
//!   snapshot read.
//!
//! Everything happens in tables `weir_bench_*` of the database `--url` names, dropped first.

use clap::Args;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator};
use weir_core::config::Config;
use weir_postgres::{
    admin, Change, Decimal, DeliveryGuarantee, PgUrl, PostgresCdcSource, PostgresSink,
    Value as PgValue,
};
use weir_runtime::{execute, StartMode, StopHandle};

use crate::args::duration_arg;
use crate::demo::execution_config;
use crate::progress::si;
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct PostgresBenchArgs {
    /// The database to use: postgres://user:password@host:port/database (wal_level=logical,
    /// max_prepared_transactions > 0).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Rows written and read.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Checkpoint interval of the jobs.
    #[arg(long, default_value = "1s", value_parser = duration_arg)]
    pub checkpoint_interval: Duration,
    /// Sink subtasks.
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    /// Rows per write of the sink (per upsert statement).
    #[arg(long, default_value_t = 4096)]
    pub batch_size: usize,
    /// Print one JSON object instead of sentences.
    #[arg(long)]
    pub json: bool,
}

const TABLE: &str =
    "(id bigint PRIMARY KEY, customer bigint NOT NULL, amount numeric(12,2) NOT NULL)";

pub fn run(args: PostgresBenchArgs) -> Result<(), CliError> {
    let url = PgUrl::parse(&args.url).map_err(|e| CliError::usage(format!("--url: {e}")))?;
    if args.rows == 0 || args.parallelism == 0 {
        return Err(CliError::usage(
            "--rows and --parallelism must be at least 1",
        ));
    }
    let sql = |s: &str| admin::execute(&url, s).map_err(|e| CliError::usage(e.to_string()));
    sql(&format!(
        "DROP TABLE IF EXISTS weir_bench_copy, weir_bench_sink, weir_bench_upsert, weir_bench_cdc;
         CREATE TABLE weir_bench_copy {TABLE}; CREATE TABLE weir_bench_sink {TABLE};
         CREATE TABLE weir_bench_upsert {TABLE}; CREATE TABLE weir_bench_cdc {TABLE};"
    ))?;
    let scratch = tempfile_dir()?;
    let rows_per_subtask = args.rows.div_ceil(args.parallelism as u64);
    let total = rows_per_subtask * args.parallelism as u64;

    // The ceiling: one binary COPY of the same rows.
    let generator = EventGenerator::new(7, 10_000);
    let rows: Vec<Vec<PgValue>> = (0..args.parallelism)
        .flat_map(|split| (0..rows_per_subtask).map(move |n| (split, n)))
        .map(|(split, n)| row(&generator.event(split, n), split))
        .collect();
    let started = Instant::now();
    admin::copy_in(&url, "weir_bench_copy", &rows).map_err(|e| CliError::usage(e.to_string()))?;
    let copy_secs = started.elapsed().as_secs_f64();
    drop(rows);

    // The sink, exactly once, in a bounded job: appending, then upserting (into an empty
    // table: every row takes the `ON CONFLICT` statement's insert path).
    let sink_secs = sink_run(
        &url,
        &scratch,
        &args,
        rows_per_subtask,
        "weir_bench_sink",
        false,
    )?;
    let upsert_secs = sink_run(
        &url,
        &scratch,
        &args,
        rows_per_subtask,
        "weir_bench_upsert",
        true,
    )?;
    for table in ["weir_bench_sink", "weir_bench_upsert"] {
        let written = count(&url, table)?;
        if written != total {
            return Err(CliError::usage(format!(
                "the sink wrote {written} rows into {table}, expected {total}"
            )));
        }
    }

    // CDC: the stream, then the snapshot.
    let (insert_secs, stream_secs) = cdc_stream(&url, &scratch, total, args.checkpoint_interval)?;
    let snapshot_secs = cdc_snapshot(&url, &scratch, total, args.checkpoint_interval)?;
    let _ = std::fs::remove_dir_all(&scratch);

    let rate = |secs: f64| total as f64 / secs.max(1e-9);
    if args.json {
        println!(
            "{{\"target\":\"postgres\",\"rows\":{total},\"parallelism\":{},\"checkpoint_interval_ms\":{},\"copy_rows_per_second\":{:.0},\"sink_exactly_once_rows_per_second\":{:.0},\"sink_exactly_once_upsert_rows_per_second\":{:.0},\"insert_rows_per_second\":{:.0},\"cdc_stream_rows_per_second\":{:.0},\"cdc_snapshot_rows_per_second\":{:.0}}}",
            args.parallelism,
            args.checkpoint_interval.as_millis(),
            rate(copy_secs),
            rate(sink_secs),
            rate(upsert_secs),
            rate(insert_secs),
            rate(stream_secs),
            rate(snapshot_secs),
        );
    } else {
        println!(
            "postgres, {total} rows, checkpoints every {:?}:\n  \
             COPY (ceiling)               {:>8} rows/s\n  \
             sink, exactly-once, p={}      {:>8} rows/s ({:.0} % of COPY)\n  \
             … upserting                  {:>8} rows/s ({:.0} % of COPY)\n  \
             INSERT … SELECT (ceiling)    {:>8} rows/s\n  \
             CDC from the slot            {:>8} rows/s\n  \
             CDC snapshot (chunked read)  {:>8} rows/s",
            args.checkpoint_interval,
            si(rate(copy_secs)),
            args.parallelism,
            si(rate(sink_secs)),
            100.0 * copy_secs / sink_secs,
            si(rate(upsert_secs)),
            100.0 * copy_secs / upsert_secs,
            si(rate(insert_secs)),
            si(rate(stream_secs)),
            si(rate(snapshot_secs)),
        );
    }
    Ok(())
}

/// Writes the generated rows through the sink, exactly once, with checkpoints; the seconds.
fn sink_run(
    url: &PgUrl,
    scratch: &std::path::Path,
    args: &PostgresBenchArgs,
    rows_per_subtask: u64,
    table: &str,
    upsert: bool,
) -> Result<f64, CliError> {
    let mut config = Config::new();
    config.set("parallelism.default", &args.parallelism.to_string())?;
    config.set(
        "execution.checkpointing.dir",
        &scratch.join(table).to_string_lossy(),
    )?;
    config.set(
        "execution.checkpointing.interval",
        &format!("{}ms", args.checkpoint_interval.as_millis()),
    )?;
    let exec = execution_config(&config, StartMode::Fresh)?;
    let env = StreamEnv::with_config("bench-postgres-sink", &config)?;
    let sink = PostgresSink::new(url.clone(), table);
    let sink = if upsert { sink.upsert() } else { sink.append() }
        .guarantee(DeliveryGuarantee::ExactlyOnce)
        .batch_size(args.batch_size)
        .transaction_prefix(table);
    sink.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    env.source(
        "events",
        SplitTagged(
            EventGenerator::new(7, 10_000).with_limit(rows_per_subtask),
            0,
        ),
    )
    .map("rows", |(split, e): (u32, Event)| row(&e, split))
    .forward()
    .sink("postgres", sink)
    .uid("postgres");
    let graph = env.build()?;
    let started = Instant::now();
    execute(&graph, &exec, &StopHandle::new(), &mut |_| {})?;
    Ok(started.elapsed().as_secs_f64())
}

/// A generated event as a row of the benchmark tables; ids are unique across splits.
fn row(event: &Event, split: u32) -> Vec<PgValue> {
    vec![
        PgValue::Int(((split as i64) << 40) | event.seq as i64),
        PgValue::Int(event.user as i64),
        PgValue::Numeric(Decimal::new(event.amount as i64 * 100 + 25, 2)),
    ]
}

/// The generator's events with the split they came from (which keeps ids unique): each
/// subtask of a fresh run reads the split of its own index.
#[derive(Clone)]
struct SplitTagged(EventGenerator, u32);

impl SourceFunction<(u32, Event)> for SplitTagged {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.1 = ctx.index;
        self.0.open(ctx, restored)
    }
    fn poll_batch(
        &mut self,
        batch: &mut Vec<(u32, Event)>,
        max: usize,
    ) -> Result<SourceStatus, TaskError> {
        let mut events = Vec::with_capacity(max);
        let status = self.0.poll_batch(&mut events, max)?;
        let split = self.1;
        batch.extend(events.into_iter().map(|e| (split, e)));
        Ok(status)
    }
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        self.0.snapshot_position()
    }
}

fn count(url: &PgUrl, table: &str) -> Result<u64, CliError> {
    let rows = admin::query(url, &format!("SELECT count(*) FROM {table}"))
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

fn tempfile_dir() -> Result<std::path::PathBuf, CliError> {
    let dir = std::env::temp_dir().join(format!("weir-bench-postgres-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::usage(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// Counts changes; the bench watches the count.
#[derive(Clone)]
struct Counting(Arc<AtomicU64>, Arc<std::sync::Mutex<Option<Instant>>>);

impl SinkFunction<Change> for Counting {
    fn write_batch(&mut self, batch: Vec<Change>) -> Result<(), TaskError> {
        if !batch.is_empty() {
            let mut first = self.1.lock().expect("not poisoned");
            first.get_or_insert_with(Instant::now);
        }
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs a CDC job over `weir_bench_cdc` until it has seen `expect` changes; `before` runs once
/// the job reads. Returns how long `before` took and the time from the first change to the
/// last.
fn cdc_job(
    url: &PgUrl,
    scratch: &std::path::Path,
    name: &str,
    expect: u64,
    interval: Duration,
    before: impl FnOnce() -> Result<f64, CliError>,
) -> Result<(f64, f64), CliError> {
    let mut config = Config::new();
    config.set("parallelism.default", "1")?;
    config.set(
        "execution.checkpointing.dir",
        &scratch.join(name).to_string_lossy(),
    )?;
    config.set(
        "execution.checkpointing.interval",
        &format!("{}ms", interval.as_millis()),
    )?;
    let exec = execution_config(&config, StartMode::Fresh)?;
    let env = StreamEnv::with_config(name, &config)?;
    let source = PostgresCdcSource::new(url.clone(), &["weir_bench_cdc"], "weir_bench")
        .map_err(|e| CliError::usage(e.to_string()))?;
    let seen = Arc::new(AtomicU64::new(0));
    let first = Arc::new(std::sync::Mutex::new(None));
    env.source("cdc", source)
        .uid("cdc")
        .sink("count", Counting(seen.clone(), first.clone()));
    let graph = env.build()?;
    let stop = StopHandle::new();
    let job_stop = stop.clone();
    let job = std::thread::spawn(move || execute(&graph, &exec, &job_stop, &mut |_| {}));
    // The source has created its slot once the first checkpoint exists… or simply soon:
    // wait until it is there before writing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !slot_exists(url)? {
        if Instant::now() > deadline || job.is_finished() {
            stop.cancel();
            return Err(CliError::usage("the CDC job did not create its slot"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before_secs = before()?;
    while seen.load(Ordering::Relaxed) < expect {
        if job.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let last = Instant::now();
    stop.cancel();
    let result = job
        .join()
        .map_err(|_| CliError::usage("the CDC job panicked"))?;
    result?;
    let got = seen.load(Ordering::Relaxed);
    if got < expect {
        return Err(CliError::usage(format!(
            "the CDC job read {got} changes, expected {expect}"
        )));
    }
    let first = first.lock().expect("not poisoned").unwrap_or(last);
    // The job's replication connection may take a moment to go after the job has ended.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = admin::execute(url, "SELECT pg_drop_replication_slot('weir_bench')") {
        if Instant::now() > deadline || !e.to_string().contains("is active") {
            return Err(CliError::usage(e.to_string()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((before_secs, last.duration_since(first).as_secs_f64()))
}

fn slot_exists(url: &PgUrl) -> Result<bool, CliError> {
    let rows = admin::query(
        url,
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_bench' AND active",
    )
    .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .is_some_and(|v| v == "1"))
}

fn cdc_stream(
    url: &PgUrl,
    scratch: &std::path::Path,
    rows: u64,
    interval: Duration,
) -> Result<(f64, f64), CliError> {
    cdc_job(
        url,
        scratch,
        "bench-postgres-cdc-stream",
        rows,
        interval,
        || {
            let started = Instant::now();
            admin::execute(
            url,
            &format!(
                "INSERT INTO weir_bench_cdc SELECT g, g % 10000, (g % 10000)::numeric / 100 FROM generate_series(1, {rows}) g"
            ),
        )
        .map_err(|e| CliError::usage(e.to_string()))?;
            Ok(started.elapsed().as_secs_f64())
        },
    )
}

fn cdc_snapshot(
    url: &PgUrl,
    scratch: &std::path::Path,
    rows: u64,
    interval: Duration,
) -> Result<f64, CliError> {
    cdc_job(
        url,
        scratch,
        "bench-postgres-cdc-snapshot",
        rows,
        interval,
        || Ok(0.0),
    )
    .map(|(_, s)| s)
}
