//! Checkpoint storage on a local directory: durable writes (fsync of file and directory,
//! atomic rename for `_metadata`), verified reads, discovery of retained checkpoints.

use crate::layout::{CheckpointLayout, METADATA_FILE, METADATA_TEMP_FILE, SHARED_DIR};
use crate::metadata::CheckpointMetadata;
use crate::StorageError;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use weir_core::{CheckpointId, HandleKind, StateHandle};

/// A job's checkpoint storage rooted at `<checkpoint-dir>/<job>`.
#[derive(Clone, Debug)]
pub struct CheckpointStorage {
    layout: CheckpointLayout,
}

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

impl CheckpointStorage {
    /// Opens (creating if needed) the storage of job `job_name` under `checkpoint_dir`, and
    /// proves it writable so a bad path fails at start, not at the first checkpoint.
    pub fn open(checkpoint_dir: &Path, job_name: &str) -> Result<CheckpointStorage, StorageError> {
        if checkpoint_dir.exists() && !checkpoint_dir.is_dir() {
            return Err(StorageError::NotADirectory(checkpoint_dir.to_path_buf()));
        }
        let layout = CheckpointLayout::new(checkpoint_dir, job_name);
        let root = layout.root().to_path_buf();
        if root.exists() && !root.is_dir() {
            return Err(StorageError::NotADirectory(root));
        }
        let not_writable = |source| StorageError::NotWritable {
            path: root.clone(),
            source,
        };
        fs::create_dir_all(&root).map_err(not_writable)?;
        let probe = root.join(".weir-write-probe");
        File::create(&probe)
            .and_then(|mut f| f.write_all(b"probe"))
            .map_err(not_writable)?;
        fs::remove_file(&probe).map_err(not_writable)?;
        Ok(CheckpointStorage { layout })
    }

    pub fn layout(&self) -> &CheckpointLayout {
        &self.layout
    }

    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    /// Writes one private state file durably and returns its handle. The file is fsynced here;
    /// its directory entry becomes durable with the metadata's directory fsync.
    pub fn write_state_file(
        &self,
        relative: String,
        kind: HandleKind,
        bytes: &[u8],
    ) -> Result<StateHandle, StorageError> {
        let path = self.layout.resolve(&relative);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| StorageError::io(parent, e))?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        file.write_all(bytes)
            .and_then(|_| file.sync_all())
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(StateHandle {
            path: relative,
            size: bytes.len() as u64,
            checksum: crc32c::crc32c(bytes),
            kind,
            shared: false,
        })
    }

    /// Reads a state file and verifies its size and checksum against the handle.
    pub fn read_state_file(&self, handle: &StateHandle) -> Result<Vec<u8>, StorageError> {
        let path = self.layout.resolve(&handle.path);
        let bytes = fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
        if bytes.len() as u64 != handle.size {
            return Err(StorageError::Corrupt {
                path,
                reason: format!("{} bytes, expected {}", bytes.len(), handle.size),
            });
        }
        let actual = crc32c::crc32c(&bytes);
        if actual != handle.checksum {
            return Err(StorageError::Corrupt {
                path,
                reason: format!(
                    "checksum mismatch (expected {:08x}, computed {actual:08x})",
                    handle.checksum
                ),
            });
        }
        Ok(bytes)
    }

    /// Writes `_metadata` durably: temp file, fsync, atomic rename, fsync of the checkpoint
    /// directory and of the job root. Returns the bytes written.
    // Invariant: a `_metadata` file exists only complete; a crash leaves at most the temp file,
    // which readers ignore.
    pub fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<u64, StorageError> {
        let id = metadata.checkpoint.id;
        let dir = self.layout.checkpoint_dir(id);
        fs::create_dir_all(&dir).map_err(|e| StorageError::io(&dir, e))?;
        let bytes = metadata.encode()?;
        let temp = dir.join(METADATA_TEMP_FILE);
        let mut file = File::create(&temp).map_err(|e| StorageError::io(&temp, e))?;
        file.write_all(&bytes)
            .and_then(|_| file.sync_all())
            .map_err(|e| StorageError::io(&temp, e))?;
        drop(file);
        let target = dir.join(METADATA_FILE);
        fs::rename(&temp, &target).map_err(|e| StorageError::io(&target, e))?;
        sync_dir(&dir)?;
        sync_dir(self.layout.root())?;
        Ok(bytes.len() as u64)
    }

    /// Reads and verifies one checkpoint's metadata.
    pub fn read_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, StorageError> {
        let path = self.layout.metadata_path(id);
        let bytes = fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
        CheckpointMetadata::decode(&bytes, &path)
    }

    /// Ids of all checkpoint directories, complete or not, ascending.
    pub fn list_checkpoint_dirs(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let root = self.layout.root();
        let mut ids = Vec::new();
        let entries = match fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(e) => return Err(StorageError::io(root, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io(root, e))?;
            if let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(CheckpointLayout::parse_checkpoint_dir)
            {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Ids of checkpoints that have a `_metadata` file (not yet verified), ascending.
    pub fn list_completed(&self) -> Result<Vec<CheckpointId>, StorageError> {
        Ok(self
            .list_checkpoint_dirs()?
            .into_iter()
            .filter(|id| self.layout.metadata_path(*id).is_file())
            .collect())
    }

    /// The highest id of any checkpoint directory, complete or not: new ids start above it so
    /// that no id is ever reused.
    pub fn max_checkpoint_id(&self) -> Result<Option<CheckpointId>, StorageError> {
        Ok(self.list_checkpoint_dirs()?.last().copied())
    }

    /// Verifies a checkpoint: its metadata decodes and every state file it references has the
    /// recorded size and checksum.
    pub fn verify(&self, id: CheckpointId) -> Result<CheckpointMetadata, StorageError> {
        let metadata = self.read_metadata(id)?;
        for state in metadata.checkpoint.subtask_states.values() {
            for handle in &state.handles {
                self.read_state_file(handle)?;
            }
        }
        Ok(metadata)
    }

    /// Finds the newest intact checkpoint, skipping (and reporting) corrupt or incomplete ones.
    pub fn find_latest(&self) -> Result<LatestCheckpoint, StorageError> {
        let mut latest = LatestCheckpoint {
            metadata: None,
            skipped: Vec::new(),
            older: Vec::new(),
        };
        for id in self.list_completed()?.into_iter().rev() {
            match self.verify(id) {
                Ok(m) if latest.metadata.is_none() => latest.metadata = Some(m),
                Ok(m) => latest.older.push(m),
                Err(e) if latest.metadata.is_none() => latest.skipped.push((id, e)),
                Err(e) => {
                    tracing::warn!(checkpoint = %id, error = %e, "ignoring older corrupt checkpoint")
                }
            }
        }
        latest.older.reverse();
        Ok(latest)
    }

    /// Deletes a checkpoint's directory (its private files and metadata). Missing is fine:
    /// discarding is idempotent.
    pub fn discard_checkpoint(&self, id: CheckpointId) -> Result<(), StorageError> {
        remove_dir_if_exists(&self.layout.checkpoint_dir(id))
    }

    /// Deletes one file by its relative path; missing is fine. A checkpoint directory left
    /// empty by it (a late file of an aborted checkpoint) goes too.
    pub fn discard_file(&self, relative: &str) -> Result<(), StorageError> {
        let path = self.layout.resolve(relative);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(path, e)),
        }
        let in_checkpoint_dir = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .and_then(CheckpointLayout::parse_checkpoint_dir)
            .is_some();
        if let (true, Some(parent)) = (in_checkpoint_dir, path.parent()) {
            let _ = fs::remove_dir(parent); // fails, as it should, while the directory holds files
        }
        Ok(())
    }

    /// Deletes checkpoint directories without `_metadata`: checkpoints that never completed
    /// (the process died, or their files arrived after they were aborted).
    pub fn discard_incomplete(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut discarded = Vec::new();
        for id in self.list_checkpoint_dirs()? {
            if !self.layout.metadata_path(id).is_file() {
                self.discard_checkpoint(id)?;
                discarded.push(id);
            }
        }
        Ok(discarded)
    }

    /// Deletes every checkpoint of this job (`--fresh`).
    pub fn discard_all(&self) -> Result<(), StorageError> {
        for id in self.list_checkpoint_dirs()? {
            self.discard_checkpoint(id)?;
        }
        remove_dir_if_exists(&self.layout.root().join(SHARED_DIR))
    }

    /// The summed size of a checkpoint's files on disk (metadata included).
    pub fn checkpoint_dir_size(&self, id: CheckpointId) -> u64 {
        dir_size(&self.layout.checkpoint_dir(id))
    }
}

fn dir_size(path: &Path) -> u64 {
    fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn remove_dir_if_exists(path: &PathBuf) -> Result<(), StorageError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

fn sync_dir(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(path, e))
}
