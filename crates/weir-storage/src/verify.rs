//! Verifying checkpoints: every file a checkpoint references is present, has the recorded size
//! and CRC-32C, and decodes as its format; and finding the newest intact checkpoint to resume
//! from, falling back past damaged ones.

use crate::layout::CheckpointLayout;
use crate::metadata::CheckpointMetadata;
use crate::storage::CheckpointStorage;
use crate::StorageError;
use std::collections::HashSet;
use weir_core::{CheckpointId, HandleKind, StateHandle};
use weir_state::{
    incremental_format, KeyedManifest, KeyedSnapshotReader, LsmManifest, OperatorStateSnapshot,
};

/// The outcome of looking for the checkpoint to resume from.
#[derive(Debug)]
pub struct LatestCheckpoint {
    /// The newest checkpoint whose metadata and every state file are intact.
    pub metadata: Option<CheckpointMetadata>,
    /// Newer checkpoints that were skipped, with why.
    pub skipped: Vec<(CheckpointId, StorageError)>,
    /// Older intact checkpoints, oldest first (the retained set to hand the coordinator).
    pub older: Vec<CheckpointMetadata>,
}

/// One file of a checkpoint, as `verify_files` found it.
#[derive(Debug)]
pub struct FileCheck {
    pub handle: StateHandle,
    /// `None` when intact.
    pub problem: Option<StorageError>,
}

impl CheckpointStorage {
    /// Verifies a checkpoint: its metadata decodes and every state file it references has the
    /// recorded size and checksum and decodes as its format. The error names the checkpoint
    /// and the file.
    pub fn verify(&self, id: CheckpointId) -> Result<CheckpointMetadata, StorageError> {
        self.verify_with(id, &mut HashSet::new())
    }

    /// Like [`CheckpointStorage::verify`], skipping files already verified (by path and
    /// checksum) and adding the ones it verifies.
    fn verify_with(
        &self,
        id: CheckpointId,
        verified: &mut HashSet<(String, u32)>,
    ) -> Result<CheckpointMetadata, StorageError> {
        let location = self.root().to_string();
        let metadata = self
            .read_metadata(id)
            .map_err(|e| e.in_checkpoint(id.0, &location))?;
        for handle in handles(&metadata) {
            if verified.contains(&(handle.path.clone(), handle.checksum)) {
                continue;
            }
            self.verify_file(handle)
                .map_err(|e| e.in_checkpoint(id.0, &location))?;
            verified.insert((handle.path.clone(), handle.checksum));
        }
        Ok(metadata)
    }

    /// Verifies one state file: size, CRC-32C, and its format's own checks.
    pub fn verify_file(&self, handle: &StateHandle) -> Result<(), StorageError> {
        let bytes = self.read_state_file(handle)?;
        let path = self.display_state(handle);
        let corrupt = |e: weir_state::StateError| StorageError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        };
        match handle.kind {
            HandleKind::Operator => OperatorStateSnapshot::decode(&bytes)
                .map(|_| ())
                .map_err(corrupt),
            // Shared by checkpoints, or a native savepoint's own.
            HandleKind::Keyed { .. } if CheckpointLayout::is_table_file(&handle.path) => {
                check_table_file(&bytes).map_err(|reason| StorageError::Corrupt { path, reason })
            }
            HandleKind::Keyed { .. } if handle.shared => {
                incremental_format::validate_data_file(&handle.path, &bytes).map_err(corrupt)
            }
            HandleKind::Keyed { .. } if weir_state::is_manifest(&bytes) => {
                KeyedManifest::decode(&bytes).map(|_| ()).map_err(corrupt)
            }
            HandleKind::Keyed { .. } if weir_state::is_lsm_manifest(&bytes) => {
                LsmManifest::decode(&bytes).map(|_| ()).map_err(corrupt)
            }
            HandleKind::Keyed { .. } => KeyedSnapshotReader::decode_vec(bytes)
                .map(|_| ())
                .map_err(corrupt),
            // Its records' type is the job's: past size and checksum, only the header tells.
            HandleKind::Channels if bytes.starts_with(b"WEIRCHAN") => Ok(()),
            HandleKind::Channels => Err(StorageError::Corrupt {
                path,
                reason: "not channel state (no WEIRCHAN header)".into(),
            }),
        }
    }

    /// Checks every file of a checkpoint and reports each, instead of stopping at the first
    /// problem. Errors only if the metadata itself is unreadable.
    pub fn verify_files(
        &self,
        id: CheckpointId,
    ) -> Result<(CheckpointMetadata, Vec<FileCheck>), StorageError> {
        let location = self.root().to_string();
        let metadata = self
            .read_metadata(id)
            .map_err(|e| e.in_checkpoint(id.0, &location))?;
        let checks = handles(&metadata)
            .map(|handle| FileCheck {
                handle: handle.clone(),
                problem: self.verify_file(handle).err(),
            })
            .collect();
        Ok((metadata, checks))
    }

    /// Finds the newest intact checkpoint, skipping (and reporting) damaged or incomplete
    /// ones; the older intact ones are the retained set.
    pub fn find_latest(&self) -> Result<LatestCheckpoint, StorageError> {
        let mut latest = LatestCheckpoint {
            metadata: None,
            skipped: Vec::new(),
            older: Vec::new(),
        };
        let mut verified = HashSet::new();
        for id in self.list_completed()?.into_iter().rev() {
            match self.verify_with(id, &mut verified) {
                Ok(m) if latest.metadata.is_none() => latest.metadata = Some(m),
                Ok(m) => latest.older.push(m),
                Err(e) if latest.metadata.is_none() => latest.skipped.push((id, e)),
                Err(e) => {
                    tracing::warn!(checkpoint = %id, error = %e, "ignoring older damaged checkpoint")
                }
            }
        }
        latest.older.reverse();
        Ok(latest)
    }
}

/// Every handle of a checkpoint, each path once.
fn handles(metadata: &CheckpointMetadata) -> impl Iterator<Item = &StateHandle> {
    let mut seen = HashSet::new();
    metadata
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| s.handles.iter())
        .filter(move |h| seen.insert(h.path.as_str()))
}

/// Whether a handle's file belongs to its checkpoint alone (not shared).
pub fn is_private(handle: &StateHandle) -> bool {
    !handle.shared && CheckpointLayout::checkpoint_of(&handle.path).is_some()
}

/// The magic number that ends every RocksDB block-based table file.
const TABLE_FILE_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;

/// A RocksDB table file ends with its format's magic number (its size and CRC-32C were checked
/// when it was read; RocksDB checks its blocks when it opens it).
fn check_table_file(bytes: &[u8]) -> Result<(), String> {
    let tail = bytes
        .len()
        .checked_sub(8)
        .map(|start| &bytes[start..])
        .ok_or_else(|| {
            format!(
                "{} bytes is too short for a RocksDB table file",
                bytes.len()
            )
        })?;
    let mut magic = [0; 8];
    magic.copy_from_slice(tail);
    if u64::from_le_bytes(magic) != TABLE_FILE_MAGIC {
        return Err("not a RocksDB table file (bad magic number at its end)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::KeyGroupRange;

    fn table_file(storage: &CheckpointStorage, name: &str, bytes: Vec<u8>) -> StateHandle {
        let kind = HandleKind::Keyed {
            key_groups: KeyGroupRange::new(0, 128),
        };
        storage
            .write_shared_file(format!("shared/{name}"), kind, vec![bytes])
            .unwrap()
    }

    #[test]
    fn a_rocksdb_table_file_is_checked_by_its_footer_magic() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path(), "verify-test").unwrap();
        let mut good = vec![0; 40];
        good.extend_from_slice(&TABLE_FILE_MAGIC.to_le_bytes());
        let handle = table_file(&storage, "op-0-1-00.sst", good);
        storage.verify_file(&handle).unwrap();

        for (name, bytes) in [
            ("op-0-1-01.sst", vec![7; 48]),
            ("op-0-1-02.sst", vec![1, 2]),
        ] {
            let handle = table_file(&storage, name, bytes);
            let err = storage.verify_file(&handle).unwrap_err().to_string();
            assert!(
                err.contains(name) && err.contains("RocksDB table file"),
                "{err}"
            );
        }
    }
}
