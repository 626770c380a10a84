//! `weir bench nexmark` and `weir bench keyed-count`: end-to-end throughput of event-time and
//! keyed-state jobs with checkpointing off or on, reported as one JSON object with the
//! measurements the benchmark table needs: events per second, per CPU core actually used,
//! checkpoint durations, and peak memory.
//!
//! "Per core" follows Nexmark's method: throughput divided by the average number of cores the
//! process kept busy (user + system CPU time over wall time), so a job that leaves a core idle
//! is not credited with it.

use clap::Args;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::config::{CheckpointConfig, Config, StateBackendConfig};
use weir_runtime::operators::SinkFunction;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::{ExecutionConfig, JobHandle, JobSummary, StartMode, StopHandle, TaskError};

use super::alternate::{self, Alternation};
use super::process::{cpu_seconds, proc_status_bytes};
use crate::args::{duration_arg, interval_arg, Interval};
use crate::CliError;

/// Flags every suite shares.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    /// Checkpoint interval (e.g. 1s, 10s), or `off`.
    #[arg(long, default_value = "off", value_parser = interval_arg)]
    pub checkpoint_interval: Interval,
    /// Where checkpoints go; a temporary directory (deleted afterwards) by default.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from the latest checkpoint in --checkpoint-dir instead of deleting it and
    /// starting afresh: a restore, whose duration the log reports ("restored … MB of state in
    /// … ms").
    #[arg(long, requires = "checkpoint_dir")]
    pub resume: bool,
    /// Start from this savepoint (or retained `chk-<id>` directory), as `weir run
    /// --from-savepoint` does; the log reports the restore as for --resume.
    #[arg(long, value_name = "PATH", conflicts_with = "resume")]
    pub from_savepoint: Option<PathBuf>,
    /// Run an unbounded source for this long instead of a fixed number of events.
    #[arg(long, value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Sample the resident memory this often and report the samples (`rss_samples`).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub sample_rss: Option<Duration>,
    /// Print one JSON object (the default is a sentence).
    #[arg(long)]
    pub json: bool,
    /// Measure what checkpointing costs within this one run: phases of this length (a whole
    /// multiple of the interval) alternate between checkpoints every --checkpoint-interval,
    /// triggered by the benchmark, and none (needs --duration).
    #[arg(long, value_name = "PHASE", value_parser = duration_arg)]
    pub alternate: Option<Duration>,
    /// With --alternate: trigger no checkpoints in either phase of a pair, to measure the
    /// method's own bias and spread (a control).
    #[arg(long, requires = "alternate")]
    pub alternate_control: bool,
    /// With --alternate: begin with the phase with checkpoints. A second run started with the
    /// same flags alternates in opposite step (see benchmarks/checkpoint-cost.sh).
    #[arg(long, requires = "alternate")]
    pub alternate_on_first: bool,
    /// Write every checkpoint in full (`execution.checkpointing.incremental: false`): each
    /// checkpoint's size is then the state's.
    #[arg(long)]
    pub full_checkpoints: bool,
    /// Run every operator in a task loop of its own (`pipeline.operator-chaining.enabled:
    /// false`); by default an operator fed by a forward edge runs in its producer's loop.
    #[arg(long)]
    pub no_chaining: bool,
    /// Unaligned checkpoints (`execution.checkpointing.unaligned.enabled`): barriers overtake
    /// the records queued in the channels, which are stored with the checkpoint.
    #[arg(long)]
    pub unaligned: bool,
    /// With --unaligned: checkpoints start aligned and turn unaligned at a subtask not aligned
    /// this long after the trigger (`execution.checkpointing.aligned-checkpoint-timeout`).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, requires = "unaligned")]
    pub aligned_timeout: Option<Duration>,
    /// Batches each channel between two subtasks holds (the data in flight under
    /// back-pressure, which an aligned barrier waits behind).
    #[arg(long, value_name = "BATCHES", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub channel_capacity: u32,
    /// Local recovery (`state.backend.local-recovery`): keep a copy of the state files written
    /// under DIR, which restarts (after failures injected with `WEIR_INJECT_FAILURES`) read
    /// instead of the checkpoint storage.
    #[arg(long, value_name = "DIR")]
    pub local_recovery: Option<PathBuf>,
    /// Where keyed state lives: `hashmap` or `rocksdb` (`state.backend.type`).
    #[arg(long, value_name = "TYPE", default_value = "hashmap")]
    pub state_backend: String,
    /// With `--state-backend rocksdb`: the memory each keyed subtask's state may use
    /// (`state.backend.rocksdb.memory.fixed-per-slot`), e.g. 256mb.
    #[arg(long, value_name = "SIZE")]
    pub state_memory: Option<String>,
    /// With `--state-backend rocksdb`: where the databases go (`state.backend.rocksdb.localdir`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl RunArgs {
    /// The `state.backend.*` options the flags give.
    pub fn state_backend(&self) -> Result<StateBackendConfig, CliError> {
        let mut config = Config::new();
        config.set("state.backend.type", &self.state_backend)?;
        if let Some(memory) = &self.state_memory {
            config.set("state.backend.rocksdb.memory.fixed-per-slot", memory)?;
        }
        if let Some(dir) = &self.state_dir {
            config.set("state.backend.rocksdb.localdir", &dir.to_string_lossy())?;
        }
        crate::demo::state_backend(&config)
    }
}

/// A sink that counts what reaches it and drops it.
#[derive(Clone, Default)]
pub struct CountingSink(pub Arc<AtomicU64>);

impl<T: Send + 'static> SinkFunction<T> for CountingSink {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// The execution settings of a benchmark run, and its scratch directory.
pub struct Setup {
    pub exec: ExecutionConfig,
    pub stop: StopHandle,
    scratch: Option<PathBuf>,
    sampler: Option<std::thread::JoinHandle<Vec<u64>>>,
    sampling: Arc<std::sync::atomic::AtomicBool>,
    cpu_start: f64,
    alternation: Option<Alternation>,
    alternating: Option<std::thread::JoinHandle<alternate::Measured>>,
}

/// How a benchmark runs, with checkpoints in `dir`. An alternating run has no periodic
/// checkpoints: the benchmark triggers them.
pub fn execution_config(run: &RunArgs, dir: PathBuf) -> Result<ExecutionConfig, CliError> {
    Ok(ExecutionConfig {
        checkpoint: CheckpointConfig {
            interval: run
                .checkpoint_interval
                .0
                .filter(|_| run.alternate.is_none()),
            dir,
            incremental: !run.full_checkpoints,
            unaligned: run.unaligned,
            aligned_timeout: run.aligned_timeout.unwrap_or_default(),
            local_recovery: run.local_recovery.clone(),
            // An `s3://` checkpoint directory is reached as `WEIR_S3_*` say.
            s3: weir_core::S3Options::from_env().map_err(|e| CliError::usage(e.to_string()))?,
            ..CheckpointConfig::default()
        },
        start: if run.resume {
            StartMode::Resume
        } else {
            StartMode::Fresh
        },
        // A failed final checkpoint (or any failure) restarts from the latest checkpoint
        // rather than losing the run; restarts are reported.
        restart: RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(100),
        },
        state_backend: run.state_backend()?,
        channel_capacity: run.channel_capacity as usize,
        from_savepoint: run.from_savepoint.clone(),
        failure_injection: weir_runtime::FailureInjection::from_env().map_err(CliError::usage)?,
        ..ExecutionConfig::default()
    })
}

impl Setup {
    pub fn new(run: &RunArgs, job: &str) -> Result<Setup, CliError> {
        if run.parallelism == 0 {
            return Err(CliError::usage("--parallelism must be at least 1"));
        }
        let alternation = run
            .alternate
            .map(|phase| Alternation::new(phase, run.checkpoint_interval.0, run.duration))
            .transpose()?
            .map(|a| {
                a.control(run.alternate_control)
                    .opposite(run.alternate_on_first)
            });
        let scratch = match &run.checkpoint_dir {
            Some(_) => None,
            None => {
                Some(std::env::temp_dir().join(format!("weir-bench-{job}-{}", std::process::id())))
            }
        };
        let dir = run
            .checkpoint_dir
            .clone()
            .or_else(|| scratch.clone())
            .unwrap_or_default();
        let exec = execution_config(run, dir)?;
        let stop = StopHandle::new();
        // An alternating run ends after its last phase (see `watch`).
        if let Some(duration) = run.duration.filter(|_| alternation.is_none()) {
            let timer = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(duration);
                timer.stop();
            });
        }
        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = run.sample_rss.map(|every| {
            let sampling = sampling.clone();
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                let mut next = Instant::now();
                while sampling.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        samples.push(proc_status_bytes("VmRSS:").unwrap_or(0));
                        next += every;
                    }
                    std::thread::sleep(Duration::from_millis(50).min(every));
                }
                samples
            })
        });
        Ok(Setup {
            exec,
            stop,
            scratch,
            sampler,
            sampling,
            cpu_start: cpu_seconds(),
            alternation,
            alternating: None,
        })
    }

    /// Starts the alternating phases on the job of `handle`, if the run alternates; they end
    /// the job after the last one.
    pub fn watch(&mut self, handle: &JobHandle) {
        if let Some(alternation) = self.alternation {
            self.alternating = Some(alternation.start(handle.clone()));
        }
    }

    /// Ends the run: stops sampling, deletes the scratch directory and measures.
    pub fn finish(self, summary: &JobSummary) -> Measured {
        let cpu = cpu_seconds() - self.cpu_start;
        let alternation = self.alternating.and_then(|a| a.join().ok());
        self.sampling.store(false, Ordering::Relaxed);
        let rss_samples = self.sampler.and_then(|s| s.join().ok()).unwrap_or_default();
        if let Some(scratch) = &self.scratch {
            let _ = std::fs::remove_dir_all(scratch);
        }
        let d = summary.stats.summary.end_to_end_duration_ms.snapshot();
        let channels = summary.stats.summary.persisted_data.snapshot();
        Measured {
            seconds: summary.elapsed.as_secs_f64().max(1e-9),
            cpu_seconds: cpu,
            checkpoints_completed: summary.checkpoints_completed,
            checkpoints_failed: summary.checkpoints_failed,
            p50: d.p50,
            p99: d.p99,
            channel_state_p50: channels.p50,
            channel_state_max: channels.max,
            last_checkpoint_bytes: summary.last_checkpoint.map_or(0, |c| c.size_bytes),
            restarts: summary.restarts,
            peak_rss_bytes: proc_status_bytes("VmHWM:").unwrap_or(0),
            rss_samples,
            alternation,
        }
    }
}

/// What a run measured.
pub struct Measured {
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub p50: u64,
    pub p99: u64,
    /// Bytes of channel state (in-flight data) unaligned checkpoints stored: median and most.
    pub channel_state_p50: u64,
    pub channel_state_max: u64,
    pub last_checkpoint_bytes: u64,
    pub restarts: u32,
    pub peak_rss_bytes: u64,
    pub rss_samples: Vec<u64>,
    /// What the alternating phases measured, in an alternating run.
    pub alternation: Option<alternate::Measured>,
}

impl Measured {
    /// The JSON object of a run of `query` over `events`, with `extra` fields (already
    /// formatted as `"name":value` pairs) first.
    pub fn json(&self, query: &str, events: u64, run: &RunArgs, extra: &str) -> String {
        let rate = events as f64 / self.seconds;
        let cores = self.cpu_seconds / self.seconds;
        let per_core = if self.cpu_seconds > 0.0 {
            events as f64 / self.cpu_seconds
        } else {
            0.0
        };
        let interval = run
            .checkpoint_interval
            .0
            .map_or("null".to_string(), |i| format!("\"{}ms\"", i.as_millis()));
        let samples: Vec<String> = self.rss_samples.iter().map(u64::to_string).collect();
        let alternation = self
            .alternation
            .as_ref()
            .map_or(String::new(), alternate::Measured::json_field);
        format!(
            "{{\"query\":\"{query}\",{extra}{alternation}\"events\":{events},\"parallelism\":{},\"checkpoint_interval\":{interval},\"seconds\":{:.3},\"events_per_second\":{rate:.0},\"cores_used\":{cores:.2},\"events_per_second_per_core\":{per_core:.0},\"checkpoints_completed\":{},\"checkpoints_failed\":{},\"checkpoint_duration_p50_ms\":{},\"checkpoint_duration_p99_ms\":{},\"channel_state_bytes_p50\":{},\"channel_state_bytes_max\":{},\"last_checkpoint_bytes\":{},\"restarts\":{},\"peak_rss_bytes\":{},\"rss_samples\":[{}]}}",
            run.parallelism,
            self.seconds,
            self.checkpoints_completed,
            self.checkpoints_failed,
            self.p50,
            self.p99,
            self.channel_state_p50,
            self.channel_state_max,
            self.last_checkpoint_bytes,
            self.restarts,
            self.peak_rss_bytes,
            samples.join(","),
        )
    }

    /// One sentence for a terminal.
    pub fn sentence(&self, what: &str, events: u64) -> String {
        let alternation = self
            .alternation
            .as_ref()
            .map_or(String::new(), |a| format!("\n{}", a.sentence()));
        format!(
            "{what}: {events} events in {:.2} s = {:.2} M events/s ({:.2} M/s per core, {:.2} cores busy); {} checkpoints (p50 {} ms, p99 {} ms); peak RSS {} MiB",
            self.seconds,
            events as f64 / self.seconds / 1e6,
            events as f64 / self.cpu_seconds.max(1e-9) / 1e6,
            self.cpu_seconds / self.seconds,
            self.checkpoints_completed,
            self.p50,
            self.p99,
            self.peak_rss_bytes >> 20,
        ) + &alternation
    }
}
