//! Per-subtask counters, updated once per batch (never per record) and read by progress
//! reporting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
pub use weir_state::LsmUsage;

#[derive(Debug, Default)]
pub struct SubtaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Time blocked on full output channels, in nanoseconds.
    pub backpressured_ns: AtomicU64,
    /// What the subtask's RocksDB uses, refreshed about once a second between batches
    /// (`None` for a subtask without RocksDB).
    rocksdb: Mutex<Option<LsmUsage>>,
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
    pub fn set_rocksdb(&self, usage: LsmUsage) {
        *self.rocksdb.lock().expect("metrics lock") = Some(usage);
    }
    pub fn rocksdb(&self) -> Option<LsmUsage> {
        *self.rocksdb.lock().expect("metrics lock")
    }
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }
}
