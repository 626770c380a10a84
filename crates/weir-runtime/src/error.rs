//! Errors of a running job.

use weir_state::StateError;
use weir_storage::StorageError;

/// Why a subtask failed. A failed subtask fails the job's current attempt.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// User code reported an error.
    #[error("{0}")]
    User(String),
    /// User code panicked.
    #[error("panicked: {0}")]
    Panic(String),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A downstream subtask went away (it failed or the job is being cancelled).
    #[error("a downstream channel closed")]
    ChannelClosed,
    /// A failure injected for testing (`WEIR_INJECT_FAILURES`).
    #[error("injected failure")]
    Injected,
    /// Input no restart can fix (for example, malformed records): the job fails at once.
    #[error("{0}")]
    BadInput(String),
}

impl TaskError {
    pub fn user(message: impl Into<String>) -> TaskError {
        TaskError::User(message.into())
    }
}

/// Why a job could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("invalid job: {0}")]
    InvalidJob(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Restore(String),
    #[error("subtask {subtask} of '{uid}' failed: {error}")]
    TaskFailed {
        uid: String,
        subtask: u32,
        error: String,
    },
    #[error("job failed: {0}")]
    Failed(String),
    #[error("bad input: {0}")]
    BadInput(String),
}

impl JobError {
    /// The exit status a command should end with: 2 when the input was at fault (the job
    /// definition, a path, a refused restore), 1 when the job failed while running.
    pub fn exit_code(&self) -> u8 {
        match self {
            JobError::InvalidJob(_) | JobError::Restore(_) | JobError::BadInput(_) => 2,
            JobError::Storage(StorageError::NotWritable { .. })
            | JobError::Storage(StorageError::NotADirectory(_)) => 2,
            _ => 1,
        }
    }
}
