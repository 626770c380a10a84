//! A source split: one partition of one topic and the offset of the next record to read, and
//! which subtask a partition belongs to when nobody holds it yet.

use serde::{Deserialize, Serialize};

use crate::error::KafkaError;

/// A topic and partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// One partition a subtask reads, and where it stands. What a checkpoint records of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    pub partition: TopicPartition,
    /// The offset of the next record to read: every record before it was emitted.
    pub next_offset: i64,
}

impl Split {
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("a split always serialises")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Split, KafkaError> {
        postcard::from_bytes(bytes).map_err(|e| {
            KafkaError::Data(format!(
                "a Kafka split in the checkpoint is unreadable: {e}"
            ))
        })
    }
}

pub(crate) fn encode_partitions(partitions: &[TopicPartition]) -> Vec<u8> {
    postcard::to_allocvec(partitions).expect("partitions always serialise")
}

pub(crate) fn decode_partitions(bytes: &[u8]) -> Result<Vec<TopicPartition>, KafkaError> {
    postcard::from_bytes(bytes).map_err(|e| {
        KafkaError::Data(format!(
            "the Kafka partitions held in the checkpoint are unreadable: {e}"
        ))
    })
}

/// The subtask that reads a partition nobody holds yet: the partitions of a topic are dealt
/// round-robin, starting at a subtask chosen by the topic's name, so that a topic's partitions
/// spread over all subtasks and different topics start at different subtasks. The same on
/// every subtask and every run (Flink's `KafkaSourceEnumerator` does the same).
pub fn owner(partition: &TopicPartition, parallelism: u32) -> u32 {
    let parallelism = u64::from(parallelism.max(1));
    let start = fnv1a(partition.topic.as_bytes()) % parallelism;
    ((start + partition.partition as u64) % parallelism) as u32
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    #[test]
    fn a_topics_partitions_spread_over_every_subtask() {
        for parallelism in 1..=5 {
            let mut seen = vec![0; parallelism as usize];
            for p in 0..parallelism as i32 {
                seen[owner(&tp("words", p), parallelism) as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        }
    }

    #[test]
    fn ownership_depends_only_on_topic_partition_and_parallelism() {
        assert_eq!(owner(&tp("a", 7), 3), owner(&tp("a", 7), 3));
        assert_eq!(owner(&tp("a", 7), 1), 0);
    }

    #[test]
    fn splits_round_trip() {
        let split = Split {
            partition: tp("t", 3),
            next_offset: 42,
        };
        assert_eq!(Split::decode(&split.encode()).unwrap(), split);
        assert!(Split::decode(&[0xff]).is_err());
    }
}
