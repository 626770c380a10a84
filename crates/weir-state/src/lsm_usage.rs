//! What a subtask's RocksDB state backend uses: the figures its metrics report.

/// What a keyed subtask's RocksDB uses, in bytes, as RocksDB reports it (`LsmStore::usage`
/// with the `rocksdb` feature; metrics read it in any build).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LsmUsage {
    /// The memory the subtask's state may use (`state.backend.rocksdb.memory.fixed-per-slot`,
    /// at least 16 MiB).
    pub memory_budget: u64,
    /// RocksDB's block cache (`rocksdb.block-cache-usage`).
    pub block_cache_usage: u64,
    /// Its write buffers (`rocksdb.cur-size-all-mem-tables`).
    pub mem_tables: u64,
    /// Index and filter blocks outside the cache (`rocksdb.estimate-table-readers-mem`).
    pub table_readers: u64,
    /// Its files on disk (`rocksdb.total-sst-files-size`).
    pub sst_files: u64,
}
