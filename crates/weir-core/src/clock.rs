//! Clocks. The checkpoint coordinator is given its time, so tests drive it with a
//! [`ManualClock`] and never sleep.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds on a clock that never goes backwards.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// Wall-clock milliseconds since the Unix epoch as of construction, advanced by a monotonic
/// timer, so the readings look like timestamps but never jump back.
#[derive(Clone, Debug)]
pub struct SystemClock {
    epoch_ms: u64,
    start: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        let epoch_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        SystemClock {
            epoch_ms,
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.epoch_ms + self.start.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
