//! Incremental checkpoints of RocksDB state: a checkpoint uploads the database's immutable
//! table files that no earlier completed checkpoint uploaded and references the others.
//!
//! The synchronous phase registers the snapshot ([`Uploads::begin`]) and hands the runtime an
//! [`LsmSnapshot`]. The snapshot worker materializes it (the frozen keys written, a RocksDB
//! checkpoint of hard links taken), lists its files and decides, file by file, whether to
//! reference an uploaded copy or upload it ([`LsmSnapshot::files`]); it uploads, then assembles
//! the [`LsmManifest`](crate::LsmManifest). Completion and abortion notices move the base.
//!
//! Invariant (the same as the heap backend's incremental base): a snapshot references an
//! uploaded file only if the last completed checkpoint the subtask knows of references it *and*
//! every other snapshot that may still complete and has decided references the same copy. A
//! decision is recorded as it is made, before any upload, so two snapshots deciding in turn see
//! each other. The coordinator retains the newest completed checkpoint and deletes a shared
//! file only once no retained checkpoint references it; a newer completion can only come from
//! one of the snapshots that agreed, so a referenced copy outlives every snapshot that uses it.

use super::materialize::{CheckpointView, Materialization};
use super::store::{backend_error, LsmStore};
use crate::chain::SharedStateFile;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use crate::lsm_manifest::{LsmFile, LsmManifest};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use weir_core::KeyGroupRange;

/// What one snapshot planned for one table file: the copy it references.
#[derive(Clone, Debug)]
struct Planned {
    path: String,
    /// Known once uploaded (or from the base when reused).
    file: Option<Arc<SharedStateFile>>,
}

/// The uploaded table files of one subtask's database (see the [module](self) invariant).
#[derive(Default, Debug)]
pub(crate) struct Uploads {
    /// The files of the last completed checkpoint the subtask knows of, by name.
    base: HashMap<String, Arc<SharedStateFile>>,
    base_checkpoint: Option<u64>,
    /// Snapshots that may still complete; `None` until one decides (a savepoint or a full
    /// checkpoint never does: it references no shared file).
    pending: BTreeMap<u64, Option<HashMap<String, Planned>>>,
}

impl Uploads {
    /// A snapshot for `checkpoint` was taken.
    pub(crate) fn begin(&mut self, checkpoint: u64) {
        self.pending.insert(checkpoint, None);
    }

    /// Decides, for each of the table files `names` of the snapshot for `checkpoint`, the copy
    /// it references: an uploaded one (with its `file`) or a new one at `path_for(name)`.
    fn decide(
        &mut self,
        checkpoint: u64,
        names: &[String],
        path_for: &dyn Fn(&str) -> String,
    ) -> Vec<Planned> {
        let mut planned = HashMap::with_capacity(names.len());
        let mut decisions = Vec::with_capacity(names.len());
        for name in names {
            let reusable = self.base.get(name).filter(|file| {
                self.pending.iter().all(|(other, plan)| {
                    *other == checkpoint
                        || plan
                            .as_ref()
                            .is_none_or(|plan| plan.get(name).is_some_and(|p| p.path == file.path))
                })
            });
            let entry = match reusable {
                Some(file) => Planned {
                    path: file.path.clone(),
                    file: Some(file.clone()),
                },
                None => Planned {
                    path: path_for(name),
                    file: None,
                },
            };
            decisions.push(entry.clone());
            planned.insert(name.clone(), entry);
        }
        // Aborted already: nothing constrains others, and nothing becomes the base.
        if let Some(slot) = self.pending.get_mut(&checkpoint) {
            *slot = Some(planned);
        }
        decisions
    }

    /// The snapshot for `checkpoint` uploaded its copy of `name`.
    fn record(&mut self, checkpoint: u64, name: &str, file: Arc<SharedStateFile>) {
        if let Some(Some(plan)) = self.pending.get_mut(&checkpoint) {
            if let Some(p) = plan.get_mut(name) {
                p.file = Some(file);
            }
        }
    }

    /// Checkpoint `checkpoint` completed: the files of its snapshot become the base and older
    /// snapshots are subsumed. A completed snapshot that uploaded nothing of its own design (a
    /// savepoint, a full checkpoint) leaves the base as it is.
    pub(crate) fn complete(&mut self, checkpoint: u64) {
        if self.base_checkpoint.is_some_and(|c| c >= checkpoint) {
            return;
        }
        let Some(Some(plan)) = self.pending.remove(&checkpoint) else {
            return;
        };
        let files: Option<HashMap<_, _>> = plan
            .into_iter()
            .map(|(name, p)| p.file.map(|f| (name, f)))
            .collect();
        if let Some(files) = files {
            self.base = files;
            self.base_checkpoint = Some(checkpoint);
            self.pending = self.pending.split_off(&checkpoint);
        }
    }

    /// The database was restored in place from the job's own checkpoint `checkpoint`, whose
    /// table files are uploaded as `files`: that checkpoint is the base.
    pub(crate) fn seed(&mut self, checkpoint: u64, files: HashMap<String, Arc<SharedStateFile>>) {
        self.base = files;
        self.base_checkpoint = Some(checkpoint);
    }

    /// Checkpoint `checkpoint` was aborted: its snapshot no longer constrains others.
    pub(crate) fn abort(&mut self, checkpoint: u64) {
        self.pending.remove(&checkpoint);
    }
}

/// A snapshot of a subtask's RocksDB tables on its way to a native (incremental) checkpoint,
/// handed from the synchronous phase to the snapshot worker.
pub struct LsmSnapshot {
    pub(crate) store: Arc<LsmStore>,
    pub(crate) round: Arc<Materialization>,
    pub(crate) checkpoint: u64,
}

impl std::fmt::Debug for LsmSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LsmSnapshot")
            .field("checkpoint", &self.checkpoint)
            .field("dir", &self.store.path())
            .finish()
    }
}

/// A table file of a snapshot to upload: where it lies on local disk, and the path in
/// checkpoint storage decided for it.
#[derive(Debug)]
pub struct Upload {
    pub name: String,
    pub local: PathBuf,
    pub path: String,
}

/// The files of a materialized snapshot: those it references and those it must upload.
pub struct LsmFiles {
    snapshot: LsmSnapshot,
    /// Keeps the hard links alive until the uploads are done.
    _view: Arc<CheckpointView>,
    files: Vec<LsmFile>,
    uploads: Vec<Upload>,
    small_files: Vec<(String, Vec<u8>)>,
}

/// RocksDB's small files are kept inside the manifest; nothing but a table file is larger
/// than this (the write-ahead log is off).
const SMALL_FILE_LIMIT: u64 = 64 << 20;

impl LsmSnapshot {
    /// Whether `table` is one of the RocksDB tables (not kept on the heap).
    pub fn holds_table(&self, table: &str) -> bool {
        self.store.holds_table(table)
    }

    /// Materializes the snapshot and decides which of its table files to upload, each to the
    /// path `path_for(name)` gives, and which to reference (recorded at once: see the
    /// [module](self) invariant).
    pub fn files(self, path_for: &dyn Fn(&str) -> String) -> Result<LsmFiles, StateError> {
        self.list(path_for, true)
    }

    /// Materializes the snapshot for one that stands alone (a native savepoint): every table
    /// file is uploaded, to the path `path_for(name)` gives, and nothing is decided for the
    /// checkpoints to come (they never reference a savepoint's files).
    pub fn all_files(self, path_for: &dyn Fn(&str) -> String) -> Result<LsmFiles, StateError> {
        self.list(path_for, false)
    }

    fn list(self, path_for: &dyn Fn(&str) -> String, reuse: bool) -> Result<LsmFiles, StateError> {
        let view = self.round.materialize()?;
        let listing = std::fs::read_dir(view.dir()).map_err(|e| {
            backend_error(format!(
                "cannot list the RocksDB checkpoint {}: {e}",
                view.dir().display()
            ))
        })?;
        let mut tables = Vec::new();
        let mut small_files = Vec::new();
        for entry in listing {
            let entry =
                entry.map_err(|e| backend_error(format!("cannot list a checkpoint: {e}")))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".sst") {
                tables.push(name);
                continue;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            if size > SMALL_FILE_LIMIT {
                return Err(backend_error(format!(
                    "RocksDB checkpoint file {name} has {size} bytes; only table files may be that large"
                )));
            }
            let bytes = std::fs::read(entry.path()).map_err(|e| {
                backend_error(format!("cannot read {}: {e}", entry.path().display()))
            })?;
            small_files.push((name, bytes));
        }
        tables.sort();
        small_files.sort();
        let decisions = if reuse {
            self.store
                .uploads()
                .decide(self.checkpoint, &tables, path_for)
        } else {
            tables
                .iter()
                .map(|name| Planned {
                    path: path_for(name),
                    file: None,
                })
                .collect()
        };
        let mut files = Vec::new();
        let mut uploads = Vec::new();
        for (name, decision) in tables.into_iter().zip(decisions) {
            match decision.file {
                Some(file) => files.push(LsmFile {
                    name,
                    file: (*file).clone(),
                }),
                None => uploads.push(Upload {
                    local: view.dir().join(&name),
                    path: decision.path,
                    name,
                }),
            }
        }
        Ok(LsmFiles {
            snapshot: self,
            _view: view,
            files,
            uploads,
            small_files,
        })
    }
}

impl LsmFiles {
    /// The table files to upload.
    pub fn uploads(&self) -> &[Upload] {
        &self.uploads
    }

    /// The table files referenced from earlier checkpoints.
    pub fn reused(&self) -> &[LsmFile] {
        &self.files
    }

    /// `upload` was written to checkpoint storage as `file`.
    pub fn uploaded(&mut self, name: &str, file: SharedStateFile) {
        let file = Arc::new(file);
        self.snapshot
            .store
            .uploads()
            .record(self.snapshot.checkpoint, name, file.clone());
        self.files.push(LsmFile {
            name: name.to_string(),
            file: (*file).clone(),
        });
    }

    /// The manifest of the snapshot, once every upload is done: `tables` (the RocksDB tables
    /// of the snapshot) are in the table files. `range` is the subtask's key groups.
    pub fn manifest(
        mut self,
        tables: Vec<Box<dyn FrozenTable>>,
        range: KeyGroupRange,
    ) -> Result<Vec<u8>, StateError> {
        if let Some(missing) = self
            .uploads
            .iter()
            .find(|u| !self.files.iter().any(|f| f.name == u.name))
        {
            return Err(backend_error(format!(
                "table file {} of the RocksDB checkpoint was not uploaded",
                missing.name
            )));
        }
        if let Some(table) = tables.iter().find(|t| !self.snapshot.holds_table(t.name())) {
            return Err(backend_error(format!(
                "state table '{}' is not in the subtask's RocksDB",
                table.name()
            )));
        }
        let max_parallelism = tables.first().map_or(0, |t| t.max_parallelism());
        self.files.sort_by(|a, b| a.name.cmp(&b.name));
        LsmManifest {
            max_parallelism,
            key_groups: range,
            tables: tables
                .iter()
                .map(|t| (t.name().to_string(), t.kind()))
                .collect(),
            files: std::mem::take(&mut self.files),
            small_files: std::mem::take(&mut self.small_files),
        }
        .encode()
    }
}
