//! Storage faults injected by tests, to exercise the paths real disks and object stores take
//! when they fail (a full disk, a denied permission) without needing one.
//!
//! Off unless the environment variable `WEIR_TEST_STORAGE_FAULTS` is set, read once per
//! process, as `operation:path-substring:error[:count]`, for example
//! `put:shared/:no-space:3`: the first 3 writes of a path containing `shared/` fail with the
//! operating system's "no space left on device". `operation` is `put` or `get`; `error` is
//! `no-space` or `permission-denied`; without `count` every matching operation fails. The
//! error is raised where the real one would surface, so everything above (declining the
//! checkpoint, falling back) runs for real.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const ENV: &str = "WEIR_TEST_STORAGE_FAULTS";

#[derive(Debug)]
struct Fault {
    operation: String,
    path: String,
    kind: ErrorKind,
    remaining: Option<AtomicU64>,
}

fn fault() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let text = std::env::var(ENV).ok()?;
            let parts: Vec<&str> = text.split(':').collect();
            let kind = match parts.get(2).copied() {
                Some("no-space") => ErrorKind::StorageFull,
                Some("permission-denied") => ErrorKind::PermissionDenied,
                _ => {
                    tracing::error!("{ENV}='{text}' is malformed; no faults injected");
                    return None;
                }
            };
            Some(Fault {
                operation: parts[0].to_string(),
                path: parts.get(1).unwrap_or(&"").to_string(),
                kind,
                remaining: parts
                    .get(3)
                    .and_then(|c| c.parse().ok())
                    .map(AtomicU64::new),
            })
        })
        .as_ref()
}

/// The injected error for `operation` on `path`, if one is due.
pub(crate) fn check(operation: &str, path: &str) -> Option<std::io::Error> {
    let f = fault()?;
    if f.operation != operation || !path.contains(&f.path) {
        return None;
    }
    if let Some(remaining) = &f.remaining {
        let taken =
            remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_err() {
            return None;
        }
    }
    Some(std::io::Error::new(
        f.kind,
        format!("injected by {ENV}: {}", std::io::Error::from(f.kind)),
    ))
}
