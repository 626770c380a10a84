//! The PostgreSQL sink: rows into one table, appended or upserted by primary key, with Flink's
//! three delivery guarantees.
//!
//! # Writing
//!
//! Each subtask owns one connection. Rows are checked as they arrive: a row with the wrong
//! number of values, or a value that cannot go into its column's type, fails the job at once
//! with an error naming the table, the column and the value. Rows are then buffered and
//! written in batches:
//!
//! - **append** sends them with one binary `COPY`, the fastest way into PostgreSQL;
//! - **upsert** (the default for a table with a primary key) sends one
//!   `INSERT … SELECT * FROM unnest($1, $2, …) ON CONFLICT (key) DO UPDATE` per batch, one array
//!   parameter per column. Buffered rows are compacted by key first (the last row of a key
//!   wins), so that one statement never touches a row twice.
//!
//! Upserting needs each key to be written by a single subtask: partition the sink's input by
//! the table's primary key. Two subtasks upserting the same key in exactly-once mode would each
//! wait for the row lock the other's prepared transaction holds until its checkpoint completes,
//! which it cannot while they wait.
//!
//! # Delivery guarantees
//!
//! - **none**: a batch is written (and commits) when it fills up, and the rest at the end of
//!   the input. A failure loses what was buffered and may repeat what was written.
//! - **at-least-once** (the default): as `none`, and every barrier also writes everything
//!   buffered before the checkpoint is taken. After a failure, the rows written since the
//!   restored checkpoint are written again: appended twice, or upserted again (which, for an
//!   upsert, leaves the table as if it had happened once).
//! - **exactly-once**: one transaction per subtask and checkpoint, with two-phase commit. Rows
//!   are only buffered. On the barrier of checkpoint `n` the subtask begins a transaction,
//!   writes the buffered rows, and ends it with `PREPARE TRANSACTION '{prefix}:{uid}:{subtask}:{n}'`:
//!   the rows are on disk but nobody sees them, and the transaction survives crashes of both
//!   the job and the server. The gid is the subtask's state in checkpoint `n`. When checkpoint
//!   `n` completes, the notice runs `COMMIT PREPARED`; a gid that is gone was committed already,
//!   so a repeated notice is harmless. When checkpoint `n` is aborted, its transaction is rolled
//!   back and its rows go back in front of the buffer, into the next checkpoint's transaction.
//!
//! A prepared transaction keeps its row locks until it commits, and the commit is run by the
//! same thread that would write the next transaction. So the sink never writes while one of its
//! transactions is prepared: if a barrier arrives before the previous checkpoint's notice, it
//! declines that checkpoint (its rows stay buffered for the next one). The rows of the prepared
//! transaction are kept in memory until it commits, so that an abort can put them back. If a
//! completion notice is lost, every later checkpoint is declined until the job's tolerance for
//! failed checkpoints runs out and it restarts from its latest checkpoint, which commits the
//! transaction.
//!
//! The state is union state: after a restore, every subtask sees every gid the checkpoint
//! recorded, whatever the new parallelism. Subtask 0 alone settles them while it opens: it
//! commits each recorded gid still prepared in the database, and rolls back every other
//! prepared transaction named `{prefix}:{uid}:…` — those prepared after the restored checkpoint,
//! whose rows will be written again. A fresh start rolls back all of them (a previous run's
//! leftovers). Transactions of other prefixes or other sinks are left alone. Gids are unique
//! across the whole server, not per database, so every job writing to a server needs its own
//! prefix. No checkpoint starts before every subtask has opened, so subtask 0 never
//! rolls back a transaction of the current run.
//!
//! Exactly-once keeps a checkpoint interval's rows in memory and needs the server's
//! `max_prepared_transactions` to be at least the sink's parallelism. Until a checkpoint
//! completes its rows are invisible to other transactions (`read committed` or stricter).
//!
//! # Failures
//!
//! Errors never show the connection's password. A lost connection or a statement that may pass
//! on a retry is a task failure the restart strategy retries; data the database refuses (a type,
//! `NOT NULL`, a unique or foreign key) fails the job at once. Since an error while a barrier is
//! handled only declines that checkpoint, a refused write on the barrier is also reported by the
//! sink's next call, which fails the job.

mod buffer;
mod connection;
mod guarantee;
mod target;
mod transactions;

#[cfg(test)]
mod tests;

use bytes::BytesMut;
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::{OperatorContext, TaskError};

use self::buffer::RowBuffer;
use self::connection::Connection;
pub use self::guarantee::DeliveryGuarantee;
pub(crate) use self::target::{Target, WriteMode};
use self::transactions::{StateEntry, TransactionNames};
use crate::error::PgError;
use crate::runtime::new_runtime;
use crate::schema::TableSchema;
use crate::url::PgUrl;
use crate::value::Row;

/// The default number of rows per write (per `COPY` outside exactly-once, per upsert statement).
pub(crate) const DEFAULT_BATCH_SIZE: usize = 4096;

/// Writes [`Row`]s into a PostgreSQL table. Configure it, then hand it to the job; each
/// subtask opens its own clone.
///
/// ```no_run
/// use weir_postgres::{DeliveryGuarantee, PgUrl, PostgresSink};
///
/// let url = PgUrl::parse("postgres://weir:secret@db:5432/shop").unwrap();
/// let sink = PostgresSink::new(url, "public.order_totals")
///     .columns(&["customer", "total"])
///     .upsert()
///     .guarantee(DeliveryGuarantee::ExactlyOnce)
///     .transaction_prefix("order-totals-v1");
/// assert!(sink.validate().is_ok());
/// ```
pub struct PostgresSink {
    config: Config,
    open: Option<OpenSink>,
}

#[derive(Clone, Debug)]
struct Config {
    url: PgUrl,
    table: String,
    columns: Option<Vec<String>>,
    mode: Option<WriteMode>,
    guarantee: DeliveryGuarantee,
    prefix: Option<String>,
    batch_size: usize,
}

impl Clone for PostgresSink {
    /// A sink with the same configuration, not opened.
    fn clone(&self) -> PostgresSink {
        PostgresSink {
            config: self.config.clone(),
            open: None,
        }
    }
}

impl PostgresSink {
    /// A sink writing into `table` (`name` or `schema.name`) on the server at `url`.
    pub fn new(url: PgUrl, table: &str) -> PostgresSink {
        PostgresSink {
            config: Config {
                url,
                table: table.to_string(),
                columns: None,
                mode: None,
                guarantee: DeliveryGuarantee::AtLeastOnce,
                prefix: None,
                batch_size: DEFAULT_BATCH_SIZE,
            },
            open: None,
        }
    }

    /// The columns each row gives values for, in order (default: all of the table's, in the
    /// table's order).
    pub fn columns(mut self, columns: &[&str]) -> PostgresSink {
        self.config.columns = Some(columns.iter().map(|c| c.to_string()).collect());
        self
    }

    /// Inserts a row, or updates the row with the same primary key (the default when the
    /// table has a primary key). Partition the input by that key.
    pub fn upsert(mut self) -> PostgresSink {
        self.config.mode = Some(WriteMode::Upsert);
        self
    }

    /// Inserts every row (the default for a table without a primary key).
    pub fn append(mut self) -> PostgresSink {
        self.config.mode = Some(WriteMode::Append);
        self
    }

    /// The delivery guarantee (default: at-least-once).
    pub fn guarantee(mut self, guarantee: DeliveryGuarantee) -> PostgresSink {
        self.config.guarantee = guarantee;
        self
    }

    /// The start of the names of the job's prepared transactions, required for exactly-once:
    /// letters, digits, `-`, `_` and `.`. Each job writing to the same server needs its own:
    /// transaction names are unique server-wide, and a restore rolls back the prepared
    /// transactions of its prefix that it did not record.
    pub fn transaction_prefix(mut self, prefix: &str) -> PostgresSink {
        self.config.prefix = Some(prefix.to_string());
        self
    }

    /// Rows per write (default 4096): per `COPY` or upsert statement.
    pub fn batch_size(mut self, rows: usize) -> PostgresSink {
        self.config.batch_size = rows;
        self
    }

    /// Checks what can be checked without the server; [`open`](SinkFunction::open) checks the
    /// table and columns.
    pub fn validate(&self) -> Result<(), PgError> {
        let c = &self.config;
        crate::schema::split_name(&c.table)?;
        if c.batch_size == 0 {
            return Err(PgError::Config(
                "PostgreSQL sink: the batch size must be at least 1 row".into(),
            ));
        }
        match (&c.prefix, c.guarantee) {
            (Some(prefix), _) => transactions::check_prefix(prefix),
            (None, DeliveryGuarantee::ExactlyOnce) => Err(PgError::Config(format!(
                "PostgreSQL sink into {}: exactly-once needs a transaction prefix naming the \
                 job's prepared transactions (letters, digits, `-`, `_`, `.`)",
                c.table
            ))),
            (None, _) => Ok(()),
        }
    }

    fn opened(&mut self) -> Result<&mut OpenSink, TaskError> {
        self.open.as_mut().ok_or_else(|| {
            TaskError::user(format!(
                "PostgreSQL sink into {} was used before it was opened",
                self.config.table
            ))
        })
    }
}

/// A rolled-back or never-prepared transaction is settled; a prepared one is outstanding until
/// its checkpoint completes or aborts.
struct Outstanding {
    checkpoint: CheckpointId,
    gid: String,
    rows: Vec<Row>,
}

/// An opened subtask of the sink.
struct OpenSink {
    runtime: tokio::runtime::Runtime,
    connection: Connection,
    target: Target,
    guarantee: DeliveryGuarantee,
    batch_size: usize,
    subtask: u32,
    /// Exactly-once: how this sink names its transactions.
    names: Option<TransactionNames>,
    buffer: RowBuffer,
    scratch: BytesMut,
    // Invariant: at most one prepared transaction is outstanding, and nothing is written while
    // it is (see the module docs).
    outstanding: Option<Outstanding>,
    /// Transactions whose PREPARE may or may not have happened (the connection broke): rolled
    /// back before the next write, as their rows are buffered again.
    uncertain: Vec<String>,
    /// Data the database refused while a barrier was handled: reported by the next call.
    refused: Option<String>,
}

impl OpenSink {
    fn open(
        config: &Config,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<OpenSink, PgError> {
        let names = match (config.guarantee, &config.prefix) {
            (DeliveryGuarantee::ExactlyOnce, Some(prefix)) => {
                Some(TransactionNames::new(prefix, &ctx.uid)?)
            }
            _ => None,
        };
        let recorded: Vec<String> = restored
            .unwrap_or_default()
            .iter()
            .map(|bytes| StateEntry::decode(bytes))
            .map(|entry| entry.map(|StateEntry::Prepared { gid, .. }| gid))
            .collect::<Result<_, _>>()?;
        let runtime = new_runtime()?;
        let mut connection = Connection::new(config.url.clone());
        let target = runtime.block_on(async {
            let client = connection.client().await?;
            let schema = TableSchema::load(client, &config.table).await?;
            let target = Target::new(&schema, config.columns.as_deref(), config.mode)?;
            if ctx.index == 0 && (names.is_some() || !recorded.is_empty()) {
                settle_restored(client, &target.name, names.as_ref(), &recorded).await?;
            }
            Ok::<_, PgError>(target)
        })?;
        Ok(OpenSink {
            runtime,
            connection,
            target,
            guarantee: config.guarantee,
            batch_size: config.batch_size,
            subtask: ctx.index,
            names,
            buffer: RowBuffer::default(),
            scratch: BytesMut::new(),
            outstanding: None,
            uncertain: Vec::new(),
            refused: None,
        })
    }

    fn check_refused(&self) -> Result<(), TaskError> {
        match &self.refused {
            Some(message) => Err(TaskError::BadInput(message.clone())),
            None => Ok(()),
        }
    }

    /// Remembers a refusal met on a barrier, so that the next call fails the job.
    fn note(&mut self, e: PgError) -> TaskError {
        if let PgError::Data(message) | PgError::Config(message) = &e {
            self.refused = Some(message.clone());
        }
        e.into()
    }

    fn write_batch(&mut self, batch: Vec<Row>) -> Result<(), TaskError> {
        self.check_refused()?;
        for row in batch {
            self.target.check(&row, &mut self.scratch)?;
            let key = self.target.key_of(&row);
            self.buffer.push(key, row);
            if self.guarantee != DeliveryGuarantee::ExactlyOnce
                && self.buffer.len() >= self.batch_size
            {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Writes everything buffered, each batch committing on its own. On an error the rows stay
    /// buffered (writing them again is harmless: an append that failed wrote nothing, an upsert
    /// is idempotent).
    fn flush(&mut self) -> Result<(), PgError> {
        let rows = self.buffer.take();
        let written = self.runtime.block_on(async {
            for chunk in rows.chunks(self.batch_size) {
                self.connection
                    .write(&self.target, chunk, self.batch_size)
                    .await?;
            }
            Ok(())
        });
        if written.is_err() {
            let target = &self.target;
            self.buffer.put_back(rows, |r| target.key_of(r));
        }
        written
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        self.check_refused()?;
        match self.guarantee {
            DeliveryGuarantee::None => Ok(Vec::new()),
            DeliveryGuarantee::AtLeastOnce => match self.flush() {
                Ok(()) => Ok(Vec::new()),
                Err(e) => Err(self.note(e)),
            },
            DeliveryGuarantee::ExactlyOnce => self.prepare(checkpoint),
        }
    }

    /// Exactly-once on the barrier: writes the buffered rows into a transaction of their own and
    /// prepares it; the gid is the state.
    fn prepare(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        if let Some(o) = &self.outstanding {
            return Err(TaskError::user(format!(
                "PostgreSQL sink into {} declines checkpoint {}: the transaction of checkpoint \
                 {} ({}) is prepared and not yet committed (its completion notice has not \
                 arrived), and writing now could wait for its locks; the rows stay buffered \
                 for the next checkpoint",
                self.target.name, checkpoint.0, o.checkpoint.0, o.gid
            )));
        }
        if self.buffer.is_empty() {
            return Ok(Vec::new());
        }
        let names = self.names.as_ref().expect("exactly-once has names");
        let gid = names.gid(self.subtask, checkpoint);
        let rows = self.buffer.take();
        let uncertain = std::mem::take(&mut self.uncertain);
        let prepared = self.runtime.block_on(async {
            for old in &uncertain {
                transactions::roll_back(self.connection.client().await?, old).await?;
            }
            self.connection
                .write_prepared(&self.target, &rows, self.batch_size, &gid)
                .await
        });
        match prepared {
            Ok(()) => {
                let entry = StateEntry::Prepared {
                    gid: gid.clone(),
                    checkpoint: checkpoint.0,
                };
                self.outstanding = Some(Outstanding {
                    checkpoint,
                    gid,
                    rows,
                });
                Ok(vec![entry.encode()])
            }
            Err(e) => {
                let target = &self.target;
                self.buffer.put_back(rows, |r| target.key_of(r));
                self.uncertain = uncertain;
                if matches!(e, PgError::Connection { .. } | PgError::Transient { .. }) {
                    self.uncertain.push(gid);
                }
                Err(self.note(e))
            }
        }
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.check_refused()?;
        let Some(o) = self.outstanding.take_if(|o| o.checkpoint <= checkpoint) else {
            return Ok(());
        };
        let committed = self.runtime.block_on(async {
            transactions::commit(self.connection.client().await?, &o.gid).await
        });
        match committed {
            Ok(_) => Ok(()),
            Err(e) => {
                // Still prepared (or unknown): a restore from this checkpoint commits it.
                self.outstanding = Some(o);
                Err(e.into())
            }
        }
    }

    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.check_refused()?;
        let Some(o) = self.outstanding.take_if(|o| o.checkpoint == checkpoint) else {
            return Ok(());
        };
        let rolled_back = self.runtime.block_on(async {
            transactions::roll_back(self.connection.client().await?, &o.gid).await
        });
        match rolled_back {
            Ok(_) => {
                let target = &self.target;
                self.buffer.put_back(o.rows, |r| target.key_of(r));
                Ok(())
            }
            Err(e) => {
                self.outstanding = Some(o);
                Err(e.into())
            }
        }
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        self.check_refused()?;
        match self.guarantee {
            // The final checkpoint writes and commits what is buffered.
            DeliveryGuarantee::ExactlyOnce => Ok(()),
            DeliveryGuarantee::None | DeliveryGuarantee::AtLeastOnce => Ok(self.flush()?),
        }
    }
}

/// Subtask 0 on open: commits the transactions the restored checkpoint recorded and rolls back
/// this sink's others.
async fn settle_restored(
    client: &tokio_postgres::Client,
    table: &str,
    names: Option<&TransactionNames>,
    recorded: &[String],
) -> Result<(), PgError> {
    let prepared =
        transactions::list_prepared(client, names.map(TransactionNames::base), recorded).await?;
    let plan = transactions::plan_recovery(names, recorded, &prepared);
    for gid in &plan.commit {
        transactions::commit(client, gid).await?;
    }
    for gid in &plan.roll_back {
        transactions::roll_back(client, gid).await?;
    }
    if !plan.commit.is_empty() || !plan.roll_back.is_empty() {
        tracing::info!(
            table,
            committed = ?plan.commit,
            rolled_back = ?plan.roll_back,
            "PostgreSQL sink settled the prepared transactions of earlier runs"
        );
    }
    Ok(())
}

impl SinkFunction<Row> for PostgresSink {
    fn union_state(&self) -> bool {
        true
    }

    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.validate()?;
        self.open = Some(OpenSink::open(&self.config, ctx, restored)?);
        Ok(())
    }

    fn write_batch(&mut self, batch: Vec<Row>) -> Result<(), TaskError> {
        self.opened()?.write_batch(batch)
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        self.opened()?.snapshot(checkpoint)
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.opened()?.notify_complete(checkpoint)
    }

    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.opened()?.notify_aborted(checkpoint)
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        self.opened()?.finish()
    }
}

/// One checkpoint's worth of rows through an opened exactly-once sink: buffered in batches,
/// prepared on the barrier of `checkpoint`, committed on its completion. For timing the sink.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn write_through_checkpoint(
    sink: &mut PostgresSink,
    rows: Vec<Row>,
    checkpoint: CheckpointId,
) -> Result<(), TaskError> {
    let batch = sink.config.batch_size;
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        sink.write_batch(rows.by_ref().take(batch).collect())?;
    }
    sink.snapshot(checkpoint)?;
    sink.notify_complete(checkpoint)
}

/// The context of subtask `index` of a sink with operator uid `uid`, to open a sink outside a
/// job.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn operator_context(uid: &str, index: u32, parallelism: u32) -> OperatorContext {
    OperatorContext {
        uid: uid.to_string(),
        name: uid.to_string(),
        index,
        parallelism,
        max_parallelism: 128,
        key_groups: weir_core::KeyGroupRange::new(0, 0),
    }
}
