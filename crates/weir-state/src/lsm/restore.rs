//! Restoring from a native RocksDB checkpoint, two ways:
//!
//! - **In place** ([`fetch_native`]): a RocksDB subtask gets the files of the old subtask
//!   sharing the most key groups with it fetched into a directory, which its
//!   [`LsmStore`](super::LsmStore) then opens as its database and clips to the subtask's key
//!   groups ([`LsmStore::clip`](super::LsmStore::clip)); nothing of it is read out or written
//!   again, and after a restore of the job's own checkpoint the first checkpoint references
//!   the table files already uploaded instead of uploading them again.
//! - **Read out** ([`read_native`]): the other old subtasks' databases (a restore to fewer
//!   subtasks), and every database restored into the heap backend, are fetched into a scratch
//!   directory, opened read-only, and the key groups the restoring subtask owns read out in
//!   Weir's snapshot format — so either backend restores it, at any parallelism, through the
//!   same path as every other snapshot.

use super::frozen::{LsmFrozen, Source};
use super::store::backend_error;
use crate::chain::SharedStateFile;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use crate::lsm_manifest::{LsmFile, LsmManifest};
use crate::snapshot_reader::KeyedSnapshotReader;
use rocksdb::{Options, DB};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// A native checkpoint's database fetched into a directory of its own, for a subtask's store
/// to open in place ([`LsmStore::open`](super::LsmStore::open)).
pub struct NativeState {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) key_groups: KeyGroupRange,
    pub(crate) max_parallelism: u32,
    /// The tables the database holds, with their kinds.
    pub(crate) tables: Vec<(String, TableKind)>,
    /// For a restore of the job's own checkpoint: that checkpoint and the uploaded copy of each
    /// table file, which later checkpoints may reference instead of uploading the file again.
    pub(crate) uploaded: Option<(u64, HashMap<String, Arc<SharedStateFile>>)>,
}

impl std::fmt::Debug for NativeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeState")
            .field("dir", &self.dir.path())
            .field("key_groups", &self.key_groups)
            .field("tables", &self.tables)
            .field("reuses_uploads", &self.uploaded.is_some())
            .finish()
    }
}

impl NativeState {
    /// The key groups the database holds.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.key_groups
    }

    /// The job's number of key groups when the database was written.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }
}

/// Fetches the files of the native snapshot `manifest` of checkpoint `checkpoint` into a new
/// directory under `scratch`, to be opened in place. `owned`: the checkpoint is one of the
/// job's own, whose uploaded table files later checkpoints may reference (never those of a
/// snapshot the job does not own: a savepoint, another run's checkpoint).
pub fn fetch_native(
    manifest: &LsmManifest,
    checkpoint: u64,
    owned: bool,
    scratch: &Path,
    fetch: &mut dyn FnMut(&LsmFile, &Path) -> Result<(), String>,
) -> Result<NativeState, StateError> {
    let dir = fetch_files(manifest, scratch, fetch)?;
    let uploaded = owned.then(|| {
        let files = manifest
            .files
            .iter()
            .map(|f| (f.name.clone(), Arc::new(f.file.clone())))
            .collect();
        (checkpoint, files)
    });
    Ok(NativeState {
        dir,
        key_groups: manifest.key_groups,
        max_parallelism: manifest.max_parallelism,
        tables: manifest.tables.clone(),
        uploaded,
    })
}

/// A database restored from a native checkpoint into a scratch directory, opened read-only;
/// the directory goes when it is dropped.
pub(crate) struct RestoredDb {
    // Dropped before `_dir`: the database closes before its files go.
    db: DB,
    _dir: tempfile::TempDir,
}

impl RestoredDb {
    pub(crate) fn db(&self) -> &DB {
        &self.db
    }
}

/// The key groups of `range` held by the native snapshot `manifest`, as a reader. `fetch`
/// copies a table file, verified, to the path it is given: a directory of its own
/// under `scratch`, removed before this returns.
pub fn read_native(
    manifest: &LsmManifest,
    range: KeyGroupRange,
    scratch: &Path,
    fetch: &mut dyn FnMut(&LsmFile, &Path) -> Result<(), String>,
) -> Result<KeyedSnapshotReader, StateError> {
    let held = manifest.key_groups;
    let start = held.start.max(range.start);
    let covered = KeyGroupRange::new(start, held.end.min(range.end).max(start));
    let restored = Arc::new(open(manifest, scratch, fetch)?);
    let tables: Vec<Box<dyn FrozenTable>> = manifest
        .tables
        .iter()
        .map(|(name, kind)| {
            Box::new(LsmFrozen::new(
                Arc::from(name.as_str()),
                *kind,
                manifest.max_parallelism,
                covered,
                0,
                Source::Restored(restored.clone()),
            )) as Box<dyn FrozenTable>
        })
        .collect();
    let bytes = crate::snapshot_format::encode_keyed_snapshot(&tables, covered)?;
    drop(tables);
    drop(restored);
    KeyedSnapshotReader::decode_vec(bytes)
}

fn open(
    manifest: &LsmManifest,
    scratch: &Path,
    fetch: &mut dyn FnMut(&LsmFile, &Path) -> Result<(), String>,
) -> Result<RestoredDb, StateError> {
    let dir = fetch_files(manifest, scratch, fetch)?;
    let options = Options::default();
    let families = DB::list_cf(&options, dir.path())
        .map_err(|e| backend_error(format!("restored RocksDB state is unusable: {e}")))?;
    let db = DB::open_cf_for_read_only(&options, dir.path(), families, false)
        .map_err(|e| backend_error(format!("restored RocksDB state is unusable: {e}")))?;
    Ok(RestoredDb { db, _dir: dir })
}

/// The files of `manifest`, fetched (and verified by `fetch`) into a new directory under
/// `scratch`, with RocksDB's small files beside them.
fn fetch_files(
    manifest: &LsmManifest,
    scratch: &Path,
    fetch: &mut dyn FnMut(&LsmFile, &Path) -> Result<(), String>,
) -> Result<tempfile::TempDir, StateError> {
    std::fs::create_dir_all(scratch).map_err(|e| {
        backend_error(format!(
            "cannot create the directory {} to restore RocksDB state in: {e}",
            scratch.display()
        ))
    })?;
    let dir = tempfile::Builder::new()
        .prefix("weir-rocksdb-restore-")
        .tempdir_in(scratch)
        .map_err(|e| {
            backend_error(format!(
                "cannot make a directory in {} to restore RocksDB state in: {e}",
                scratch.display()
            ))
        })?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.path().join(name), bytes).map_err(|e| {
            backend_error(format!(
                "cannot write {} to restore RocksDB state: {e}",
                dir.path().join(name).display()
            ))
        })
    };
    for file in &manifest.files {
        fetch(file, &dir.path().join(&file.name)).map_err(backend_error)?;
    }
    for (name, bytes) in &manifest.small_files {
        write(name, bytes)?;
    }
    Ok(dir)
}
