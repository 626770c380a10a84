//! `CheckpointStorage`: a job's checkpoint files on a local directory or an object store —
//! durable writes, verified reads, discovery and deletion of checkpoints.

use crate::layout::{CheckpointLayout, METADATA_FILE, SHARED_DIR};
use crate::local_copy::LocalCopy;
use crate::location::{connect, Location};
use crate::metadata::CheckpointMetadata;
use crate::object_io::{Listed, ObjectIo};
use crate::StorageError;
use std::collections::BTreeSet;
use std::path::Path;
use weir_core::config::CheckpointConfig;
use weir_core::{CheckpointId, HandleKind, S3Options, StateHandle};

/// A job's checkpoint storage rooted at `<checkpoint-dir>/<job>`, where the checkpoint
/// directory is a local path, a `file://` URL or `s3://bucket/prefix`.
///
/// Every method blocks; object-store calls run on a small internal runtime. Cloning shares it.
#[derive(Clone, Debug)]
pub struct CheckpointStorage {
    pub(crate) io: ObjectIo,
    root: Location,
    /// With local recovery, the process's own copy of the state files it writes.
    local: Option<std::sync::Arc<LocalCopy>>,
}

impl CheckpointStorage {
    /// Opens (creating if needed) the storage of job `job_name` under `checkpoint_dir` (a path,
    /// or an `s3://`/`file://` URL held in a path), and proves it writable so a bad location
    /// fails at start, not at the first checkpoint. `s3://` settings come from `WEIR_S3_*`.
    pub fn open(checkpoint_dir: &Path, job_name: &str) -> Result<CheckpointStorage, StorageError> {
        let s3 = S3Options::from_env().map_err(|e| StorageError::BadLocation {
            location: checkpoint_dir.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::open_location(&checkpoint_dir.to_string_lossy(), job_name, &s3)
    }

    /// Opens the storage of `job_name` where the checkpoint options say (the directory and
    /// the `s3.*` options).
    pub fn open_configured(
        config: &CheckpointConfig,
        job_name: &str,
    ) -> Result<CheckpointStorage, StorageError> {
        let mut storage = Self::open_location(&config.dir.to_string_lossy(), job_name, &config.s3)?;
        if let Some(root) = &config.local_recovery {
            let local = LocalCopy::new(root, &crate::layout::sanitize(job_name))
                .map_err(|e| StorageError::io(root, e))?;
            storage.local = Some(std::sync::Arc::new(local));
        }
        Ok(storage)
    }

    /// With local recovery, the process's local copy of the state files it wrote.
    pub fn local_copy(&self) -> Option<&LocalCopy> {
        self.local.as_deref()
    }

    /// Opens the storage of `job_name` under `location`, proving it writable.
    pub fn open_location(
        location: &str,
        job_name: &str,
        s3: &S3Options,
    ) -> Result<CheckpointStorage, StorageError> {
        let storage = Self::connect(location, job_name, s3, true)?;
        let probe = ".weir-write-probe";
        let not_writable = |e: StorageError| match &storage.root {
            Location::Local(dir) => StorageError::NotWritable {
                path: dir.clone(),
                source: std::io::Error::other(e.to_string()),
            },
            remote => StorageError::BadLocation {
                location: remote.to_string(),
                reason: format!("not writable: {e}"),
            },
        };
        storage
            .io
            .put(probe, b"probe".to_vec())
            .map_err(not_writable)?;
        storage.io.delete(probe).map_err(not_writable)?;
        Ok(storage)
    }

    /// Opens the storage of `job_name` under `location` without writing anything (tools); a
    /// missing local directory is an error. An empty `job_name` opens `location` itself.
    pub fn open_for_reading(
        location: &str,
        job_name: &str,
        s3: &S3Options,
    ) -> Result<CheckpointStorage, StorageError> {
        Self::connect(location, job_name, s3, false)
    }

    fn connect(
        location: &str,
        job_name: &str,
        s3: &S3Options,
        create: bool,
    ) -> Result<CheckpointStorage, StorageError> {
        let base = Location::parse(location)?;
        if let Location::Local(dir) = &base {
            if dir.exists() && !dir.is_dir() {
                return Err(StorageError::NotADirectory(dir.clone()));
            }
        }
        let root = base.join(job_name);
        let (store, prefix) = connect(&root, s3, create)?;
        let local_dir = match &root {
            Location::Local(dir) => Some(dir.clone()),
            _ => None,
        };
        let io = ObjectIo::new(store, prefix, root.to_string(), local_dir);
        Ok(CheckpointStorage {
            io,
            root,
            local: None,
        })
    }

    /// Where the job's checkpoints live.
    pub fn root(&self) -> &Location {
        &self.root
    }

    /// The full name of a relative path, for messages.
    pub fn display(&self, relative: &str) -> String {
        self.io.display(relative)
    }

    /// Writes one private state file (owned by the checkpoint whose directory holds it)
    /// durably and returns its handle.
    pub fn write_state_file(
        &self,
        relative: String,
        kind: HandleKind,
        bytes: &[u8],
    ) -> Result<StateHandle, StorageError> {
        self.write(relative, kind, bytes.to_vec(), false)
    }

    /// Keeps private state of at most `inline_threshold` bytes inline (its handle carries the
    /// bytes into the checkpoint's `_metadata`: no file to create, sync and delete); writes
    /// larger state to a private file like [`CheckpointStorage::write_state_file`].
    pub fn write_or_inline_state(
        &self,
        relative: String,
        kind: HandleKind,
        bytes: Vec<u8>,
        inline_threshold: usize,
    ) -> Result<StateHandle, StorageError> {
        if bytes.len() > inline_threshold {
            return self.write(relative, kind, bytes, false);
        }
        Ok(StateHandle {
            path: relative,
            size: bytes.len() as u64,
            checksum: crc32c::crc32c(&bytes),
            kind,
            shared: false,
            inline: Some(bytes),
        })
    }

    /// Writes one shared state file (referenced by later checkpoints, deleted when none
    /// references it) durably from its chunks, written back to back, and returns its handle.
    pub fn write_shared_file(
        &self,
        relative: String,
        kind: HandleKind,
        chunks: Vec<Vec<u8>>,
    ) -> Result<StateHandle, StorageError> {
        let size = chunks.iter().map(|c| c.len() as u64).sum();
        let checksum = chunks
            .iter()
            .fold(0, |crc, c| crc32c::crc32c_append(crc, c));
        if let Some(local) = &self.local {
            let parts: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            local.put(&relative, &parts);
        }
        self.io.put_chunks(&relative, chunks)?;
        Ok(shared_handle(relative, size, checksum, kind))
    }

    /// Writes one shared state file from the local file `local`, read a part at a time
    /// (memory holds a few parts whatever the file's size), and returns its handle.
    pub fn write_shared_file_from(
        &self,
        relative: String,
        kind: HandleKind,
        local: &Path,
    ) -> Result<StateHandle, StorageError> {
        let (size, checksum) = self.io.put_file(&relative, local)?;
        if let Some(copy) = &self.local {
            copy.put_file(&relative, local);
        }
        Ok(shared_handle(relative, size, checksum, kind))
    }

    /// Copies a state file (or inline state) into the local file `dest`, a part at a time,
    /// and verifies its size and checksum against the handle; a file that fails is removed.
    pub fn fetch_state_file(&self, handle: &StateHandle, dest: &Path) -> Result<(), StorageError> {
        let path = self.display_state(handle);
        let fetched = match &handle.inline {
            Some(bytes) => std::fs::write(dest, bytes)
                .map(|_| (bytes.len() as u64, crc32c::crc32c(bytes)))
                .map_err(|source| StorageError::Io {
                    path: dest.display().to_string(),
                    source,
                }),
            None if self.local.as_ref().is_some_and(|l| l.fetch(handle, dest)) => return Ok(()),
            None => self.io.get_to_file(&handle.path, dest),
        };
        let checked = fetched.and_then(|(size, checksum)| {
            check_size(&path, size, handle.size)?;
            check_checksum(&path, checksum, handle.checksum)
        });
        if checked.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        checked
    }

    fn write(
        &self,
        relative: String,
        kind: HandleKind,
        bytes: Vec<u8>,
        shared: bool,
    ) -> Result<StateHandle, StorageError> {
        let size = bytes.len() as u64;
        let checksum = crc32c::crc32c(&bytes);
        if let Some(local) = &self.local {
            local.put(&relative, &[&bytes]);
        }
        self.io.put(&relative, bytes)?;
        Ok(StateHandle {
            path: relative,
            size,
            checksum,
            kind,
            shared,
            inline: None,
        })
    }

    /// Reads a state file (or takes inline state) and verifies its size and checksum against
    /// the handle.
    pub fn read_state_file(&self, handle: &StateHandle) -> Result<Vec<u8>, StorageError> {
        let bytes = match &handle.inline {
            Some(bytes) => bytes.clone(),
            None => match self.local.as_ref().and_then(|l| l.read(handle)) {
                Some(bytes) => return Ok(bytes),
                None => self.io.get(&handle.path)?,
            },
        };
        check_file(
            &self.display_state(handle),
            &bytes,
            handle.size,
            handle.checksum,
        )?;
        Ok(bytes)
    }

    /// The name of a handle's state for messages: its file, or its name inline in the metadata.
    pub fn display_state(&self, handle: &StateHandle) -> String {
        match handle.inline {
            None => self.display(&handle.path),
            Some(_) => format!("{} (inline in _metadata)", handle.path),
        }
    }

    /// Checks, without reading it, that a state file exists with the size its handle recorded:
    /// catches a missing or truncated file before a restore starts; the checksum is verified
    /// when the file is read.
    pub fn check_state_file_size(&self, handle: &StateHandle) -> Result<(), StorageError> {
        let size = match &handle.inline {
            Some(bytes) => bytes.len() as u64,
            None => self.io.size(&handle.path)?,
        };
        check_size(&self.display_state(handle), size, handle.size)
    }

    /// Reads any file by its relative path, unverified.
    pub fn read_file(&self, relative: &str) -> Result<Vec<u8>, StorageError> {
        self.io.get(relative)
    }

    /// Writes `_metadata` durably and atomically (a local directory: temp file, fsync, rename,
    /// fsync of the directory; an object store: one put). Returns the bytes written.
    // Invariant: a `_metadata` exists only complete; a crash leaves at most a temp file,
    // which readers ignore.
    pub fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<u64, StorageError> {
        let bytes = metadata.encode()?;
        let len = bytes.len() as u64;
        self.io.put(
            &CheckpointLayout::metadata_file(metadata.checkpoint.id),
            bytes,
        )?;
        Ok(len)
    }

    /// Reads and verifies one checkpoint's metadata.
    pub fn read_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, StorageError> {
        let relative = CheckpointLayout::metadata_file(id);
        let bytes = self.io.get(&relative)?;
        CheckpointMetadata::decode(&bytes, &self.display(&relative))
    }

    /// Ids of all checkpoint directories, complete or not, ascending.
    pub fn list_checkpoint_dirs(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut ids: Vec<CheckpointId> = self
            .io
            .list_dirs("")?
            .iter()
            .filter_map(|name| CheckpointLayout::parse_checkpoint_dir(name))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Ids of checkpoints that have a `_metadata` file (not yet verified), ascending.
    pub fn list_completed(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let mut completed = Vec::new();
        for id in self.list_checkpoint_dirs()? {
            let files = self
                .io
                .list_files(&CheckpointLayout::checkpoint_dir_name(id))?;
            let metadata = CheckpointLayout::metadata_file(id);
            if files.iter().any(|f| f.relative == metadata) {
                completed.push(id);
            }
        }
        Ok(completed)
    }

    /// The highest id of any checkpoint directory, complete or not: new ids start above it so
    /// that no id is ever reused.
    pub fn max_checkpoint_id(&self) -> Result<Option<CheckpointId>, StorageError> {
        Ok(self.list_checkpoint_dirs()?.last().copied())
    }

    /// The files of one checkpoint's directory (private files and metadata) with their sizes.
    pub fn checkpoint_files(&self, id: CheckpointId) -> Result<Vec<(String, u64)>, StorageError> {
        Ok(self
            .io
            .list_files(&CheckpointLayout::checkpoint_dir_name(id))?
            .into_iter()
            .map(|Listed { relative, size }| (relative, size))
            .collect())
    }

    /// The names of the directories directly under the root (the jobs of a checkpoint
    /// directory opened with an empty job name).
    pub fn subdirectories(&self) -> Result<Vec<String>, StorageError> {
        self.io.list_dirs("")
    }

    /// The files of the shared directory with their sizes.
    pub fn shared_files(&self) -> Result<Vec<(String, u64)>, StorageError> {
        Ok(self
            .io
            .list_files(SHARED_DIR)?
            .into_iter()
            .map(|Listed { relative, size }| (relative, size))
            .collect())
    }

    /// Deletes a checkpoint's directory (its private files and metadata; the metadata last,
    /// so a partly deleted checkpoint never looks complete). Missing is fine: discarding is
    /// idempotent.
    pub fn discard_checkpoint(&self, id: CheckpointId) -> Result<(), StorageError> {
        let dir = CheckpointLayout::checkpoint_dir_name(id);
        let mut files = self.io.list_files(&dir)?;
        // Invariant: `_metadata` goes first. A process killed halfway then leaves a directory
        // without it, which the next start deletes as incomplete — never a checkpoint that
        // looks complete but lacks some of its files.
        files.sort_by_key(|f| !f.relative.ends_with(METADATA_FILE));
        for file in files {
            self.io.delete(&file.relative)?;
        }
        if let Some(local) = &self.local {
            local.discard_dir(&dir);
        }
        self.remove_local_dir(&dir)
    }

    /// Deletes one file by its relative path; missing is fine.
    pub fn discard_file(&self, relative: &str) -> Result<(), StorageError> {
        self.io.delete(relative)?;
        if let Some(local) = &self.local {
            local.discard(relative);
        }
        if let Some(id) = CheckpointLayout::checkpoint_of(relative) {
            // A late file of an aborted checkpoint: its directory goes once empty.
            if self
                .io
                .list_files(&CheckpointLayout::checkpoint_dir_name(id))?
                .is_empty()
            {
                self.remove_local_dir(&CheckpointLayout::checkpoint_dir_name(id))?;
            }
        }
        Ok(())
    }

    /// Deletes checkpoint directories without `_metadata` (checkpoints that never completed:
    /// the process died, or their files arrived after they were aborted), and shared files no
    /// completed checkpoint references. Returns the ids of the deleted checkpoints.
    pub fn discard_incomplete(&self) -> Result<Vec<CheckpointId>, StorageError> {
        let completed: BTreeSet<CheckpointId> = self.list_completed()?.into_iter().collect();
        let mut discarded = Vec::new();
        for id in self.list_checkpoint_dirs()? {
            if !completed.contains(&id) {
                self.discard_checkpoint(id)?;
                discarded.push(id);
            }
        }
        for path in self.discard_unreferenced_shared(&completed)? {
            tracing::info!(%path, "deleted a shared state file no completed checkpoint references");
        }
        Ok(discarded)
    }

    /// Deletes the shared files that none of `completed`'s metadata references. Does nothing
    /// if some metadata cannot be read: then nobody can tell what is referenced.
    fn discard_unreferenced_shared(
        &self,
        completed: &BTreeSet<CheckpointId>,
    ) -> Result<Vec<String>, StorageError> {
        let mut referenced = BTreeSet::new();
        for id in completed {
            match self.read_metadata(*id) {
                Ok(m) => referenced.extend(
                    m.checkpoint
                        .subtask_states
                        .values()
                        .flat_map(|s| s.handles.iter())
                        .filter(|h| h.shared)
                        .map(|h| h.path.clone()),
                ),
                Err(e) => {
                    tracing::warn!(checkpoint = %id, error = %e, "cannot read metadata; keeping every shared file");
                    return Ok(Vec::new());
                }
            }
        }
        let mut deleted = Vec::new();
        for file in self.io.list_files(SHARED_DIR)? {
            if !referenced.contains(&file.relative) {
                self.io.delete(&file.relative)?;
                deleted.push(file.relative);
            }
        }
        Ok(deleted)
    }

    /// Deletes every checkpoint of this job and its shared files (`--fresh`).
    pub fn discard_all(&self) -> Result<(), StorageError> {
        for id in self.list_checkpoint_dirs()? {
            self.discard_checkpoint(id)?;
        }
        for file in self.io.list_files(SHARED_DIR)? {
            self.io.delete(&file.relative)?;
        }
        // A claim of the discarded run: its snapshot is left to the user.
        self.io.delete(crate::layout::CLAIM_FILE)?;
        self.remove_local_dir(SHARED_DIR)
    }

    /// The summed size of a checkpoint's own files (metadata included).
    pub fn checkpoint_dir_size(&self, id: CheckpointId) -> u64 {
        self.checkpoint_files(id)
            .map(|files| files.iter().map(|(_, size)| size).sum())
            .unwrap_or(0)
    }

    /// On a local directory, removes what object deletion leaves behind (empty directories,
    /// temp files of writes a crash interrupted).
    fn remove_local_dir(&self, relative: &str) -> Result<(), StorageError> {
        if let Location::Local(root) = &self.root {
            let path = root.join(relative);
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(StorageError::Io {
                        path: path.display().to_string(),
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Checks a file's size against the size its handle recorded.
fn check_size(path: &str, actual: u64, expected: u64) -> Result<(), StorageError> {
    if actual != expected {
        return Err(StorageError::Corrupt {
            path: path.to_string(),
            reason: format!("{actual} bytes, expected {expected} (truncated or torn)"),
        });
    }
    Ok(())
}

/// Checks a file's bytes against the size and CRC-32C its handle recorded.
pub(crate) fn check_file(
    path: &str,
    bytes: &[u8],
    size: u64,
    checksum: u32,
) -> Result<(), StorageError> {
    check_size(path, bytes.len() as u64, size)?;
    check_checksum(path, crc32c::crc32c(bytes), checksum)
}

/// The handle of a shared state file written at `path`.
fn shared_handle(path: String, size: u64, checksum: u32, kind: HandleKind) -> StateHandle {
    StateHandle {
        path,
        size,
        checksum,
        kind,
        shared: true,
        inline: None,
    }
}

fn check_checksum(path: &str, actual: u32, expected: u32) -> Result<(), StorageError> {
    if actual != expected {
        return Err(StorageError::Corrupt {
            path: path.to_string(),
            reason: format!("checksum mismatch (expected {expected:08x}, computed {actual:08x})"),
        });
    }
    Ok(())
}
