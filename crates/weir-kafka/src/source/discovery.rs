//! New partitions while the job runs: the topics listed again, and the partitions no subtask
//! holds that belong to this one taken from their earliest offset.

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::{owner, Config, OpenSource, TopicPartition, Topics, REQUEST_TIMEOUT};
use crate::error::KafkaError;

/// Takes the partitions nobody holds that belong to this subtask, from their earliest
/// offset. Returns whether any was taken.
pub(super) fn discover(config: &Config, open: &mut OpenSource) -> Result<bool, KafkaError> {
    let all = list_partitions(&open.consumer, &config.topics)?;
    let new: Vec<TopicPartition> = all
        .into_iter()
        .filter(|p| !open.known.contains(p))
        .collect();
    let mut taken = false;
    for p in new {
        open.known.insert(p.clone());
        if owner(&p, open.parallelism) != open.index {
            continue;
        }
        let (low, _) = open
            .consumer
            .fetch_watermarks(&p.topic, p.partition, REQUEST_TIMEOUT)
            .map_err(|e| {
                KafkaError::client(
                    format!("reading the offsets of {}[{}]", p.topic, p.partition),
                    e,
                )
            })?;
        tracing::info!(
            topic = %p.topic,
            partition = p.partition,
            subtask = open.index,
            "reading a newly discovered partition from offset {low}"
        );
        open.hold(p, low);
        taken = true;
    }
    Ok(taken)
}

/// Every partition of the topics the source reads, as the broker lists them now.
pub(super) fn list_partitions(
    consumer: &BaseConsumer,
    topics: &Topics,
) -> Result<Vec<TopicPartition>, KafkaError> {
    let metadata = match topics {
        Topics::Names(names) if names.len() == 1 => {
            consumer.fetch_metadata(Some(&names[0]), REQUEST_TIMEOUT)
        }
        _ => consumer.fetch_metadata(None, REQUEST_TIMEOUT),
    }
    .map_err(|e| KafkaError::client("listing the topics' partitions", e))?;
    let mut partitions = Vec::new();
    for topic in metadata.topics() {
        if topic.error().is_some() || !topics.matches(topic.name()) {
            continue; // a topic that does not exist yet has no partitions yet
        }
        for partition in topic.partitions() {
            partitions.push(TopicPartition {
                topic: topic.name().to_string(),
                partition: partition.id(),
            });
        }
    }
    partitions.sort();
    Ok(partitions)
}
