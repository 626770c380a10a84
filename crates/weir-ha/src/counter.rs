//! The checkpoint id counter in ZooKeeper: strictly ascending ids across job managers,
//! leaders and restarts (Flink's `ZooKeeperCheckpointIDCounter`).
//!
//! `<root>/<job-id>/checkpoint-counter` holds the next id as decimal text. An id is handed out
//! by a compare-and-set that moves the znode past it, from the version just read, fenced by
//! the leader's token ([`crate::fencing`]): two writers never both succeed from one version, so
//! no id is returned twice, and a stale leader is refused. A failed or unknown write costs at
//! most a skipped id, never a repeated one.
//!
//! ```no_run
//! # use weir_ha::*;
//! # fn run(zk: &ZooKeeper, znodes: &JobZnodes, token: FencingToken) -> Result<(), HaError> {
//! use weir_checkpoint::CheckpointIdCounter;
//! let mut counter = ZooKeeperCheckpointIdCounter::new(zk, znodes, token)?;
//! let first = counter.next_id()?;
//! assert!(counter.next_id()? > first);
//! # Ok(()) }
//! ```

use crate::fencing::{FencedWrite, WriteFailure, WriteOp};
use crate::{FencingToken, HaError, JobZnodes, ZooKeeper};
use std::sync::atomic::{AtomicU64, Ordering};
use weir_checkpoint::{CheckpointIdCounter, CounterError};
use weir_core::CheckpointId;
use zookeeper_client as zk;

/// Compare-and-set attempts before giving up on a counter that keeps moving under us.
const MAX_ATTEMPTS: u32 = 64;

/// A checkpoint id counter kept in ZooKeeper, written only with a leader's fencing token.
#[derive(Debug)]
pub struct ZooKeeperCheckpointIdCounter {
    zk: ZooKeeper,
    path: String,
    token: FencingToken,
    /// The last value seen in ZooKeeper, for [`CheckpointIdCounter::current`] when it is
    /// unreachable.
    last_seen: AtomicU64,
}

impl ZooKeeperCheckpointIdCounter {
    /// The job's counter, created at 1 if this is the job's first leader.
    pub fn new(
        zk: &ZooKeeper,
        znodes: &JobZnodes,
        token: FencingToken,
    ) -> Result<ZooKeeperCheckpointIdCounter, HaError> {
        Self::starting_after(zk, znodes, token, CheckpointId(0))
    }

    /// The job's counter, raised (never lowered) so that the next id is above `max_id_found`:
    /// for a job that already has checkpoints in storage, from a run without high availability.
    pub fn starting_after(
        zk: &ZooKeeper,
        znodes: &JobZnodes,
        token: FencingToken,
        max_id_found: CheckpointId,
    ) -> Result<ZooKeeperCheckpointIdCounter, HaError> {
        zk.ensure_path(znodes.job_dir())?;
        let counter = ZooKeeperCheckpointIdCounter {
            zk: zk.clone(),
            path: znodes.checkpoint_counter(),
            token,
            last_seen: AtomicU64::new(1),
        };
        let floor = max_id_found.0.saturating_add(1);
        counter.update(
            &format!(
                "raise the checkpoint id counter {} to {floor}",
                counter.path
            ),
            |next| (next < floor).then_some(floor),
        )?;
        Ok(counter)
    }

    /// Hands out the next id, fenced: fails with [`HaError::Fenced`] once this job manager is
    /// no longer the leader, and with [`HaError::Unavailable`] while ZooKeeper is unreachable.
    pub fn next_id(&mut self) -> Result<CheckpointId, HaError> {
        let operation = format!("increment the checkpoint id counter {}", self.path);
        match self.update(&operation, |next| next.checked_add(1))? {
            (id, true) => Ok(CheckpointId(id)),
            // The last value (u64::MAX) is never handed out: nothing could follow it.
            (id, false) => Err(HaError::CounterExhausted {
                path: self.path.clone(),
                last: CheckpointId(id - 1),
            }),
        }
    }

    /// The id the next [`ZooKeeperCheckpointIdCounter::next_id`] would return, read from
    /// ZooKeeper.
    pub fn read(&self) -> Result<CheckpointId, HaError> {
        let next = match self.zk.get_data(&self.path)? {
            Some((data, _)) => parse(&self.path, &data)?,
            None => 1,
        };
        self.last_seen.fetch_max(next, Ordering::Relaxed);
        Ok(CheckpointId(next))
    }

    /// The token this counter writes with.
    pub fn fencing_token(&self) -> &FencingToken {
        &self.token
    }

    /// Reads the counter (creating it at 1 if missing) and, if `change` returns a new value,
    /// compare-and-sets it; reads again when another writer moved it in between. Returns the
    /// value read and whether this call moved the counter past it.
    // Invariant: ids ascend. The znode's value only grows (every `change` returns a larger
    // value), and a value is handed out only by the compare-and-set that moved the znode past
    // it from exactly the version it was read at.
    fn update(
        &self,
        operation: &str,
        change: impl Fn(u64) -> Option<u64>,
    ) -> Result<(u64, bool), HaError> {
        for _ in 0..MAX_ATTEMPTS {
            // The write, and for a compare-and-set the value read and the value written.
            let (op, moved) = match self.zk.get_data(&self.path)? {
                None => {
                    let create = WriteOp::Create {
                        path: self.path.clone(),
                        data: b"1".to_vec(),
                    };
                    (create, None)
                }
                Some((data, version)) => {
                    let next = parse(&self.path, &data)?;
                    self.last_seen.fetch_max(next, Ordering::Relaxed);
                    let Some(new) = change(next) else {
                        return Ok((next, false));
                    };
                    let set = WriteOp::SetData {
                        path: self.path.clone(),
                        data: new.to_string().into_bytes(),
                        version,
                    };
                    (set, Some((next, new)))
                }
            };
            let write = FencedWrite {
                token: &self.token,
                ops: vec![op],
                operation: operation.to_string(),
            };
            match self.zk.fenced_write(&write) {
                Ok(()) => match moved {
                    Some((next, new)) => {
                        self.last_seen.fetch_max(new, Ordering::Relaxed);
                        return Ok((next, true));
                    }
                    // Created at 1: read it like any other value.
                    None => continue,
                },
                // Another writer moved or created the counter since we read it: read again.
                Err(WriteFailure::Op {
                    error: zk::Error::BadVersion | zk::Error::NodeExists,
                    ..
                }) => continue,
                Err(WriteFailure::Op { error, .. }) => {
                    return Err(self.zk.error(operation, true, error))
                }
                Err(WriteFailure::Ha(e)) => return Err(e),
            }
        }
        Err(self.zk.unavailable(
            operation,
            format!("the counter changed under {MAX_ATTEMPTS} compare-and-set attempts in a row"),
        ))
    }
}

fn parse(path: &str, data: &[u8]) -> Result<u64, HaError> {
    let corrupt = |reason: String| HaError::CorruptZnode {
        path: path.to_string(),
        reason,
    };
    let text = std::str::from_utf8(data)
        .map_err(|_| corrupt(format!("not text: {} bytes", data.len())))?;
    match text.trim().parse::<u64>() {
        Ok(0) => Err(corrupt("holds 0; checkpoint ids start at 1".into())),
        Ok(v) => Ok(v),
        Err(_) => Err(corrupt(format!(
            "'{}' is not a checkpoint id",
            text.chars().take(40).collect::<String>()
        ))),
    }
}

impl CheckpointIdCounter for ZooKeeperCheckpointIdCounter {
    fn get_and_increment(&mut self) -> Result<CheckpointId, CounterError> {
        self.next_id().map_err(|e| match e {
            HaError::CounterExhausted { last, .. } => CounterError::Exhausted(last),
            e => CounterError::Unavailable(e.to_string()),
        })
    }

    /// Reads ZooKeeper; while it is unreachable, the last value seen (ids only ascend, so the
    /// real value is at least that).
    fn current(&self) -> CheckpointId {
        self.read().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the checkpoint id counter; reporting the last value seen");
            CheckpointId(self.last_seen.load(Ordering::Relaxed))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_values_parse_as_decimal_text_and_anything_else_is_corrupt() {
        assert_eq!(parse("/c", b"42").unwrap(), 42);
        assert_eq!(parse("/c", b" 7\n").unwrap(), 7);
        for bad in [&b"0"[..], b"-1", b"x", b"", &[0xff, 0xfe]] {
            let e = parse("/c", bad).unwrap_err().to_string();
            assert!(e.starts_with("znode /c is corrupt"), "{e}");
        }
    }
}
