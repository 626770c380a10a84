//! The connectors' errors, and how each becomes a task failure: trouble reaching the server is
//! retried by the job's restart strategy; data the database refuses fails the job at once.

use weir_runtime::TaskError;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// A bad URL, option or table definition.
    #[error("{0}")]
    Config(String),
    /// The server could not be reached or went away.
    #[error("PostgreSQL at {url}: {message}")]
    Connection { url: String, message: String },
    /// A statement failed for a reason a retry may fix (a lost connection, a serialization
    /// failure, a server shutting down).
    #[error("{what}: {message}")]
    Transient { what: String, message: String },
    /// The database refused the data (a constraint, a type) or the source met a value it
    /// cannot represent: the same input would fail again.
    #[error("{0}")]
    Data(String),
}

impl PgError {
    /// Classifies a failed statement by its SQLSTATE: integrity violations (class 23) and data
    /// exceptions (class 22) are the data's fault; everything else may pass on a retry.
    pub(crate) fn statement(what: impl Into<String>, e: tokio_postgres::Error) -> PgError {
        let what = what.into();
        let permanent = e.as_db_error().is_some_and(|db| {
            let code = db.code().code();
            code.starts_with("22") || code.starts_with("23") || code.starts_with("42")
        });
        if permanent {
            PgError::Data(format!("{what}: {}", describe(&e)))
        } else {
            PgError::Transient {
                what,
                message: describe(&e),
            }
        }
    }
}

/// The server's message with its detail, or the client's error.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                s.push_str(": ");
                s.push_str(detail);
            }
            if let Some(column) = db.column() {
                s.push_str(&format!(" [column {column}]"));
            }
            s
        }
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s.push_str(": ");
                s.push_str(&inner.to_string());
                source = inner.source();
            }
            s
        }
    }
}

impl From<PgError> for TaskError {
    fn from(e: PgError) -> TaskError {
        match e {
            PgError::Config(_) | PgError::Data(_) => TaskError::BadInput(e.to_string()),
            PgError::Connection { .. } | PgError::Transient { .. } => {
                TaskError::User(e.to_string())
            }
        }
    }
}
