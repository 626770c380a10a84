//! The completed checkpoint store in ZooKeeper: pointers to the newest `num-retained`
//! completed checkpoints, so that a new leader finds them (Flink's
//! `DefaultCompletedCheckpointStore` on ZooKeeper).
//!
//! A checkpoint's metadata is written durably to checkpoint storage first (the completion flow, step
//! 5); [`ZooKeeperCompletedCheckpointStore::add_checkpoint`] then creates its pointer at
//! `<root>/<job-id>/checkpoints/<id>` and deletes the pointers of the checkpoints it evicts, in
//! one fenced ZooKeeper transaction. The retained checkpoints and the reference counts of
//! shared files are kept by a [`StandaloneCompletedCheckpointStore`] inside, exactly as in a
//! single job manager, and updated only after ZooKeeper accepted the write: ZooKeeper and the
//! in-memory view agree, and a stale leader changes neither.
//!
//! A new leader builds the store with [`ZooKeeperCompletedCheckpointStore::recover`].

use crate::fencing::{FencedWrite, WriteFailure, WriteOp};
use crate::pointer::CheckpointPointer;
use crate::{FencingToken, HaError, JobZnodes, ZooKeeper};
use weir_checkpoint::{
    CompletedCheckpoint, CompletedCheckpointStore, Discard, StandaloneCompletedCheckpointStore,
    StoreError,
};
use weir_core::CheckpointId;
use weir_storage::CheckpointStorage;
use zookeeper_client as zk;

/// A completed checkpoint store whose retained checkpoints are recorded in ZooKeeper, written
/// only with a leader's fencing token.
#[derive(Debug)]
pub struct ZooKeeperCompletedCheckpointStore {
    pub(crate) zk: ZooKeeper,
    pub(crate) znodes: JobZnodes,
    pub(crate) token: FencingToken,
    pub(crate) storage: CheckpointStorage,
    pub(crate) num_retained: usize,
    // Invariant: holds exactly the checkpoints whose pointers this store wrote or recovered
    // and has not removed; changed only after ZooKeeper accepted the write.
    pub(crate) retained: StandaloneCompletedCheckpointStore,
}

impl ZooKeeperCompletedCheckpointStore {
    /// Records `checkpoint` (its metadata already durable in checkpoint storage) and evicts the
    /// oldest beyond `num-retained`, returning what to delete for them. Nothing changes, here
    /// or in ZooKeeper, if the write fails:
    /// - [`HaError::Fenced`]: this job manager is no longer the leader;
    /// - [`HaError::Unavailable`]: ZooKeeper is unreachable;
    /// - [`HaError::OutcomeUnknown`]: the pointer may exist; keep the checkpoint's files, a
    ///   new leader may restore from it.
    pub fn add_checkpoint(
        &mut self,
        checkpoint: CompletedCheckpoint,
    ) -> Result<Vec<Discard>, HaError> {
        let id = checkpoint.id;
        let mut ids: Vec<CheckpointId> = self.retained.all().iter().map(|c| c.id).collect();
        let Err(position) = ids.binary_search(&id) else {
            // Already recorded (a restore hands the recovered checkpoints back): a no-op.
            return Ok(self.retained.insert(checkpoint));
        };
        ids.insert(position, id);
        let evicted = &ids[..ids.len().saturating_sub(self.num_retained)];
        let mut ops = Vec::with_capacity(evicted.len() + 1);
        if !evicted.contains(&id) {
            let pointer = CheckpointPointer::new(id, self.storage.root().to_string());
            ops.push(WriteOp::Create {
                path: self.znodes.checkpoint(id),
                data: pointer.encode(),
            });
        }
        ops.extend(
            evicted
                .iter()
                .filter(|e| **e != id)
                .map(|e| WriteOp::Delete {
                    path: self.znodes.checkpoint(*e),
                }),
        );
        let operation = if evicted.is_empty() {
            format!("add checkpoint {id}")
        } else {
            let evicted: Vec<String> = evicted.iter().map(|e| e.to_string()).collect();
            format!("add checkpoint {id} and evict {}", evicted.join(", "))
        };
        self.write_pointers(ops, &operation)?;
        Ok(self.retained.insert(checkpoint))
    }

    /// Removes every pointer and returns every retained checkpoint for deletion: the job ended
    /// for good. Fails like [`ZooKeeperCompletedCheckpointStore::add_checkpoint`], changing
    /// nothing.
    pub fn discard_all(&mut self) -> Result<Vec<Discard>, HaError> {
        let ops: Vec<WriteOp> = self
            .retained
            .all()
            .iter()
            .map(|c| WriteOp::Delete {
                path: self.znodes.checkpoint(c.id),
            })
            .collect();
        self.write_pointers(ops, "remove every checkpoint pointer")?;
        Ok(self.retained.shutdown(true))
    }

    /// How many retained checkpoints reference this shared file.
    pub fn shared_ref_count(&self, path: &str) -> u32 {
        self.retained.shared_ref_count(path)
    }

    /// The token this store writes with.
    pub fn fencing_token(&self) -> &FencingToken {
        &self.token
    }

    /// Applies `ops` in one fenced transaction. A pointer to delete that is already gone, or a
    /// pointer to create that already exists with the same content (an earlier write whose
    /// outcome was unknown), is taken as done, and the rest retried.
    pub(crate) fn write_pointers(
        &self,
        mut ops: Vec<WriteOp>,
        operation: &str,
    ) -> Result<(), HaError> {
        // Each retry drops one operation, so this ends.
        loop {
            if ops.is_empty() {
                return Ok(());
            }
            let write = FencedWrite {
                token: &self.token,
                ops: ops.clone(),
                operation: operation.to_string(),
            };
            match self.zk.fenced_write(&write) {
                Ok(()) => return Ok(()),
                Err(WriteFailure::Ha(e)) => return Err(e),
                Err(WriteFailure::Op { index, error }) => {
                    match (&ops[index], error) {
                        (WriteOp::Delete { path }, zk::Error::NoNode) => {
                            tracing::warn!(%path, "checkpoint pointer already gone");
                        }
                        (WriteOp::Create { path, data }, zk::Error::NodeExists) => {
                            self.check_same_pointer(path, data)?;
                        }
                        (op, error) => {
                            let operation = format!("{operation} ({})", op.path());
                            return Err(self.zk.error(&operation, true, error));
                        }
                    }
                    ops.remove(index);
                }
            }
        }
    }

    /// Accepts an existing pointer at `path` only if it is the one we meant to write.
    fn check_same_pointer(&self, path: &str, wanted: &[u8]) -> Result<(), HaError> {
        let existing = self.zk.get_data(path)?.map(|(data, _)| data);
        if existing.as_deref() == Some(wanted) {
            return Ok(());
        }
        let show = |bytes: &[u8]| String::from_utf8_lossy(bytes).chars().take(200).collect();
        let checkpoint = path
            .rsplit('/')
            .next()
            .and_then(JobZnodes::parse_checkpoint_name)
            .unwrap_or(CheckpointId(0));
        Err(HaError::PointerConflict {
            checkpoint,
            path: path.to_string(),
            existing: existing
                .as_deref()
                .map(show)
                .unwrap_or_else(|| "(gone)".into()),
            wanted: show(wanted),
        })
    }
}

impl CompletedCheckpointStore for ZooKeeperCompletedCheckpointStore {
    /// [`ZooKeeperCompletedCheckpointStore::add_checkpoint`]. A refused add changes nothing:
    /// the coordinator aborts the checkpoint without notifying completion. Fenced, the
    /// checkpoint is certainly not recorded ([`StoreError::Fenced`]: its metadata is deleted);
    /// otherwise its files stay for whoever leads, since the pointer may exist.
    fn add(&mut self, checkpoint: CompletedCheckpoint) -> Result<Vec<Discard>, StoreError> {
        let id = checkpoint.id;
        self.add_checkpoint(checkpoint).map_err(|e| {
            tracing::error!(checkpoint = %id, error = %e, "checkpoint not recorded in ZooKeeper");
            let reason = format!("not recorded in ZooKeeper: {e}");
            // Invariant: `Fenced` only when ZooKeeper answered that the fencing check failed,
            // so no operation of the transaction was applied.
            if e.is_fenced() {
                StoreError::Fenced(reason)
            } else {
                StoreError::NotRecorded(reason)
            }
        })
    }

    fn latest(&self) -> Option<&CompletedCheckpoint> {
        self.retained.latest()
    }

    fn all(&self) -> &[CompletedCheckpoint] {
        self.retained.all()
    }

    fn is_shared_path_referenced(&self, path: &str) -> bool {
        self.retained.is_shared_path_referenced(path)
    }

    /// Without `discard_all` the pointers stay for the next leader. With it they are removed
    /// first; if ZooKeeper refuses, nothing is discarded (and the error logged).
    fn shutdown(&mut self, discard_all: bool) -> Vec<Discard> {
        if !discard_all {
            return Vec::new();
        }
        self.discard_all().unwrap_or_else(|e| {
            tracing::error!(error = %e, "checkpoint pointers not removed; keeping the checkpoints");
            Vec::new()
        })
    }
}
