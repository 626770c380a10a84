//! Checkpoint storage: where state bytes and checkpoint metadata go, and how they come back.
//!
//! In the checkpoint flows this crate serves step 4 (an async snapshot worker writes a subtask's
//! state files and gets [`StateHandle`](weir_core::StateHandle)s back), step 5 (the coordinator's
//! driver writes `_metadata` durably before a checkpoint counts as completed) and step 7
//! (`--resume` finds the newest checkpoint whose metadata and files are intact).
//!
//! Storage goes through the `object_store` crate: a local directory (a path or `file://`, with
//! fsync before every rename and of the directory after it) or S3 and S3-compatible servers
//! (`s3://bucket/prefix`, configured by the `s3.*` options). The API is blocking: calls run on a
//! small internal tokio runtime, and transient errors of remote stores are retried with
//! backoff ([`location`], `object_io`).
//!
//! [`layout`] owns every path and file name; [`metadata`] owns the metadata format; [`storage`]
//! writes, reads and deletes checkpoints; [`verify`] checks every checksum of every file and
//! finds the checkpoint to resume from. With local recovery on, [`local_copy`] keeps the state
//! files a process wrote on its own disk too, and restores in the process read them from there. Every file carries a checksum verified on read: the
//! CRC-32C recorded in its handle, and its format's own checksum inside.

pub mod claim;
mod direct_read;
pub mod error;
mod faults;
pub mod layout;
pub mod local_copy;
pub mod location;
pub mod metadata;
mod object_io;
pub mod savepoint;
pub mod storage;
pub mod verify;

pub use error::StorageError;
pub use faults::ENV as FAULTS_ENV;
pub use layout::CheckpointLayout;
pub use location::Location;
pub use metadata::{CheckpointMetadata, OperatorMetadata};
pub use storage::CheckpointStorage;
pub use verify::{FileCheck, LatestCheckpoint};
