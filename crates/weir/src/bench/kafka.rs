//! `weir bench kafka`: records per second from topic to topic through [`KafkaSource`] and an
//! exactly-once [`KafkaSink`], beside the broker's own produce and consume rates measured with
//! the same client (librdkafka) on the same records and the same broker.
//!
//! 1. **Produce** (ceiling): N records of `--record-bytes` bytes written into a new input topic
//!    of `--partitions` partitions by one plain producer, until the last is acknowledged.
//! 2. **Consume** (ceiling): one consumer reads the N records back.
//! 3. **Topic to topic, exactly-once**: a job of `-p` subtasks reads the input topic and writes
//!    every record into a new output topic, one transaction per subtask and checkpoint, with
//!    checkpoints every `--checkpoint-interval`. The rate is N over the time from the job's
//!    start until all N records are committed in the output, as a reader of the output's raw
//!    batches and transaction markers sees them while the job runs: the last records count
//!    only once their checkpoint completed and committed. (A `read_committed` librdkafka
//!    consumer on the test broker sometimes stopped short of the committed end; the raw reader
//!    does not depend on the broker's last stable offset.)

use std::time::{Duration, Instant};

use clap::Args;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use weir_api::prelude::*;
use weir_core::config::Config;
use weir_kafka::committed::CommittedReader;
use weir_kafka::wire::WireClient;
use weir_kafka::{BytesSerializer, DeliveryGuarantee, KafkaSink, KafkaSource};
use weir_runtime::{execute, StartMode, StopHandle};

use crate::args::duration_arg;
use crate::demo::execution_config;
use crate::progress::si;
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct KafkaBenchArgs {
    /// The broker to use, host:port (topics `weir-bench-*` are created there).
    #[arg(long, value_name = "SERVERS")]
    pub bootstrap_servers: String,
    /// Records written and read.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Bytes of each record's payload.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Checkpoint interval of the job.
    #[arg(long, default_value = "1s", value_parser = duration_arg)]
    pub checkpoint_interval: Duration,
    /// Subtasks of the job.
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    /// Print one JSON object instead of sentences.
    #[arg(long)]
    pub json: bool,
}

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("{what}: {e}"))
}

pub fn run(args: KafkaBenchArgs) -> Result<(), CliError> {
    if args.records == 0 || args.parallelism == 0 || args.partitions <= 0 {
        return Err(CliError::usage(
            "--records, --parallelism and --partitions must be at least 1",
        ));
    }
    let servers = args.bootstrap_servers.as_str();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let input = format!("weir-bench-{stamp}-in");
    let output = format!("weir-bench-{stamp}-out");
    let mut admin = WireClient::bootstrap(servers).map_err(|e| failed("the broker", e))?;
    for topic in [&input, &output] {
        admin
            .create_topic(topic, args.partitions)
            .map_err(|e| failed("creating the topics", e))?;
    }

    let produce_secs = produce(servers, &input, &args)?;
    let consume_secs = consume(servers, &input, args.records)?;
    let job_secs = topic_to_topic(servers, &input, &output, &args)?;

    let rate = |secs: f64| args.records as f64 / secs.max(1e-9);
    if args.json {
        println!(
            "{{\"target\":\"kafka\",\"records\":{},\"record_bytes\":{},\"partitions\":{},\"parallelism\":{},\"checkpoint_interval_ms\":{},\"produce_records_per_second\":{:.0},\"consume_records_per_second\":{:.0},\"exactly_once_records_per_second\":{:.0}}}",
            args.records,
            args.record_bytes,
            args.partitions,
            args.parallelism,
            args.checkpoint_interval.as_millis(),
            rate(produce_secs),
            rate(consume_secs),
            rate(job_secs),
        );
    } else {
        println!(
            "kafka, {} records of {} bytes, {} partitions, checkpoints every {:?}:\n  \
             produce (ceiling)                 {:>8} records/s\n  \
             consume (ceiling)                 {:>8} records/s\n  \
             topic to topic, exactly-once, p={} {:>8} records/s ({:.0} % of produce)",
            args.records,
            args.record_bytes,
            args.partitions,
            args.checkpoint_interval,
            si(rate(produce_secs)),
            si(rate(consume_secs)),
            args.parallelism,
            si(rate(job_secs)),
            100.0 * produce_secs / job_secs,
        );
    }
    Ok(())
}

fn produce(servers: &str, topic: &str, args: &KafkaBenchArgs) -> Result<f64, CliError> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("linger.ms", "5")
        .create()
        .map_err(|e| failed("creating a producer", e))?;
    let payload = vec![b'x'; args.record_bytes];
    let started = Instant::now();
    for n in 0..args.records {
        let partition = (n % args.partitions as u64) as i32;
        let mut record = BaseRecord::<(), [u8]>::to(topic)
            .partition(partition)
            .payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(1));
                    record = back;
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(300))
        .map_err(|e| failed("producing", e))?;
    Ok(started.elapsed().as_secs_f64())
}

/// Reads `topic` from the start with `isolation` until `records` records came.
fn count_records(
    servers: &str,
    topic: &str,
    records: u64,
    isolation: &str,
    stop_waiting: &dyn Fn() -> bool,
) -> Result<(), CliError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "weir-bench")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .map_err(|e| failed("creating a consumer", e))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(|e| failed("reading the topic's metadata", e))?;
    let mut list = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            list.add_partition_offset(topic, p.id(), Offset::Beginning)
                .map_err(|e| failed("assigning", e))?;
        }
    }
    consumer.assign(&list).map_err(|e| failed("assigning", e))?;
    let mut seen = 0;
    while seen < records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => seen += 1,
            Some(Err(e)) => return Err(failed("consuming", e)),
            None if stop_waiting() => {
                return Err(CliError::usage(format!(
                    "{seen} of {records} records arrived in {topic}"
                )))
            }
            None => {}
        }
    }
    Ok(())
}

fn consume(servers: &str, topic: &str, records: u64) -> Result<f64, CliError> {
    let started = Instant::now();
    count_records(servers, topic, records, "read_uncommitted", &|| {
        started.elapsed() > Duration::from_secs(600)
    })?;
    Ok(started.elapsed().as_secs_f64())
}

fn topic_to_topic(
    servers: &str,
    input: &str,
    output: &str,
    args: &KafkaBenchArgs,
) -> Result<f64, CliError> {
    let scratch = std::env::temp_dir().join(format!("weir-bench-kafka-{}", std::process::id()));
    let mut config = Config::new();
    config.set("parallelism.default", &args.parallelism.to_string())?;
    config.set("execution.checkpointing.dir", &scratch.to_string_lossy())?;
    config.set(
        "execution.checkpointing.interval",
        &format!("{}ms", args.checkpoint_interval.as_millis()),
    )?;
    let exec = execution_config(&config, StartMode::Fresh)?;
    let env = StreamEnv::with_config("bench-kafka", &config)?;
    let sink = KafkaSink::new(servers, output, BytesSerializer)
        .guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix(&format!("{output}-tx"))
        .checkpoint_interval(args.checkpoint_interval);
    sink.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    env.source("input", KafkaSource::bytes(servers, &[input]))
        .uid("input")
        .forward()
        .sink("output", sink)
        .uid("output");
    let graph = env.build()?;
    let stop = StopHandle::new();
    let job_stop = stop.clone();
    let started = Instant::now();
    let job = std::thread::spawn(move || execute(&graph, &exec, &job_stop, &mut |_| {}));
    let counted = (|| {
        let mut output = CommittedReader::new(servers, output, false)
            .map_err(|e| failed("reading the output", e))?;
        while output.committed() < args.records {
            if job.is_finished() || started.elapsed() > Duration::from_secs(600) {
                return Err(CliError::usage(format!(
                    "{} of {} records were committed in the output",
                    output.committed(),
                    args.records
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
            output
                .catch_up()
                .map_err(|e| failed("reading the output", e))?;
        }
        Ok(())
    })();
    let secs = started.elapsed().as_secs_f64();
    stop.cancel();
    let result = job
        .join()
        .map_err(|_| CliError::usage("the job panicked"))?;
    let _ = std::fs::remove_dir_all(&scratch);
    counted?;
    result?;
    Ok(secs)
}
