//! A snapshot's way into RocksDB: the frozen keys of its tables written, then a RocksDB
//! checkpoint taken, once, by whoever needs it first (the snapshot worker, or the task before
//! it writes to RocksDB again).

use super::store::{backend_error, LsmStore};
use crate::error::StateError;
use rocksdb::checkpoint::Checkpoint;
use rocksdb::{Options, DB};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// What a table writes into RocksDB when a snapshot materializes: its keys frozen by the
/// snapshot.
pub(crate) trait FrozenWrites: Send + Sync {
    fn write(&self, store: &LsmStore) -> Result<(), StateError>;
}

/// One snapshot of a subtask's RocksDB tables (see the [module](super) documentation).
pub(crate) struct Materialization {
    store: Arc<LsmStore>,
    /// The snapshot before this one, materialized first (and then let go).
    previous: Mutex<Option<Arc<Materialization>>>,
    /// The tables' frozen keys, let go once written.
    writes: Mutex<Vec<Box<dyn FrozenWrites>>>,
    dir: PathBuf,
    done: OnceLock<Result<Arc<CheckpointView>, String>>,
}

impl Materialization {
    pub(crate) fn new(
        store: Arc<LsmStore>,
        previous: Option<Arc<Materialization>>,
        dir: PathBuf,
    ) -> Materialization {
        Materialization {
            store,
            previous: Mutex::new(previous),
            writes: Mutex::new(Vec::new()),
            dir,
            done: OnceLock::new(),
        }
    }

    /// A table joins the snapshot with its frozen keys (during the synchronous phase).
    pub(crate) fn add(&self, writes: Box<dyn FrozenWrites>) {
        self.writes
            .lock()
            .expect("materialization lock")
            .push(writes);
    }

    /// Whether the frozen keys are in RocksDB (or failed to get there).
    pub(crate) fn is_done(&self) -> bool {
        self.done.get().is_some()
    }

    /// Writes the frozen keys and takes the RocksDB checkpoint, unless done already; waits if
    /// another thread is doing it. The view of the checkpoint holds the state as of the
    /// snapshot.
    pub(crate) fn materialize(&self) -> Result<Arc<CheckpointView>, StateError> {
        self.done
            .get_or_init(|| self.run().map_err(|e| e.to_string()))
            .clone()
            .map_err(|reason| backend_error(format!("snapshot of RocksDB state failed: {reason}")))
    }

    fn run(&self) -> Result<Arc<CheckpointView>, StateError> {
        let previous = self.previous.lock().expect("materialization lock").take();
        if let Some(previous) = previous {
            previous.materialize()?;
        }
        let writes = std::mem::take(&mut *self.writes.lock().expect("materialization lock"));
        for table in &writes {
            table.write(&self.store)?;
        }
        drop(writes);
        let checkpoint = Checkpoint::new(self.store.db())
            .map_err(|e| backend_error(format!("cannot start a RocksDB checkpoint: {e}")))?;
        checkpoint.create_checkpoint(&self.dir).map_err(|e| {
            backend_error(format!(
                "cannot take a RocksDB checkpoint in {}: {e}",
                self.dir.display()
            ))
        })?;
        Ok(Arc::new(CheckpointView {
            dir: self.dir.clone(),
            db: OnceLock::new(),
        }))
    }
}

/// A RocksDB checkpoint (hard links to the database's immutable files) holding the state as of
/// one snapshot, opened read-only on first use and removed when the last user lets go.
pub(crate) struct CheckpointView {
    dir: PathBuf,
    db: OnceLock<Result<DB, String>>,
}

impl CheckpointView {
    /// The directory of the checkpoint's files.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The checkpoint, opened read-only.
    pub(crate) fn db(&self) -> Result<&DB, StateError> {
        self.db
            .get_or_init(|| {
                let options = Options::default();
                let families = DB::list_cf(&options, &self.dir).map_err(|e| e.to_string())?;
                DB::open_cf_for_read_only(&options, &self.dir, families, false)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| {
                backend_error(format!(
                    "cannot open the RocksDB checkpoint {}: {e}",
                    self.dir.display()
                ))
            })
    }
}

impl Drop for CheckpointView {
    fn drop(&mut self) {
        // Closed before its files go.
        drop(self.db.take());
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove a RocksDB checkpoint");
            }
        }
    }
}
