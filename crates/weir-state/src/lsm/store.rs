//! One keyed operator subtask's RocksDB instance: where it lives, how its memory is sized, and
//! the snapshots in flight over it.

use super::materialize::Materialization;
use super::native::{LsmSnapshot, Uploads};
use super::restore::NativeState;
use super::tier::key_group_prefix;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::expiry::TtlCompaction;
use crate::LsmUsage;
use rocksdb::compaction_filter::Decision as CompactionDecision;
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor,
    DBCompressionType, Options, WriteBatch, WriteOptions, DB,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use weir_core::KeyGroupRange;

/// Where a subtask's RocksDB goes and how much memory it may use (`state.backend.rocksdb.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsmOptions {
    /// The directory the subtask's database is made in (and removed from when it ends).
    pub local_dir: PathBuf,
    /// The memory one subtask's keyed state may use, all tables together: half for RocksDB's
    /// block cache, a quarter for its write buffers, a quarter for Weir's in-memory tier
    /// (Flink's `state.backend.rocksdb.memory.fixed-per-slot`).
    pub memory_bytes: u64,
}

impl Default for LsmOptions {
    fn default() -> Self {
        LsmOptions {
            local_dir: std::env::temp_dir(),
            memory_bytes: 256 << 20,
        }
    }
}

/// The least memory RocksDB is given, whatever the budget: it needs a few megabytes to work at
/// all. (The in-memory tier takes its share of the budget as it is: with none, every batch
/// spills.)
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;

/// A keyed operator subtask's RocksDB: one column family per state table, the write-ahead log
/// off. Shared by the subtask's tables and by the snapshot workers writing its snapshots.
pub struct LsmStore {
    // Dropped before `dir`: the database closes before its directory is removed.
    db: DB,
    dir: tempfile::TempDir,
    write_options: WriteOptions,
    /// The in-memory tier's share of the budget, for each table.
    tier_budget: u64,
    memory_budget: u64,
    /// The column families' names.
    families: Vec<String>,
    /// The tables of a database restored in place, with their kinds: their entries are in
    /// RocksDB already.
    restored_tables: Vec<(String, TableKind)>,
    /// What the checkpoints uploaded of the database's table files.
    uploads: Mutex<Uploads>,
    /// The snapshot whose synchronous phase is under way: the tables join it as they freeze.
    current: Mutex<Option<Arc<Materialization>>>,
    /// The newest snapshot taken, which the next one materializes after. Weak: a snapshot is
    /// kept by the snapshot writing it and by the tables until it is in RocksDB, not by the
    /// store it points to.
    last: Mutex<Weak<Materialization>>,
    next_checkpoint_dir: AtomicU64,
}

impl LsmStore {
    /// Makes a fresh database for the tables `tables` (their names) in a new directory under
    /// `options.local_dir`, named after `label` (the operator and subtask, for people looking
    /// at the disk). The tables named in `ttl` get a compaction filter dropping their expired
    /// entries.
    ///
    /// With `restored`, the database is the one restored in place (see [`fetch_native`]): its
    /// directory moves into the new one and opens as the subtask's database, with a column
    /// family added for each table it lacks.
    ///
    /// [`fetch_native`]: super::fetch_native
    pub fn open(
        options: &LsmOptions,
        label: &str,
        tables: &[String],
        ttl: &[(String, TtlCompaction)],
        restored: Option<NativeState>,
    ) -> Result<Arc<LsmStore>, StateError> {
        let memory = options.memory_bytes.max(MIN_MEMORY_BYTES);
        std::fs::create_dir_all(&options.local_dir).map_err(|e| {
            backend_error(format!(
                "cannot create the RocksDB directory {}: {e}",
                options.local_dir.display()
            ))
        })?;
        let safe_label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("weir-rocksdb-{safe_label}-"))
            .tempdir_in(&options.local_dir)
            .map_err(|e| {
                backend_error(format!(
                    "cannot make a RocksDB directory in {}: {e}",
                    options.local_dir.display()
                ))
            })?;
        let db_path = dir.path().join("db");
        let mut restored_tables = Vec::new();
        let mut uploads = Uploads::default();
        let mut earlier_families = Vec::new();
        if let Some(restored) = restored {
            move_dir(restored.dir.path(), &db_path)?;
            earlier_families = DB::list_cf(&Options::default(), &db_path)
                .map_err(|e| backend_error(format!("restored RocksDB state is unusable: {e}")))?;
            restored_tables = restored.tables;
            if let Some((checkpoint, files)) = restored.uploaded {
                uploads.seed(checkpoint, files);
            }
        }
        let db_options = db_options(memory, tables.len())?;
        // Families of the restored database that no table declares any more: opened, then
        // dropped (a snapshot's table the job no longer declares is not carried on, as on the
        // heap).
        let undeclared: Vec<&String> = earlier_families
            .iter()
            .filter(|f| f.as_str() != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .filter(|f| !tables.iter().any(|t| family_name(t) == **f))
            .collect();
        let undeclared_families: Vec<ColumnFamilyDescriptor> = undeclared
            .iter()
            .map(|f| ColumnFamilyDescriptor::new(*f, db_options.clone()))
            .collect();
        let families = tables.iter().map(|t| {
            let mut family_options = db_options.clone();
            if let Some((_, filter)) = ttl.iter().find(|(name, _)| name == t) {
                let filter = filter.clone();
                family_options.set_compaction_filter("weir-ttl", move |_level, _key, value| {
                    if filter.is_expired(value) {
                        CompactionDecision::Remove
                    } else {
                        CompactionDecision::Keep
                    }
                });
            }
            ColumnFamilyDescriptor::new(family_name(t), family_options)
        });
        let mut db =
            DB::open_cf_descriptors(&db_options, &db_path, families.chain(undeclared_families))
                .map_err(|e| backend_error(format!("cannot open RocksDB: {e}")))?;
        for family in undeclared {
            db.drop_cf(family).map_err(|e| {
                backend_error(format!(
                    "cannot drop the restored column family {family}: {e}"
                ))
            })?;
        }
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        Ok(Arc::new(LsmStore {
            db,
            dir,
            write_options,
            tier_budget: options.memory_bytes / 4 / tables.len().max(1) as u64,
            memory_budget: memory,
            families: tables.iter().map(|t| family_name(t)).collect(),
            restored_tables,
            uploads: Mutex::new(uploads),
            current: Mutex::new(None),
            last: Mutex::new(Weak::new()),
            next_checkpoint_dir: AtomicU64::new(0),
        }))
    }

    /// What the database uses now, in RocksDB's own figures (summed over the tables).
    pub fn usage(&self) -> LsmUsage {
        let property = |name: &str| -> u64 {
            self.families
                .iter()
                .filter_map(|f| self.db.cf_handle(f))
                .filter_map(|cf| self.db.property_int_value_cf(cf, name).ok().flatten())
                .sum()
        };
        LsmUsage {
            memory_budget: self.memory_budget,
            // One cache shared by every table: read once, through a table's column family
            // (the default family, which holds nothing, reports a cache of its own).
            block_cache_usage: self
                .families
                .first()
                .and_then(|f| self.db.cf_handle(f))
                .and_then(|cf| {
                    self.db
                        .property_int_value_cf(cf, "rocksdb.block-cache-usage")
                        .ok()
                        .flatten()
                })
                .unwrap_or(0),
            mem_tables: property("rocksdb.cur-size-all-mem-tables"),
            table_readers: property("rocksdb.estimate-table-readers-mem"),
            sst_files: property("rocksdb.total-sst-files-size"),
        }
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The in-memory tier's budget for each table, in (estimated) bytes.
    pub(crate) fn tier_budget(&self) -> u64 {
        self.tier_budget
    }

    pub(crate) fn db(&self) -> &DB {
        &self.db
    }

    /// The column family of table `table`.
    pub(crate) fn family(&self, table: &str) -> Result<&ColumnFamily, StateError> {
        self.db.cf_handle(&family_name(table)).ok_or_else(|| {
            backend_error(format!(
                "state table '{table}' has no column family in this subtask's RocksDB"
            ))
        })
    }

    pub(crate) fn write(&self, batch: WriteBatch) -> Result<(), StateError> {
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(|e| backend_error(format!("RocksDB write failed: {e}")))
    }

    /// Starts the synchronous phase of the snapshot for checkpoint `checkpoint`: the tables'
    /// [`freeze`] join its materialization, which comes after every earlier one.
    ///
    /// [`freeze`]: super::tier::LsmTier::freeze
    pub fn begin_snapshot(self: &Arc<Self>, checkpoint: u64) {
        self.uploads().begin(checkpoint);
        self.begin_round();
    }

    fn begin_round(self: &Arc<Self>) {
        let n = self.next_checkpoint_dir.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock().expect("lsm store lock");
        let previous = last.upgrade().filter(|m| !m.is_done());
        let round = Arc::new(Materialization::new(
            self.clone(),
            previous,
            self.dir.path().join(format!("snapshot-{n}")),
        ));
        *last = Arc::downgrade(&round);
        drop(last);
        *self.current.lock().expect("lsm store lock") = Some(round);
    }

    /// A snapshot of one table alone, for a table frozen outside
    /// [`begin_snapshot`](Self::begin_snapshot) (a test taking a table's snapshot by hand).
    pub(crate) fn solo_snapshot(self: &Arc<Self>) -> Arc<Materialization> {
        self.begin_round();
        let round = self.current.lock().expect("lsm store lock").take();
        round.expect("begin_snapshot sets the current snapshot")
    }

    /// Ends the synchronous phase begun by [`begin_snapshot`](Self::begin_snapshot): the
    /// snapshot, for an incremental checkpoint of the database's files ([`LsmSnapshot`]).
    pub fn end_snapshot(self: &Arc<Self>, checkpoint: u64) -> Option<LsmSnapshot> {
        let round = self.current.lock().expect("lsm store lock").take()?;
        Some(LsmSnapshot {
            store: self.clone(),
            round,
            checkpoint,
        })
    }

    /// Checkpoint `checkpoint` completed: the table files its snapshot uploaded may be
    /// referenced by later ones (see [`native`](super::native)).
    pub fn complete(&self, checkpoint: u64) {
        self.uploads().complete(checkpoint);
    }

    /// Checkpoint `checkpoint` was aborted.
    pub fn abort(&self, checkpoint: u64) {
        self.uploads().abort(checkpoint);
    }

    pub(crate) fn uploads(&self) -> std::sync::MutexGuard<'_, Uploads> {
        self.uploads.lock().expect("lsm uploads lock")
    }

    /// The kind `table` was written as, if the database was restored in place and holds it.
    pub(crate) fn restored_kind(&self, table: &str) -> Option<TableKind> {
        self.restored_tables
            .iter()
            .find(|(name, _)| name == table)
            .map(|(_, kind)| *kind)
    }

    /// Whether the database was restored in place (its key groups need no restore).
    pub(crate) fn restored_in_place(&self) -> bool {
        !self.restored_tables.is_empty()
    }

    /// Drops every entry outside `range` from the tables of a database restored in place that
    /// held the key groups `held` (a restore to another parallelism: each keeps its share), with
    /// RocksDB's range deletions — no entry is read.
    pub fn clip(&self, held: KeyGroupRange, range: KeyGroupRange) -> Result<(), StateError> {
        let mut batch = WriteBatch::default();
        for family in &self.families {
            let Some(cf) = self.db.cf_handle(family) else {
                continue;
            };
            if held.start < range.start {
                batch.delete_range_cf(
                    cf,
                    key_group_prefix(held.start),
                    key_group_prefix(range.start),
                );
            }
            if range.end < held.end {
                batch.delete_range_cf(cf, key_group_prefix(range.end), key_group_prefix(held.end));
            }
        }
        self.write(batch)
    }

    /// Whether `table` is one of this database's tables.
    pub(crate) fn holds_table(&self, table: &str) -> bool {
        self.families
            .iter()
            .any(|f| f.strip_prefix(FAMILY_PREFIX) == Some(table))
    }

    /// The snapshot whose synchronous phase is under way.
    pub(crate) fn current_snapshot(&self) -> Option<Arc<Materialization>> {
        self.current.lock().expect("lsm store lock").clone()
    }
}

/// Moves the directory `from` to `to`: a rename, or a copy of its files if they are on
/// different file systems.
fn move_dir(from: &Path, to: &Path) -> Result<(), StateError> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    let error = |e: std::io::Error| {
        backend_error(format!(
            "cannot move the restored RocksDB files from {} to {}: {e}",
            from.display(),
            to.display()
        ))
    };
    std::fs::create_dir_all(to).map_err(error)?;
    for entry in std::fs::read_dir(from).map_err(error)? {
        let entry = entry.map_err(error)?;
        std::fs::copy(entry.path(), to.join(entry.file_name())).map_err(error)?;
    }
    Ok(())
}

const FAMILY_PREFIX: &str = "weir/";

/// The column family of a table: a prefix keeps a table named `default` apart from RocksDB's
/// own default family.
pub(crate) fn family_name(table: &str) -> String {
    format!("{FAMILY_PREFIX}{table}")
}

pub(crate) fn backend_error(reason: String) -> StateError {
    StateError::Backend(reason)
}

/// RocksDB's options for `tables` tables sharing `memory` bytes (see [`LsmOptions`]).
fn db_options(memory: u64, tables: usize) -> Result<Options, StateError> {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_max_background_jobs(2);
    options.set_keep_log_file_num(2);
    // RocksDB's MANIFEST (its log of file changes) travels whole in every checkpoint's
    // manifest: start a new one once it passes 256 KiB instead of RocksDB's 1 GiB.
    options.set_max_manifest_file_size(256 << 10);
    options.set_compression_type(DBCompressionType::Lz4);
    // Universal (tiered) compaction rewrites less than leveled compaction under updates spread
    // over every key, and every byte it rewrites is a new file the next checkpoint uploads:
    // measured over 5 M keys, 7.7 MB uploaded per 1 s checkpoint against leveled's 11.2 MB, for
    // up to twice the disk.
    options.set_compaction_style(rocksdb::DBCompactionStyle::Universal);
    let write_buffers = memory / 4;
    options.set_db_write_buffer_size(write_buffers as usize);
    options.set_write_buffer_size((write_buffers / 2 / tables.max(1) as u64).max(1 << 20) as usize);
    options.set_max_write_buffer_number(2);
    // A bloom filter over each memtable's keys: a read of a key not in it (most reads, once
    // the state is larger than the write buffers) skips the search of its skip list.
    options.set_memtable_prefix_bloom_ratio(0.1);
    options.set_memtable_whole_key_filtering(true);
    let cache = Cache::new_lru_cache((memory / 2) as usize)
        .map_err(|e| backend_error(format!("cannot make RocksDB's block cache: {e}")))?;
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks live in the block cache, so that the memory option bounds them
    // too (they grow with the state: about 1.3 bytes per key for the filters alone). They are
    // partitioned, so that a large table file's index and filter never have to fit the cache
    // whole: only the small top level of each is pinned, and the partitions a read needs come
    // and go with the data blocks. (Unpartitioned, a small cache thrashes on them.)
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_metadata_block_size(4096);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    options.set_block_based_table_factory(&table);
    Ok(options)
}
