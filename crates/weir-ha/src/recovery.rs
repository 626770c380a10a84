//! Rebuilding the completed checkpoint store on takeover: from the pointers in ZooKeeper and
//! the metadata they name in checkpoint storage (recovery, after a failover).
//!
//! Pointers are read in id order. One whose data is not a pointer, or whose metadata is
//! missing or corrupt, is skipped with a warning that names it (and kept, for inspection):
//! the store falls back to the checkpoints before it. Storage that cannot be read at all is an
//! error, not a reason to skip: skipping would restore an older checkpoint than the newest
//! durable one for no good reason. If pointers exist but none can be restored, recovery fails
//! rather than start the job empty.

use crate::pointer::CheckpointPointer;
use crate::store::ZooKeeperCompletedCheckpointStore;
use crate::{FencingToken, HaError, JobZnodes, ZooKeeper};
use weir_checkpoint::{
    CompletedCheckpoint, CompletedCheckpointStore, Discard, StandaloneCompletedCheckpointStore,
};
use weir_core::CheckpointId;
use weir_storage::{CheckpointLayout, CheckpointStorage};

impl ZooKeeperCompletedCheckpointStore {
    /// The job's store as ZooKeeper records it, for the leader holding `token`; empty for a
    /// job's first leader. Checkpoints beyond `num_retained` (if it was lowered) are evicted:
    /// their pointers are removed and what to delete for them is returned.
    pub fn recover(
        zk: &ZooKeeper,
        znodes: &JobZnodes,
        token: FencingToken,
        storage: CheckpointStorage,
        num_retained: u32,
    ) -> Result<(ZooKeeperCompletedCheckpointStore, Vec<Discard>), HaError> {
        let dir = znodes.checkpoints_dir();
        zk.ensure_path(&dir)?;
        let mut ids = Vec::new();
        for name in zk.children(&dir)? {
            match JobZnodes::parse_checkpoint_name(&name) {
                Some(id) => ids.push(id),
                None => {
                    tracing::warn!(znode = %format!("{dir}/{name}"), "ignoring a znode that is not a checkpoint pointer")
                }
            }
        }
        ids.sort();
        let listed = ids.len();
        let mut recovered: Vec<CompletedCheckpoint> = Vec::with_capacity(listed);
        let mut problems = Vec::new();
        for id in ids {
            match read_checkpoint(zk, znodes, &storage, id)? {
                Ok(Some(checkpoint)) => recovered.push(checkpoint),
                Ok(None) => {}
                Err(problem) => {
                    tracing::warn!(checkpoint = %id, pointer = %znodes.checkpoint(id), %problem,
                        "skipping a checkpoint that cannot be restored; its pointer is kept for inspection");
                    problems.push(problem);
                }
            }
        }
        if recovered.is_empty() && !problems.is_empty() {
            return Err(HaError::NoRecoverableCheckpoint {
                path: dir,
                listed,
                storage: storage.root().to_string(),
                first_problem: problems.swap_remove(0),
            });
        }
        let num_retained = num_retained.max(1) as usize;
        let mut store = ZooKeeperCompletedCheckpointStore {
            zk: zk.clone(),
            znodes: znodes.clone(),
            token,
            storage,
            num_retained,
            retained: StandaloneCompletedCheckpointStore::new(num_retained as u32),
        };
        let excess = recovered.len().saturating_sub(num_retained);
        if excess > 0 {
            let ops = recovered[..excess]
                .iter()
                .map(|c| crate::fencing::WriteOp::Delete {
                    path: znodes.checkpoint(c.id),
                })
                .collect();
            store.write_pointers(
                ops,
                "remove the pointers of checkpoints beyond num-retained",
            )?;
        }
        let mut discards = Vec::new();
        for checkpoint in recovered {
            discards.extend(store.retained.insert(checkpoint));
        }
        match store.retained.latest() {
            Some(latest) => {
                tracing::info!(checkpoint = %latest.id, retained = store.retained.all().len(),
                skipped = problems.len(), "recovered the completed checkpoint store from ZooKeeper")
            }
            None => {
                tracing::info!(path = %znodes.checkpoints_dir(), "no completed checkpoints in ZooKeeper")
            }
        }
        Ok((store, discards))
    }
}

/// Reads the checkpoint a pointer names. `Ok(Ok(None))`: the pointer went meanwhile;
/// `Ok(Err(problem))`: the checkpoint cannot be restored (skip it); `Err`: storage or ZooKeeper
/// could not be read.
fn read_checkpoint(
    zk: &ZooKeeper,
    znodes: &JobZnodes,
    storage: &CheckpointStorage,
    id: CheckpointId,
) -> Result<Result<Option<CompletedCheckpoint>, String>, HaError> {
    let path = znodes.checkpoint(id);
    let Some((data, _)) = zk.get_data(&path)? else {
        return Ok(Ok(None));
    };
    let pointer = match CheckpointPointer::decode(&data, id) {
        Ok(pointer) => pointer,
        Err(reason) => return Ok(Err(format!("pointer {path}: {reason}"))),
    };
    let root = storage.root().to_string();
    if pointer.storage != root {
        tracing::warn!(checkpoint = %id, pointer = %pointer.location(), storage = %root,
            "the pointer names other checkpoint storage than this job manager's; reading from this job manager's");
    }
    let location = storage.display(&CheckpointLayout::metadata_file(id));
    match storage.read_metadata(id) {
        Ok(metadata) if metadata.checkpoint.id == id => Ok(Ok(Some(metadata.checkpoint))),
        Ok(metadata) => Ok(Err(format!(
            "metadata {location} holds checkpoint {}, not {id}",
            metadata.checkpoint.id
        ))),
        Err(e) if e.is_damage() => Ok(Err(format!("metadata missing or corrupt: {e}"))),
        Err(source) => Err(HaError::Storage {
            checkpoint: id,
            pointer: path,
            source,
        }),
    }
}
