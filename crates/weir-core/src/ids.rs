//! Identifiers: jobs, operators, subtasks and checkpoints.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A job's id, shown as 32 hex digits like Flink's `JobID`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u128);

impl JobId {
    /// A job id derived from the job's name, so that a job keeps its id across restarts.
    pub fn from_name(name: &str) -> JobId {
        let hi = fnv1a64(name.as_bytes(), 0xcbf2_9ce4_8422_2325) as u128;
        let lo = fnv1a64(name.as_bytes(), 0x8422_2325_cbf2_9ce4) as u128;
        JobId(hi << 64 | lo)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobId({self})")
    }
}

/// An operator's id: a stable 64-bit hash of its `uid`, which is how state is matched to
/// operators on restore. The uid string itself is kept beside it in the job graph and in
/// checkpoint metadata for messages.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OperatorId(pub u64);

impl OperatorId {
    /// The operator id of a uid. FNV-1a: fixed by its specification, the same on every
    /// platform and Rust version.
    pub fn from_uid(uid: &str) -> OperatorId {
        OperatorId(fnv1a64(uid.as_bytes(), 0xcbf2_9ce4_8422_2325))
    }
}

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperatorId({self})")
    }
}

fn fnv1a64(bytes: &[u8], seed: u64) -> u64 {
    let mut hash = seed;
    for b in bytes {
        hash ^= *b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// One parallel instance of an operator.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct SubtaskId {
    pub operator: OperatorId,
    pub index: u32,
}

impl SubtaskId {
    pub fn new(operator: OperatorId, index: u32) -> SubtaskId {
        SubtaskId { operator, index }
    }
}

impl fmt::Display for SubtaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.operator, self.index)
    }
}

/// A checkpoint's id. Ids strictly increase over the life of a job, across restarts.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default, Serialize, Deserialize,
)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_ids_are_stable_hashes_of_uids() {
        assert_eq!(
            OperatorId::from_uid("counts"),
            OperatorId::from_uid("counts")
        );
        assert_ne!(
            OperatorId::from_uid("counts"),
            OperatorId::from_uid("count")
        );
        // Pinned: changing the function would orphan every existing checkpoint.
        assert_eq!(OperatorId::from_uid("").0, 0xcbf2_9ce4_8422_2325);
        assert_eq!(OperatorId::from_uid("a").0, 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn job_ids_print_as_32_hex_digits() {
        assert_eq!(JobId::from_name("demo").to_string().len(), 32);
    }
}
