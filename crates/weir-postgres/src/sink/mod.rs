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
//!   the job and the server. The gids of every prepared transaction not yet committed are the
//!   subtask's state in checkpoint `n`. When a checkpoint completes, its notice runs
//!   `COMMIT PREPARED` for every transaction prepared up to it; a gid that is gone was committed
//!   already, so a repeated notice is harmless. An aborted checkpoint changes nothing: its
//!   transaction stays prepared and commits with the next checkpoint that completes (whose
//!   state lists it too), as the file sink's pending files do.
//!
//! A prepared transaction keeps its row locks until it commits, and the commit is run by the
//! same thread that would write the next transaction: an upsert must not touch a row while a
//! transaction of the sink that may hold its lock is still prepared. So when a barrier arrives
//! before the previous checkpoint's completion notice (the notice races the next barrier; a
//! savepoint triggered right after a checkpoint often wins), an upserting sink prepares nothing
//! for that checkpoint: its state lists the transactions still prepared **and the buffered
//! rows themselves**, which stay buffered and go into the next transaction. A restore from such
//! a checkpoint commits the listed transactions and then upserts the listed rows straight away,
//! before the job processes anything (upserting the same rows twice leaves the table as once,
//! should the restored run fail before its first checkpoint). Appending takes no row locks, so
//! an appending sink prepares a transaction on every barrier.
//!
//! The state is union state: after a restore, every subtask sees every entry the checkpoint
//! recorded, whatever the new parallelism. Subtask 0 alone settles the transactions while it
//! opens: it commits each recorded gid still prepared in the database, and rolls back every
//! other prepared transaction named `{prefix}:{uid}:…` — those prepared after the restored
//! checkpoint, whose rows will be written again. A fresh start rolls back all of them (a
//! previous run's leftovers). Transactions of other prefixes or other sinks are left alone.
//! Recorded rows of old subtask `s` are upserted by new subtask `s % parallelism`; where they
//! touch a row a recorded transaction holds, the row lock makes them wait for subtask 0's
//! commit, so they land after it. Gids are unique across the whole server, not per database,
//! so every job writing to a server needs its own prefix. No checkpoint starts before every
//! subtask has opened, so subtask 0 never rolls back a transaction of the current run and the
//! recorded rows are in before any new one.
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
pub(crate) use self::target::{Target, WriteMode};
use self::transactions::{StateEntry, TransactionNames};
use crate::error::PgError;
use crate::runtime::new_runtime;
use crate::schema::TableSchema;
use crate::url::PgUrl;
use crate::value::Row;
pub use weir_core::DeliveryGuarantee;

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

/// A prepared transaction, outstanding until a checkpoint at or after its own completes.
struct Outstanding {
    checkpoint: CheckpointId,
    gid: String,
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
    // Invariant: when upserting, nothing is written while a transaction is outstanding (see the
    // module docs).
    outstanding: Vec<Outstanding>,
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
        let entries: Vec<StateEntry> = restored
            .unwrap_or_default()
            .iter()
            .map(|bytes| StateEntry::decode(bytes))
            .collect::<Result<_, _>>()?;
        let recorded: Vec<String> = entries
            .iter()
            .filter_map(|e| match e {
                StateEntry::Prepared { gid, .. } => Some(gid.clone()),
                StateEntry::Buffered { .. } => None,
            })
            .collect();
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
        // The rows a checkpoint recorded unwritten: in before anything of this run.
        let mut mine = RowBuffer::default();
        let mut scratch = BytesMut::new();
        for entry in entries {
            if let StateEntry::Buffered { subtask, rows, .. } = entry {
                if subtask % ctx.parallelism.max(1) == ctx.index {
                    for row in rows {
                        target.check(&row, &mut scratch)?;
                        mine.push(target.key_of(&row), row);
                    }
                }
            }
        }
        if !mine.is_empty() {
            let rows = mine.take();
            runtime.block_on(async {
                for chunk in rows.chunks(config.batch_size) {
                    connection.write(&target, chunk, config.batch_size).await?;
                }
                Ok::<_, PgError>(())
            })?;
            tracing::info!(
                table = %target.name,
                rows = rows.len(),
                "PostgreSQL sink wrote the rows its restored checkpoint held unwritten"
            );
        }
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
            outstanding: Vec::new(),
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
    /// prepares it, unless an upserting sink still has a transaction prepared (then the rows
    /// themselves are recorded); the state lists every transaction still prepared.
    fn prepare(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        let blocked = self.target.mode == WriteMode::Upsert && !self.outstanding.is_empty();
        if !blocked && !self.buffer.is_empty() {
            self.prepare_buffered(checkpoint)?;
        }
        let mut state: Vec<Vec<u8>> = self
            .outstanding
            .iter()
            .map(|o| {
                StateEntry::Prepared {
                    gid: o.gid.clone(),
                    checkpoint: o.checkpoint.0,
                }
                .encode()
            })
            .collect();
        if blocked && !self.buffer.is_empty() {
            tracing::debug!(
                table = %self.target.name,
                checkpoint = checkpoint.0,
                rows = self.buffer.len(),
                "a transaction is still prepared: the checkpoint records the buffered rows"
            );
            state.push(StateEntry::encode_buffered(
                self.subtask,
                checkpoint.0,
                self.buffer.rows(),
            ));
        }
        Ok(state)
    }

    /// Writes the buffer into a transaction and prepares it as `checkpoint`'s.
    fn prepare_buffered(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
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
                self.outstanding.push(Outstanding { checkpoint, gid });
                Ok(())
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
        while let Some(o) = self.outstanding.first() {
            if o.checkpoint > checkpoint {
                break;
            }
            let gid = o.gid.clone();
            self.runtime.block_on(async {
                transactions::commit(self.connection.client().await?, &gid).await
            })?;
            // Committed (or found committed): a failure above leaves it outstanding, and a
            // restore from this checkpoint commits it.
            self.outstanding.remove(0);
        }
        Ok(())
    }

    /// An aborted checkpoint's transaction stays prepared: the next completed checkpoint lists
    /// it and commits it (rolling it back could lose rows a later checkpoint already counts on).
    fn notify_aborted(&mut self, _checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.check_refused()
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
        state_backend: Default::default(),
        metrics: Default::default(),
    }
}
