//! What the integration tests share.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use weir_core::SavepointFormat;
use weir_runtime::{Drain, JobHandle, RequestStatus};

/// How long a test waits for a job before it fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Stops the job behind `handle` with a savepoint into `target` and waits for it; returns the
/// savepoint's directory. Panics if the savepoint fails or does not complete in [`PATIENCE`].
pub fn stop_with_savepoint(handle: &JobHandle, target: PathBuf, drain: Drain) -> PathBuf {
    stop_with_savepoint_as(handle, target, SavepointFormat::Canonical, drain)
}

/// [`stop_with_savepoint`] with a savepoint of `format`.
pub fn stop_with_savepoint_as(
    handle: &JobHandle,
    target: PathBuf,
    format: SavepointFormat,
    drain: Drain,
) -> PathBuf {
    let request = handle
        .stop_with_savepoint(Some(target), format, drain)
        .expect("job running");
    let deadline = Instant::now() + PATIENCE;
    loop {
        match handle.request(request) {
            Some(RequestStatus::Completed {
                location: Some(path),
                ..
            }) => return path,
            Some(RequestStatus::Failed(reason)) => panic!("savepoint failed: {reason}"),
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for the savepoint"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
