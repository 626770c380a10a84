//! The broker the tests run against: `scripts/test.sh` starts one and exports its address in
//! `WEIR_TEST_KAFKA` (`scripts/kafka.sh`). The tests fail, they do not skip, without it. Each
//! test uses topics and transactional ids of its own.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_core::KeyGroupRange;
use weir_runtime::OperatorContext;

use crate::wire::WireClient;

/// The broker's address, host:port.
pub(crate) fn broker() -> String {
    std::env::var("WEIR_TEST_KAFKA").expect(
        "WEIR_TEST_KAFKA is not set: run the tests with scripts/test.sh, which starts a broker",
    )
}

/// A name no other test or run uses.
pub(crate) fn unique(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new topic with `partitions` partitions.
pub(crate) fn topic(name: &str, partitions: i32) -> String {
    let topic = unique(name);
    WireClient::connect(&broker())
        .unwrap()
        .create_topic(&topic, partitions)
        .unwrap();
    topic
}

/// Writes `payloads` into `partition` of `topic`, outside transactions, and waits for them.
pub(crate) fn produce(topic: &str, partition: i32, payloads: &[String]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .create()
        .unwrap();
    for payload in payloads {
        producer
            .send(
                BaseRecord::<(), str>::to(topic)
                    .partition(partition)
                    .payload(payload.as_str()),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

pub(crate) fn ctx(index: u32, parallelism: u32) -> OperatorContext {
    OperatorContext {
        uid: "kafka".into(),
        name: "kafka".into(),
        index,
        parallelism,
        max_parallelism: 128,
        key_groups: KeyGroupRange::new(0, 0),
        state_backend: Default::default(),
        metrics: Default::default(),
    }
}
