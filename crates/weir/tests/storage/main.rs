//! Checkpoint storage end to end, with real parts: the `weir` binary, real files and fsync, a
//! real S3-compatible server (moto, started by `scripts/test.sh`), injected storage faults,
//! truncated, bit-flipped and missing files, and reference counting across restarts.

mod common;
mod failures;
mod incremental;
mod s3;
mod tooling;
