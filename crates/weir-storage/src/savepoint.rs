//! Savepoints: self-contained, relocatable copies of a snapshot.
//!
//! A savepoint directory holds its `_metadata` (with any inline state) and every state file it
//! references, under plain file names; the handles inside hold those names, relative to the
//! directory. Moving or copying the directory keeps it restorable, and checkpoint retention
//! never touches it.
//!
//! ```text
//! <target>/savepoint-<checkpoint id>-<unix ms>/_metadata
//! <target>/savepoint-<checkpoint id>-<unix ms>/<operator uid>-<subtask>.keyed …
//! ```

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::layout::{METADATA_FILE, METADATA_TEMP_FILE};
use crate::metadata::CheckpointMetadata;
use crate::{CheckpointStorage, StorageError};
use weir_core::StateHandle;

/// A savepoint just written.
#[derive(Debug)]
pub struct WrittenSavepoint {
    pub path: PathBuf,
    pub metadata_bytes: u64,
}

fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let mut file = File::create(path).map_err(|e| StorageError::io(path, e))?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| StorageError::io(path, e))
}

/// Copies the state file of `handle` from `storage` into `dir/name` a part at a time (memory
/// holds a few parts, whatever the file's size: a table file of a large RocksDB state may not
/// fit in it), verified against the handle's size and checksum, and fsynced under a temporary
/// name before it takes its own.
fn copy_durably(
    storage: &CheckpointStorage,
    handle: &StateHandle,
    dir: &Path,
    name: &str,
) -> Result<(), StorageError> {
    let temp = dir.join(format!("{name}.inprogress"));
    let path = dir.join(name);
    storage.fetch_state_file(handle, &temp)?;
    let synced = File::options()
        .write(true)
        .open(&temp)
        .and_then(|file| file.sync_all());
    if let Err(e) = synced {
        let _ = fs::remove_file(&temp);
        return Err(StorageError::io(&temp, e));
    }
    fs::rename(&temp, &path).map_err(|e| StorageError::io(&path, e))
}

fn sync_dir(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(path, e))
}

/// Copies the snapshot described by `metadata` (its files read, and verified, from
/// `storage`) into a new savepoint directory under `target`.
pub fn write_savepoint(
    storage: &CheckpointStorage,
    metadata: &CheckpointMetadata,
    target: &Path,
) -> Result<WrittenSavepoint, StorageError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let dir = target.join(format!("savepoint-{}-{stamp}", metadata.checkpoint.id));
    if target.exists() && !target.is_dir() {
        return Err(StorageError::NotADirectory(target.to_path_buf()));
    }
    fs::create_dir_all(&dir).map_err(|e| StorageError::NotWritable {
        path: dir.clone(),
        source: e,
    })?;
    let mut copy = metadata.clone();
    for state in copy.checkpoint.subtask_states.values_mut() {
        for handle in &mut state.handles {
            // Flatten the relative path into one portable file name.
            let name = handle.path.replace('/', "__");
            if handle.is_file() {
                copy_durably(storage, handle, &dir, &name)?;
            } else {
                // Inline state stays in the metadata (verified by this read).
                storage.read_state_file(handle)?;
            }
            handle.path = name;
            handle.shared = false;
        }
    }
    let bytes = copy.encode()?;
    let temp = dir.join(METADATA_TEMP_FILE);
    write_durably(&temp, &bytes)?;
    let target_file = dir.join(METADATA_FILE);
    fs::rename(&temp, &target_file).map_err(|e| StorageError::io(&target_file, e))?;
    sync_dir(&dir)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(WrittenSavepoint {
        path: dir,
        metadata_bytes: bytes.len() as u64,
    })
}

/// Opens a savepoint (or a retained checkpoint directory) for restoring: its metadata, and a
/// storage rooted at the directory so its relative handles resolve. Every file it references
/// must exist with its recorded size, so a missing or truncated file stops the start before
/// anything runs; checksums are verified as the restore reads the files (each is read once).
pub fn open_savepoint(
    path: &Path,
) -> Result<(CheckpointStorage, CheckpointMetadata), StorageError> {
    open_checked(path, CheckpointStorage::check_state_file_size)
}

/// Opens a savepoint like [`open_savepoint`] and reads every file it references, verifying
/// its size and checksum.
pub fn verify_savepoint(
    path: &Path,
) -> Result<(CheckpointStorage, CheckpointMetadata), StorageError> {
    open_checked(path, |storage, handle| {
        storage.read_state_file(handle).map(drop)
    })
}

/// Opens a savepoint and runs `check` on every file it references.
fn open_checked(
    path: &Path,
    check: impl Fn(&CheckpointStorage, &StateHandle) -> Result<(), StorageError>,
) -> Result<(CheckpointStorage, CheckpointMetadata), StorageError> {
    let (storage, metadata) = open_unchecked(path)?;
    for state in metadata.checkpoint.subtask_states.values() {
        for handle in &state.handles {
            check(&storage, handle)?;
        }
    }
    Ok((storage, metadata))
}

/// Whether the snapshot's handles name files of its own directory (a savepoint) rather than
/// paths under a job's checkpoint root (a retained checkpoint).
pub(crate) fn is_savepoint_layout(metadata: &CheckpointMetadata) -> bool {
    metadata
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| &s.handles)
        .all(|h| !h.path.contains('/'))
}

pub(crate) fn open_unchecked(
    path: &Path,
) -> Result<(CheckpointStorage, CheckpointMetadata), StorageError> {
    let meta_path = path.join(METADATA_FILE);
    let bytes = fs::read(&meta_path).map_err(|e| StorageError::io(&meta_path, e))?;
    let metadata = CheckpointMetadata::decode(&bytes, &meta_path.display().to_string())?;
    // A savepoint's handles are relative to its own directory; a checkpoint's to the job's
    // checkpoint root, the directory above `chk-<id>`.
    let root = if is_savepoint_layout(&metadata) {
        path.to_path_buf()
    } else {
        path.parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| path.to_path_buf())
    };
    let (parent, name) = match (root.parent(), root.file_name()) {
        (Some(p), Some(n)) => (p.to_path_buf(), n.to_string_lossy().into_owned()),
        _ => {
            return Err(StorageError::Missing {
                path: path.display().to_string(),
            })
        }
    };
    let storage = CheckpointStorage::open(&parent, &name)?;
    Ok((storage, metadata))
}
