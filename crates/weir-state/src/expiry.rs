//! How expired entries of a table with a time to live are found, as the table's storage and
//! snapshots need it: over encoded entries (a full snapshot, RocksDB's compaction filter) and
//! as a verdict on one entry (incremental cleanup). The `ttl` module builds the
//! kinds of state on top.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The first moment not expired: a value stamped before it expired (its stamp plus `ttl` is at
/// most `now`).
pub(crate) fn expiry_limit(now: u64, ttl_ms: u64) -> u64 {
    now.saturating_add(1).saturating_sub(ttl_ms)
}

/// Whether an encoded stamped value (its first eight bytes the stamp) expired. Bytes too short
/// to hold a stamp are not ours to judge: kept.
pub(crate) fn stamp_expired(bytes: &[u8], limit: u64) -> bool {
    match bytes.first_chunk::<8>() {
        Some(stamp) => u64::from_le_bytes(*stamp) < limit,
        None => false,
    }
}

/// A test over the encoded entries of a table, with the limit of the moment it is for: a full
/// snapshot leaves out the entries it finds expired.
#[derive(Clone, Copy)]
pub(crate) struct Expiry {
    expired: fn(&[u8], u64) -> bool,
    limit: u64,
}

impl Expiry {
    /// `expired(entry, limit)` is whether an encoded entry expired before `limit` (see
    /// [`expiry_limit`]).
    pub(crate) fn new(expired: fn(&[u8], u64) -> bool, limit: u64) -> Self {
        Expiry { expired, limit }
    }

    pub(crate) fn is_expired(&self, entry: &[u8]) -> bool {
        (self.expired)(entry, self.limit)
    }
}

/// How RocksDB's compactions of a table with a TTL find expired entries: the table's test over
/// encoded entries, with the time the task last handed its state.
#[derive(Clone)]
pub struct TtlCompaction {
    ttl_ms: u64,
    now: Arc<AtomicU64>,
    expired: fn(&[u8], u64) -> bool,
}

impl TtlCompaction {
    /// The test `expired` with the time to live `ttl_ms`, against the time in `now`.
    #[cfg(feature = "rocksdb")]
    pub(crate) fn new(ttl_ms: u64, now: Arc<AtomicU64>, expired: fn(&[u8], u64) -> bool) -> Self {
        TtlCompaction {
            ttl_ms,
            now,
            expired,
        }
    }

    /// Whether the encoded entry `entry` expired as of the task's last time.
    pub fn is_expired(&self, entry: &[u8]) -> bool {
        let now = self.now.load(Ordering::Relaxed);
        (self.expired)(entry, expiry_limit(now, self.ttl_ms))
    }
}

impl fmt::Debug for TtlCompaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtlCompaction")
            .field("ttl_ms", &self.ttl_ms)
            .field("now", &self.now.load(Ordering::Relaxed))
            .finish()
    }
}

/// What expiry leaves of an entry.
pub(crate) enum Verdict {
    Keep,
    /// Some parts expired: the table's `drop_expired` removes them.
    Trim,
    /// Every part expired.
    Remove,
}
