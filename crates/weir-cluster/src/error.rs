//! Errors of the cluster's processes.

use weir_runtime::JobError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Bad flags or configuration: addresses, slots, options.
    #[error("{0}")]
    Config(String),
    /// A port would be open beyond loopback with nothing to keep strangers out.
    #[error("{0}")]
    Insecure(String),
    /// The other end sent something this process cannot understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A network operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The job manager could not be reached or refused this task manager.
    #[error("{0}")]
    Connection(String),
    #[error(transparent)]
    Job(#[from] JobError),
}

impl ClusterError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ClusterError {
        ClusterError::Io {
            what: what.into(),
            source,
        }
    }
}
