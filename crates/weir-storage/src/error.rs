//! Storage errors, each naming the checkpoint storage location and the file concerned.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("checkpoint directory {0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("checkpoint directory {path} is not writable: {source}")]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint directory '{location}' is not usable: {reason}")]
    BadLocation { location: String, reason: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("object store error on {path}: {reason}")]
    Object { path: String, reason: String },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("{path} is missing")]
    Missing { path: String },
    #[error("cannot encode metadata: {0}")]
    Encode(String),
    /// A problem with one checkpoint: which one, which file, and what is wrong with it.
    #[error("checkpoint {checkpoint} in {location}: {source}")]
    Checkpoint {
        checkpoint: u64,
        location: String,
        source: Box<StorageError>,
    },
}

impl StorageError {
    /// An I/O error on a local `path`; not-found becomes [`StorageError::Missing`].
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> StorageError {
        let path = path.as_ref().display().to_string();
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::Missing { path }
        } else {
            StorageError::Io { path, source }
        }
    }

    /// Wraps `self` as a problem of checkpoint `checkpoint` (once).
    pub fn in_checkpoint(self, checkpoint: u64, location: &str) -> StorageError {
        match self {
            e @ StorageError::Checkpoint { .. } => e,
            e => StorageError::Checkpoint {
                checkpoint,
                location: location.to_string(),
                source: Box::new(e),
            },
        }
    }

    /// Whether the file is missing or damaged (as opposed to storage being unreachable).
    pub fn is_damage(&self) -> bool {
        match self {
            StorageError::Corrupt { .. } | StorageError::Missing { .. } => true,
            StorageError::Checkpoint { source, .. } => source.is_damage(),
            _ => false,
        }
    }
}
