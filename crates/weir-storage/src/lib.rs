//! Checkpoint storage: where state bytes and checkpoint metadata go, and how they come back.
//!
//! In DESIGN.md's flows this crate serves step 4 (an async snapshot worker writes a subtask's
//! state files and gets [`StateHandle`](weir_core::StateHandle)s back), step 5 (the coordinator's
//! driver writes `_metadata` durably before a checkpoint counts as completed) and step 7
//! (`--resume` finds the newest checkpoint whose metadata and files are intact).
//!
//! [`layout`] owns every path and file name; [`metadata`] owns the metadata format;
//! [`local`] implements both on a local directory with fsync and atomic renames.

pub mod error;
pub mod layout;
pub mod local;
pub mod metadata;

pub use error::StorageError;
pub use layout::CheckpointLayout;
pub use local::{CheckpointStorage, LatestCheckpoint};
pub use metadata::{CheckpointMetadata, OperatorMetadata};
