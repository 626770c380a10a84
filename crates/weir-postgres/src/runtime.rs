//! The connectors run on Weir's task loops, which are plain threads; PostgreSQL's clients are
//! asynchronous. Each source or sink subtask owns a small single-threaded runtime of its own
//! and blocks on it, so that no client is shared between threads and nothing else waits.

use crate::error::PgError;

/// A current-thread runtime with I/O and timers.
pub(crate) fn new_runtime() -> Result<tokio::runtime::Runtime, PgError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PgError::Config(format!("cannot start an I/O runtime: {e}")))
}
