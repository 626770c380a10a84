//! Fencing tokens: proof of leadership that every write to ZooKeeper carries.
//!
//! A leader's token names its ephemeral contender znode. Each write of the checkpoint id counter
//! and of the completed checkpoint store is one ZooKeeper multi-operation that starts with a
//! `check` of that znode's existence: ZooKeeper applies the write only if the znode still
//! exists, atomically. The znode goes when the leader's session expires or is
//! closed, or when it resigns, and then a newer contender leads, so a stale leader's write is
//! refused by ZooKeeper itself ([`HaError::Fenced`](crate::HaError::Fenced)), whatever the stale
//! leader believes. The epoch (the znode's sequence number) ascends with every new leader and
//! can fence anything else a leader sends, such as messages to task managers.

use std::fmt;

/// A leader's proof of leadership, valid while its contender znode exists.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// The sequence number of the leader's contender znode: greater for every later leader.
    pub epoch: u64,
    /// The ZooKeeper session that owns the znode.
    pub session_id: i64,
    /// The leader's contender znode, checked by every fenced write.
    pub znode: String,
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leader epoch {} (session {:#x}, znode {})",
            self.epoch, self.session_id, self.znode
        )
    }
}

/// One write inside a fenced multi-operation.
#[derive(Clone, Debug)]
pub(crate) enum WriteOp {
    /// A persistent znode.
    Create { path: String, data: Vec<u8> },
    /// Set data if the znode is at `version` (compare-and-set).
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// Delete, whatever the version.
    Delete { path: String },
}

impl WriteOp {
    pub fn path(&self) -> &str {
        match self {
            WriteOp::Create { path, .. }
            | WriteOp::SetData { path, .. }
            | WriteOp::Delete { path } => path,
        }
    }
}

/// A multi-operation that ZooKeeper applies only while `token`'s znode exists: all of `ops` or
/// none.
#[derive(Clone, Debug)]
pub(crate) struct FencedWrite<'a> {
    pub token: &'a FencingToken,
    pub ops: Vec<WriteOp>,
    /// What the write does, for messages ("add checkpoint 42 …").
    pub operation: String,
}

/// Why a fenced write was not applied.
#[derive(Debug)]
pub(crate) enum WriteFailure {
    /// `ops[index]` failed (a version mismatch, an existing or missing znode); nothing applied.
    Op {
        index: usize,
        error: zookeeper_client::Error,
    },
    /// Fenced, ZooKeeper unavailable, or an unknown outcome.
    Ha(crate::HaError),
}

impl From<crate::HaError> for WriteFailure {
    fn from(e: crate::HaError) -> Self {
        WriteFailure::Ha(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_shows_its_epoch_session_and_znode() {
        let t = FencingToken {
            epoch: 7,
            session_id: 0x1f,
            znode: "/weir/j/leader/_c_x-latch-0000000007".into(),
        };
        assert_eq!(
            t.to_string(),
            "leader epoch 7 (session 0x1f, znode /weir/j/leader/_c_x-latch-0000000007)"
        );
    }
}
