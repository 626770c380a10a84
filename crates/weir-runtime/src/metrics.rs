//! Per-subtask counters, updated once per batch (never per record) and read by progress
//! reporting.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct SubtaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Time blocked on full output channels, in nanoseconds.
    pub backpressured_ns: AtomicU64,
    /// The RocksDB state backend's memory and files (all zero for other subtasks).
    pub rocksdb: RocksDbMetrics,
}

/// What a keyed subtask's RocksDB uses, refreshed about once a second between batches (byte
/// counts, RocksDB's own figures; Flink's RocksDB native metrics of the same names).
#[derive(Debug, Default)]
pub struct RocksDbMetrics {
    /// `state.backend.rocksdb.memory.fixed-per-slot`: what the subtask's state may use.
    pub memory_budget: AtomicU64,
    pub block_cache_usage: AtomicU64,
    pub cur_size_all_mem_tables: AtomicU64,
    pub estimate_table_readers_mem: AtomicU64,
    pub total_sst_files_size: AtomicU64,
}

/// A reading of [`RocksDbMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RocksDbUsage {
    pub memory_budget: u64,
    pub block_cache_usage: u64,
    pub cur_size_all_mem_tables: u64,
    pub estimate_table_readers_mem: u64,
    pub total_sst_files_size: u64,
}

impl RocksDbMetrics {
    pub fn set(&self, usage: RocksDbUsage) {
        self.memory_budget
            .store(usage.memory_budget, Ordering::Relaxed);
        self.block_cache_usage
            .store(usage.block_cache_usage, Ordering::Relaxed);
        self.cur_size_all_mem_tables
            .store(usage.cur_size_all_mem_tables, Ordering::Relaxed);
        self.estimate_table_readers_mem
            .store(usage.estimate_table_readers_mem, Ordering::Relaxed);
        self.total_sst_files_size
            .store(usage.total_sst_files_size, Ordering::Relaxed);
    }

    /// The last reading; `None` for a subtask without RocksDB.
    pub fn get(&self) -> Option<RocksDbUsage> {
        let usage = RocksDbUsage {
            memory_budget: self.memory_budget.load(Ordering::Relaxed),
            block_cache_usage: self.block_cache_usage.load(Ordering::Relaxed),
            cur_size_all_mem_tables: self.cur_size_all_mem_tables.load(Ordering::Relaxed),
            estimate_table_readers_mem: self.estimate_table_readers_mem.load(Ordering::Relaxed),
            total_sst_files_size: self.total_sst_files_size.load(Ordering::Relaxed),
        };
        (usage.memory_budget > 0).then_some(usage)
    }
}

impl SubtaskMetrics {
    pub fn add_in(&self, n: u64) {
        self.records_in.fetch_add(n, Ordering::Relaxed);
    }
    pub fn set_out(&self, total: u64) {
        self.records_out.store(total, Ordering::Relaxed);
    }
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }
    pub fn set_backpressured(&self, total_ns: u64) {
        self.backpressured_ns.store(total_ns, Ordering::Relaxed);
    }
    pub fn backpressured_ms(&self) -> u64 {
        self.backpressured_ns.load(Ordering::Relaxed) / 1_000_000
    }
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }
}
