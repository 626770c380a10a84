//! Restoring from a native RocksDB checkpoint: the table files fetched into a scratch
//! directory, the database opened read-only, and the key groups a restoring subtask owns read
//! out in Weir's snapshot format — so either backend restores it, at any parallelism, through
//! the same path as every other snapshot.

use super::frozen::{LsmFrozen, Source};
use super::store::backend_error;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use crate::lsm_manifest::{LsmFile, LsmManifest};
use crate::snapshot_reader::KeyedSnapshotReader;
use rocksdb::{Options, DB};
use std::path::Path;
use std::sync::Arc;
use weir_core::KeyGroupRange;

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
/// gives the verified bytes of a table file; the files are put in a directory of their own
/// under `scratch`, removed before this returns.
pub fn read_native(
    manifest: &LsmManifest,
    range: KeyGroupRange,
    scratch: &Path,
    fetch: &mut dyn FnMut(&LsmFile) -> Result<Vec<u8>, String>,
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
    fetch: &mut dyn FnMut(&LsmFile) -> Result<Vec<u8>, String>,
) -> Result<RestoredDb, StateError> {
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
        let bytes = fetch(file).map_err(backend_error)?;
        write(&file.name, &bytes)?;
    }
    for (name, bytes) in &manifest.small_files {
        write(name, bytes)?;
    }
    let options = Options::default();
    let families = DB::list_cf(&options, dir.path())
        .map_err(|e| backend_error(format!("restored RocksDB state is unusable: {e}")))?;
    let db = DB::open_cf_for_read_only(&options, dir.path(), families, false)
        .map_err(|e| backend_error(format!("restored RocksDB state is unusable: {e}")))?;
    Ok(RestoredDb { db, _dir: dir })
}
