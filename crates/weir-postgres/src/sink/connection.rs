//! A sink subtask's one SQL connection: opened again when the server dropped it, with the
//! upsert statement prepared once per connection.

use tokio_postgres::{Client, Statement};

use super::target::{Target, WriteMode};
use super::transactions;
use crate::error::PgError;
use crate::url::PgUrl;
use crate::value::Row;

pub(crate) struct Connection {
    url: PgUrl,
    client: Option<Client>,
    /// The upsert statement, prepared on `client`.
    upsert: Option<Statement>,
}

impl Connection {
    pub(crate) fn new(url: PgUrl) -> Connection {
        Connection {
            url,
            client: None,
            upsert: None,
        }
    }

    /// The connection, opened (again) if there is none or the server closed it.
    pub(crate) async fn client(&mut self) -> Result<&Client, PgError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.upsert = None;
            let client = self.url.connect().await?;
            // A big checkpoint's COPY may take long: no server or role default may cut it off.
            client
                .batch_execute("SET statement_timeout = 0")
                .await
                .map_err(|e| PgError::statement(format!("setting up {}", self.url), e))?;
            self.client = Some(client);
        }
        Ok(self.client.as_ref().expect("just connected"))
    }

    /// Writes `rows` into `target`, each statement committing on its own.
    pub(crate) async fn write(
        &mut self,
        target: &Target,
        rows: &[Row],
        batch_size: usize,
    ) -> Result<(), PgError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.client().await?;
        self.write_on_this_connection(target, rows, batch_size)
            .await
    }

    /// Writes `rows` in a transaction of their own and prepares it as `gid`. On an error the
    /// transaction is rolled back (or, if the connection broke, the server drops it).
    pub(crate) async fn write_prepared(
        &mut self,
        target: &Target,
        rows: &[Row],
        batch_size: usize,
        gid: &str,
    ) -> Result<(), PgError> {
        self.client()
            .await?
            .batch_execute("BEGIN")
            .await
            .map_err(|e| PgError::statement(format!("starting transaction {gid}"), e))?;
        // Invariant: from BEGIN to PREPARE, no statement may run on another connection (a new
        // one would autocommit, and PREPARE TRANSACTION outside a transaction only warns).
        let mut result = self
            .write_on_this_connection(target, rows, batch_size)
            .await;
        let client = self.client.as_ref().expect("connected");
        if result.is_ok() {
            result = transactions::prepare(client, gid).await;
        }
        if result.is_err() && !client.is_closed() {
            // Best effort: the error at hand says more than a failed rollback would.
            let _ = client.batch_execute("ROLLBACK").await;
        }
        result
    }

    /// Writes on the connection as it is, never opening another one.
    async fn write_on_this_connection(
        &mut self,
        target: &Target,
        rows: &[Row],
        batch_size: usize,
    ) -> Result<(), PgError> {
        let client = self.client.as_ref().ok_or_else(|| PgError::Connection {
            url: self.url.to_string(),
            message: "not connected".into(),
        })?;
        match target.mode {
            WriteMode::Append => target.append(client, rows).await,
            WriteMode::Upsert => {
                if self.upsert.is_none() {
                    self.upsert = Some(target.prepare_upsert(client).await?);
                }
                let statement = self.upsert.as_ref().expect("just prepared");
                target.upsert(client, statement, rows, batch_size).await
            }
        }
    }
}
