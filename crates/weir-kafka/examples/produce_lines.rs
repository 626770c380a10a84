//! Writes the lines of standard input into a topic, one record per line, round-robin over the
//! topic's partitions; creates the topic first (with PARTITIONS partitions, 4 by default) if it
//! does not exist.
//!
//! `seq 1 1000 | sed 's/$/ apples and pears/' | cargo run -p weir-kafka --example produce_lines -- 127.0.0.1:9092 words`

use std::io::BufRead;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_kafka::wire::WireClient;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (broker, topic, partitions) = match args.as_slice() {
        [b, t] => (b, t, 4),
        [b, t, p] => (b, t, p.parse().expect("PARTITIONS is a number")),
        _ => {
            eprintln!("usage: produce_lines BROKER TOPIC [PARTITIONS]");
            std::process::exit(2);
        }
    };
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("{e}");
        std::process::exit(1)
    };
    let mut admin = WireClient::bootstrap(broker).unwrap_or_else(|e| fail(&e));
    let partitions = match admin.partition_count(topic).unwrap_or_else(|e| fail(&e)) {
        Some(n) => n,
        None => {
            admin
                .create_topic(topic, partitions)
                .unwrap_or_else(|e| fail(&e));
            partitions
        }
    };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .create()
        .unwrap_or_else(|e| fail(&e));
    let mut n = 0u64;
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap_or_else(|e| fail(&e));
        let mut record = BaseRecord::<(), str>::to(topic)
            .partition((n % partitions as u64) as i32)
            .payload(line.as_str());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(10));
                    record = back;
                }
            }
        }
        producer.poll(Duration::ZERO);
        n += 1;
    }
    producer
        .flush(Duration::from_secs(60))
        .unwrap_or_else(|e| fail(&e));
    eprintln!("{n} lines written to {topic} ({partitions} partitions)");
}
