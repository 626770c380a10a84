//! Storage errors, each naming the checkpoint and file concerned.

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
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} is missing")]
    Missing { path: PathBuf },
    #[error("cannot encode metadata: {0}")]
    Encode(String),
}

impl StorageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StorageError {
        if source.kind() == std::io::ErrorKind::NotFound {
            StorageError::Missing { path: path.into() }
        } else {
            StorageError::Io {
                path: path.into(),
                source,
            }
        }
    }
}
