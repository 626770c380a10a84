//! `weir run kafka-wordcount`: counts the words of a Kafka topic and writes every count into
//! another topic, exactly once.
//!
//! ```text
//! KafkaSource ─► words ─► by word: running count ─► KafkaSink
//!  (lines, read_committed)   ValueState per word     (`word<TAB>count`, keyed by the word,
//!                                                      one transaction per subtask and checkpoint)
//! ```
//!
//! Every occurrence of a word becomes one record `word<TAB>count` (its count so far), keyed by
//! the word, so a word's counts land in one partition in order. Read committed, the output
//! holds each count of each word exactly once, whatever failures the job went through.

use std::time::Duration;

use clap::Args;
use weir_api::prelude::*;
use weir_core::CheckpointId;
use weir_kafka::{
    BadRecordPolicy, DeliveryGuarantee, KafkaSink, KafkaSource, KeyedUtf8Serializer,
    StartingOffsets,
};
use weir_runtime::operators::SinkFunction;
use weir_runtime::OperatorContext;

use crate::args::{duration_arg, JobArgs};
use crate::demo::execution_config;
use crate::runnable::{ClusterJob, Runnable};
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct KafkaWordcountArgs {
    /// The brokers to start from, host:port[,host:port…].
    #[arg(long, value_name = "SERVERS")]
    pub bootstrap_servers: String,
    /// The topic of text lines to count the words of.
    #[arg(long, value_name = "TOPIC", conflicts_with = "input_pattern")]
    pub input_topic: Option<String>,
    /// Read every topic whose name matches this regular expression instead (topics created
    /// later are picked up too).
    #[arg(long, value_name = "REGEX")]
    pub input_pattern: Option<String>,
    /// The topic the counts go to, as `word<TAB>count` records keyed by the word.
    #[arg(long, value_name = "TOPIC")]
    pub output_topic: String,
    /// none, at-least-once or exactly-once.
    #[arg(long, value_name = "GUARANTEE", default_value = "exactly-once")]
    pub delivery_guarantee: String,
    /// The start of the sink's transactional ids (`<prefix>-<subtask>-<n>`); two jobs on one
    /// cluster need different prefixes.
    #[arg(long, value_name = "PREFIX", default_value = "weir-kafka-wordcount")]
    pub transactional_id_prefix: String,
    /// transaction.timeout.ms of the sink's transactions, e.g. 10min; at least three
    /// checkpoint intervals.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, default_value = "10min")]
    pub transaction_timeout: Duration,
    /// The consumer group that completed checkpoints' offsets are committed to (for
    /// monitoring; a restore starts from the checkpoint).
    #[arg(long, value_name = "GROUP")]
    pub group_id: Option<String>,
    /// Where a fresh start reads from: earliest, latest, committed, or a time in milliseconds
    /// since the epoch.
    #[arg(long, value_name = "START", default_value = "earliest")]
    pub starting_offsets: String,
    /// How often the input topics are listed again for new partitions.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, default_value = "10s")]
    pub discovery_interval: Duration,
    /// Skip (and count) records that are not UTF-8 instead of failing.
    #[arg(long)]
    pub skip_invalid_utf8: bool,
    /// For tests: fail the attempt with this probability when a checkpoint's completion
    /// notice reaches a sink subtask, before its transaction commits (the restore must
    /// commit it).
    #[arg(long, value_name = "PROBABILITY", hide = true, default_value_t = 0.0)]
    pub fail_before_commit: f64,
    #[command(flatten)]
    pub job: JobArgs,
}

/// Keeps a running count per word; emits `(word, "word\tcount")` for every occurrence.
#[derive(Clone)]
struct WordCount;

impl KeyedProcessFunction<String, String, (String, String)> for WordCount {
    type State = ValueState<String, u64>;

    fn state(&self) -> Self::State {
        ValueState::new("count")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, String>,
        word: String,
        counts: &mut Self::State,
        out: &mut Output<(String, String)>,
    ) -> Result<(), TaskError> {
        let count = counts.get_or_insert_with(key, || 0);
        *count += 1;
        let line = format!("{word}\t{count}");
        out.emit((word, line));
        Ok(())
    }
}

/// A sink that fails its attempt, with a given probability, when a completion notice arrives
/// and before the sink commits: the failure between a checkpoint's completion and its commit
/// that a restore must repair.
#[derive(Clone)]
struct FailBeforeCommit<S> {
    sink: S,
    probability: f64,
    dice: u64,
}

impl<T: Send + 'static, S: SinkFunction<T>> SinkFunction<T> for FailBeforeCommit<S> {
    fn union_state(&self) -> bool {
        self.sink.union_state()
    }
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        self.dice = nanos ^ (u64::from(ctx.index) << 40) | 1;
        self.sink.open(ctx, restored)
    }
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        self.sink.write_batch(batch)
    }
    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        self.sink.snapshot(checkpoint)
    }
    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        // xorshift64*
        self.dice ^= self.dice >> 12;
        self.dice ^= self.dice << 25;
        self.dice ^= self.dice >> 27;
        let roll = self.dice.wrapping_mul(0x2545_f491_4f6c_dd1d) as f64 / u64::MAX as f64;
        if roll < self.probability {
            tracing::warn!("injected failure before committing checkpoint {checkpoint}");
            return Err(TaskError::Injected);
        }
        self.sink.notify_complete(checkpoint)
    }
    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.sink.notify_aborted(checkpoint)
    }
    fn finish(&mut self) -> Result<(), TaskError> {
        self.sink.finish()
    }
}

fn starting_offsets(text: &str) -> Result<StartingOffsets, CliError> {
    match text {
        "earliest" => Ok(StartingOffsets::Earliest),
        "latest" => Ok(StartingOffsets::Latest),
        "committed" => Ok(StartingOffsets::Committed),
        other => other.parse().map(StartingOffsets::Timestamp).map_err(|_| {
            CliError::usage(format!(
                "--starting-offsets {other}: expected earliest, latest, committed or a time in \
                 milliseconds since the epoch"
            ))
        }),
    }
}

pub fn run(args: KafkaWordcountArgs) -> Result<(), CliError> {
    if args.job.checkpoint_dir.is_none() {
        return Err(CliError::usage(
            "kafka-wordcount needs --checkpoint-dir DIR",
        ));
    }
    let guarantee: DeliveryGuarantee = args
        .delivery_guarantee
        .parse()
        .map_err(|e| CliError::usage(format!("--delivery-guarantee: {e}")))?;
    let config = args
        .job
        .local_config(&[("execution.checkpointing.interval", "1s")])?;
    let mut exec = execution_config(&config, args.job.start_mode())?;
    args.job.apply_restore(&mut exec);

    let servers = args.bootstrap_servers.as_str();
    let mut source = match (&args.input_topic, &args.input_pattern) {
        (Some(topic), None) => KafkaSource::utf8(servers, &[topic]),
        (None, Some(pattern)) => KafkaSource::utf8(servers, &[])
            .topic_pattern(pattern)
            .map_err(|e| CliError::usage(format!("--input-pattern: {e}")))?,
        _ => {
            return Err(CliError::usage(
                "kafka-wordcount needs --input-topic TOPIC or --input-pattern REGEX",
            ))
        }
    }
    .starting_offsets(starting_offsets(&args.starting_offsets)?)
    .discovery_interval(args.discovery_interval);
    if let Some(group) = &args.group_id {
        source = source.group_id(group);
    }
    if args.skip_invalid_utf8 {
        source = source.bad_records(BadRecordPolicy::Skip);
    }
    let skipped = source.clone();

    let mut sink = KafkaSink::new(servers, &args.output_topic, KeyedUtf8Serializer)
        .guarantee(guarantee)
        .transactional_id_prefix(&args.transactional_id_prefix)
        .transaction_timeout(args.transaction_timeout);
    if let Some(interval) = exec.checkpoint.interval {
        sink = sink.checkpoint_interval(interval);
    }
    sink.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    if !(0.0..=1.0).contains(&args.fail_before_commit) {
        return Err(CliError::usage(
            "--fail-before-commit: a probability from 0 to 1",
        ));
    }
    let sink = FailBeforeCommit {
        sink,
        probability: args.fail_before_commit,
        dice: 1,
    };

    let env = StreamEnv::with_config("kafka-wordcount", &config)?;
    env.source("lines", source)
        .uid("lines")
        .flat_map("words", |line: String| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .uid("words")
        .key_by(|word: &String| word.clone())
        .process("counts", WordCount)
        .uid("counts")
        .forward()
        .sink("output", sink)
        .uid("output");
    let graph = env.build()?;

    crate::rest_args::run_local("kafka-wordcount", "lines", &graph, &exec, &args.job.rest)?;
    let skipped = skipped.skipped();
    if skipped > 0 {
        println!("skipped {skipped} records that were not UTF-8");
    }
    Ok(())
}

impl Runnable for KafkaWordcountArgs {
    fn run(self: Box<Self>) -> Result<(), CliError> {
        run(*self)
    }

    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError> {
        Err(CliError::usage(
            "`run kafka-wordcount` runs in one process only",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_offsets_are_named_or_a_time() {
        assert_eq!(starting_offsets("latest").unwrap(), StartingOffsets::Latest);
        assert_eq!(
            starting_offsets("1700000000000").unwrap(),
            StartingOffsets::Timestamp(1_700_000_000_000)
        );
        assert!(starting_offsets("soon").is_err());
    }
}
