//! The exactly-once sink's transactions: their ids, what a checkpoint records of them, and
//! what a restore does with them — commit those a completed checkpoint recorded, fence and
//! abort those of attempts that never reached one.
//!
//! # Transactional ids
//!
//! Each transaction gets a transactional id used for it alone:
//! `{prefix}-{subtask}-{sequence}`, where the sequence counts the subtask's transactions
//! (0, 1, 2, …) and is recorded in every checkpoint. A producer id and epoch therefore name
//! exactly one transaction, so committing a recorded one again can never commit a later
//! transaction by mistake. The ids are consecutive rather than named after checkpoints because
//! checkpoint ids have gaps (a checkpoint a source never started, or one declined before the
//! barrier reached the sink): after a crash the ids a failed attempt may have left open are
//! found by walking the sequence from the recorded one until an id that was never used.
//!
//! # The producer id and epoch
//!
//! librdkafka does not tell which producer id and epoch it was given. So before a producer
//! initialises a fresh id, the sink initialises it itself (`InitProducerId`): a never-used id
//! answers epoch 0, and the producer's own initialisation then keeps the producer id and bumps
//! the epoch by one, as Kafka does for every re-initialisation. The sink records that
//! identity; a commit with a wrong epoch is refused by the coordinator as fenced, never applied
//! to another transaction.
//!
//! # Restore
//!
//! Every subtask's state (its next sequence and its prepared transactions) is union state.
//! New subtask `i` takes care of the old subtasks `j` with `j % parallelism == i`:
//! 1. commits every transaction `j` recorded, by `EndTxn(commit)` with the recorded producer id
//!    and epoch at the id's transaction coordinator (a transaction already committed commits
//!    again without effect);
//! 2. initialises the ids `{prefix}-{j}-{s}` for `s` from `j`'s recorded next sequence on,
//!    which fences any producer still using one and aborts its open transaction, until an id
//!    that was never used (epoch 0).
//!
//! Its own transactions continue from where that walk over its own ids (`j == i`) stopped; a
//! subtask without an old counterpart walks its ids from 0. Nothing else initialises the
//! recorded ids, so step 1 always runs before any producer could touch them.

use serde::{Deserialize, Serialize};
use weir_core::CheckpointId;

use crate::error::KafkaError;
use crate::wire::{ProducerIdentity, WireClient};

/// A transaction flushed on a barrier and waiting for its checkpoint to complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PreparedTransaction {
    pub(crate) transactional_id: String,
    pub(crate) producer: ProducerIdentity,
    /// The checkpoint whose barrier closed it.
    pub(crate) checkpoint: CheckpointId,
}

/// What one subtask records in a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SubtaskTransactions {
    pub(crate) subtask: u32,
    /// The sequence number of the subtask's next transaction: every id before it was used.
    pub(crate) next_sequence: u64,
    /// Transactions not yet known to be committed, oldest first.
    pub(crate) prepared: Vec<PreparedTransaction>,
}

impl SubtaskTransactions {
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("transactions always serialise")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<SubtaskTransactions, KafkaError> {
        postcard::from_bytes(bytes).map_err(|e| {
            KafkaError::Data(format!(
                "the Kafka sink's transactions in the checkpoint are unreadable: {e}"
            ))
        })
    }
}

/// The id of transaction `sequence` of `subtask`.
pub(crate) fn transactional_id(prefix: &str, subtask: u32, sequence: u64) -> String {
    format!("{prefix}-{subtask}-{sequence}")
}

/// What new subtask `index` of `parallelism` does on restore.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RestorePlan {
    /// Recorded transactions to commit, in order.
    pub(crate) commit: Vec<PreparedTransaction>,
    /// Old subtasks whose ids to fence from the given sequence on; this subtask's own ids
    /// come first.
    pub(crate) fence_from: Vec<(u32, u64)>,
}

/// Decides what new subtask `index` does with the restored `states` (those of every old
/// subtask; empty on a fresh start).
pub(crate) fn plan_restore(
    index: u32,
    parallelism: u32,
    states: &[SubtaskTransactions],
) -> RestorePlan {
    let mut mine: Vec<&SubtaskTransactions> = states
        .iter()
        .filter(|s| s.subtask % parallelism.max(1) == index)
        .collect();
    mine.sort_by_key(|s| (s.subtask != index, s.subtask));
    let commit = mine
        .iter()
        .flat_map(|s| s.prepared.iter().cloned())
        .collect();
    let mut fence_from: Vec<(u32, u64)> =
        mine.iter().map(|s| (s.subtask, s.next_sequence)).collect();
    if !mine.iter().any(|s| s.subtask == index) {
        fence_from.insert(0, (index, 0));
    }
    RestorePlan { commit, fence_from }
}

/// Connections to transaction coordinators, found through the bootstrap servers.
pub(crate) struct Coordinators {
    bootstrap: String,
    client: Option<WireClient>,
    coordinators: std::collections::HashMap<String, WireClient>,
}

impl Coordinators {
    pub(crate) fn new(bootstrap: &str) -> Coordinators {
        Coordinators {
            bootstrap: bootstrap.to_string(),
            client: None,
            coordinators: Default::default(),
        }
    }

    /// The connection to `transactional_id`'s coordinator.
    fn coordinator(&mut self, transactional_id: &str) -> Result<&mut WireClient, KafkaError> {
        if self.client.is_none() {
            self.client = Some(WireClient::bootstrap(&self.bootstrap)?);
        }
        let address = self
            .client
            .as_mut()
            .expect("connected above")
            .transaction_coordinator(transactional_id)?;
        if !self.coordinators.contains_key(&address) {
            let client = WireClient::connect(&address)?;
            self.coordinators.insert(address.clone(), client);
        }
        Ok(self.coordinators.get_mut(&address).expect("inserted above"))
    }

    /// Initialises `transactional_id`: fences its producers, aborts its open transaction.
    pub(crate) fn init(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
    ) -> Result<ProducerIdentity, KafkaError> {
        self.coordinator(transactional_id)?
            .init_producer_id(transactional_id, timeout_ms)
    }

    /// Commits a recorded transaction.
    pub(crate) fn commit(&mut self, transaction: &PreparedTransaction) -> Result<(), KafkaError> {
        self.coordinator(&transaction.transactional_id)?
            .end_transaction(&transaction.transactional_id, transaction.producer, true)
    }
}

/// Carries out `plan`: commits the recorded transactions, then fences and aborts what failed
/// attempts may have left open. Returns the sequence this subtask continues from, and the
/// identity of that (never used, now initialised) id.
pub(crate) fn restore(
    coordinators: &mut Coordinators,
    prefix: &str,
    index: u32,
    plan: &RestorePlan,
    timeout_ms: i32,
) -> Result<(u64, ProducerIdentity), KafkaError> {
    for transaction in &plan.commit {
        coordinators
            .commit(transaction)
            .map_err(|e| KafkaError::Broker {
                what: format!(
                "committing transaction {} of completed checkpoint {} on restore (if the broker \
                 aborted it, its transaction timeout was too short)",
                transaction.transactional_id, transaction.checkpoint
            ),
                message: e.to_string(),
            })?;
        tracing::info!(
            transactional_id = %transaction.transactional_id,
            checkpoint = %transaction.checkpoint,
            "committed a transaction of a completed checkpoint on restore"
        );
    }
    let mut own = None;
    for &(subtask, from) in &plan.fence_from {
        let mut sequence = from;
        loop {
            let id = transactional_id(prefix, subtask, sequence);
            let identity = coordinators.init(&id, timeout_ms)?;
            if identity.epoch == 0 {
                if subtask == index {
                    own = Some((sequence, identity));
                }
                break;
            }
            tracing::info!(transactional_id = %id, "fenced a transaction of a failed attempt");
            sequence += 1;
        }
    }
    own.ok_or_else(|| {
        KafkaError::Config(format!("no transactional ids planned for subtask {index}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(subtask: u32, next_sequence: u64, prepared: &[&str]) -> SubtaskTransactions {
        SubtaskTransactions {
            subtask,
            next_sequence,
            prepared: prepared
                .iter()
                .map(|id| PreparedTransaction {
                    transactional_id: id.to_string(),
                    producer: ProducerIdentity { id: 1, epoch: 1 },
                    checkpoint: CheckpointId(1),
                })
                .collect(),
        }
    }

    #[test]
    fn a_fresh_subtask_walks_its_own_ids_from_zero() {
        let plan = plan_restore(1, 2, &[]);
        assert!(plan.commit.is_empty());
        assert_eq!(plan.fence_from, vec![(1, 0)]);
    }

    #[test]
    fn scaling_down_hands_old_subtasks_to_the_same_residue_own_first() {
        let states = [
            state(0, 5, &["p-0-4"]),
            state(1, 3, &[]),
            state(2, 7, &["p-2-6"]),
            state(3, 1, &[]),
        ];
        let plan = plan_restore(0, 2, &states);
        assert_eq!(plan.fence_from, vec![(0, 5), (2, 7)]);
        let ids: Vec<_> = plan
            .commit
            .iter()
            .map(|t| t.transactional_id.as_str())
            .collect();
        assert_eq!(ids, ["p-0-4", "p-2-6"]);
        assert_eq!(plan_restore(1, 2, &states).fence_from, vec![(1, 3), (3, 1)]);
    }

    #[test]
    fn scaling_up_gives_new_subtasks_their_ids_from_zero() {
        let states = [state(0, 5, &[])];
        assert_eq!(plan_restore(0, 3, &states).fence_from, vec![(0, 5)]);
        assert_eq!(plan_restore(2, 3, &states).fence_from, vec![(2, 0)]);
    }

    #[test]
    fn states_round_trip() {
        let s = state(3, 9, &["p-3-8"]);
        assert_eq!(SubtaskTransactions::decode(&s.encode()).unwrap(), s);
    }
}
