//! `PostgresCdcSource`: a consistent snapshot of a set of tables, then their changes, from a
//! logical replication slot, emitted as a changelog ([`Change`]) exactly once.
//!
//! **Start.** On a fresh start the source (re)creates its publication (`FOR TABLE` the
//! tables) and its replication slot (`pgoutput`); the slot's creation point is where the
//! stream begins. Every table must have a primary key: the snapshot is read in chunks in key
//! order, and changes are matched to chunks by key.
//!
//! **Snapshot and stream together.** The task loop alternates between reading a chunk and
//! draining the stream. A change to a key no chunk has read yet is dropped (the chunk will
//! read the row as it is then); a change to a key a chunk read is emitted unless that chunk's
//! snapshot already saw its transaction (`position.rs`). So the hand-over from snapshot to
//! stream neither loses nor repeats a row, whenever a failure strikes.
//!
//! **Position.** A checkpoint records the end of the last transaction handled, how many changes
//! of the next one were handled, each table's snapshot progress and the open windows, as list
//! state (one element; the subtask that holds it reads the slot, the others stay idle). The
//! slot is told a position only when a checkpoint holding it **completes**, so the server keeps
//! every change a restore from the latest checkpoint needs. Restoring from an older snapshot
//! than the slot's confirmed position is refused with an error naming both positions: those
//! changes are gone from the slot.
//!
//! **Changelog.** Inserts and snapshot rows are `+I`; an update is `-U` (with the old row, when
//! the table's replica identity is `FULL`) then `+U`; a delete is `-D` (key columns only unless
//! `FULL`). An update that moves a row's key out of or into what is covered becomes `-D` or
//! `+I`. `TRUNCATE` cannot be expressed as row changes and fails the job with a clear error.

mod chunks;
mod pgoutput;
mod position;
mod stream;

use std::collections::{HashMap, VecDeque};

use compact_str::CompactString;
use weir_core::CheckpointId;
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

use crate::error::PgError;
use crate::schema::{split_name, TableSchema};
use crate::url::PgUrl;
use crate::value::{Change, Row, RowKind, Value};
use pgoutput::{DecodedRelation, Message};
pub(crate) use position::Position;
use position::{TableProgress, Window};
use stream::{ReplicationStream, StreamEvent, SESSION_OPTIONS};

/// Reads a snapshot and then the changes of `tables` through the slot `slot`.
pub struct PostgresCdcSource {
    url: PgUrl,
    tables: Vec<String>,
    slot: String,
    publication: String,
    chunk_size: usize,
    reader: Option<Box<Reader>>,
}

/// A clone is the configured source, unopened: subtasks clone it before opening.
impl Clone for PostgresCdcSource {
    fn clone(&self) -> Self {
        PostgresCdcSource {
            url: self.url.clone(),
            tables: self.tables.clone(),
            slot: self.slot.clone(),
            publication: self.publication.clone(),
            chunk_size: self.chunk_size,
            reader: None,
        }
    }
}

impl std::fmt::Debug for PostgresCdcSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCdcSource")
            .field("url", &self.url)
            .field("tables", &self.tables)
            .field("slot", &self.slot)
            .finish()
    }
}

impl PostgresCdcSource {
    /// A source over `tables` (`name` or `schema.name`), reading through the replication slot
    /// `slot` and the publication `weir_<slot>`, both created on a fresh start.
    pub fn new(url: PgUrl, tables: &[&str], slot: &str) -> Result<PostgresCdcSource, PgError> {
        if tables.is_empty() {
            return Err(PgError::Config(
                "the CDC source needs at least one table".into(),
            ));
        }
        let valid = |s: &str| {
            !s.is_empty()
                && s.len() <= 60
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if !valid(slot) {
            return Err(PgError::Config(format!(
                "slot name `{slot}`: use 1 to 60 lowercase letters, digits and underscores"
            )));
        }
        let tables = tables
            .iter()
            .map(|t| split_name(t).map(|(s, n)| format!("{s}.{n}")))
            .collect::<Result<_, _>>()?;
        Ok(PostgresCdcSource {
            url,
            tables,
            slot: slot.to_string(),
            publication: format!("weir_{slot}"),
            chunk_size: 10_000,
            reader: None,
        })
    }

    /// Rows per snapshot chunk (default 10,000).
    pub fn chunk_size(mut self, rows: usize) -> PostgresCdcSource {
        self.chunk_size = rows.max(1);
        self
    }
}

/// A table's catalog description with where its key sits in a row.
struct Table {
    schema: TableSchema,
    name: CompactString,
}

/// A relation from the stream, with its key's column indexes.
struct StreamRelation {
    decoded: DecodedRelation,
    name: CompactString,
    key: Vec<usize>,
}

/// The rows of a chunk still to emit.
struct PendingChunk {
    table: usize,
    rows: VecDeque<Row>,
    /// The table has no rows after these.
    last: bool,
    /// The keys emitted so far, with the chunk's snapshot (`hi` empty until the first row).
    window: Window,
    emitted: bool,
}

/// An opened, reading source subtask.
struct Reader {
    runtime: tokio::runtime::Runtime,
    sql: tokio_postgres::Client,
    stream: ReplicationStream,
    position: Position,
    tables: Vec<Table>,
    relations: HashMap<u32, StreamRelation>,
    xid: u32,
    /// Changes of the first transaction after a restore that were handled before it.
    to_skip: u64,
    chunk: Option<PendingChunk>,
    /// Read a chunk before draining the stream again.
    chunk_turn: bool,
    /// The last transactions handled, to retry a chunk whose snapshot missed one of them.
    recent: VecDeque<u32>,
    /// Positions of checkpoints taken and not yet completed.
    unacknowledged: VecDeque<(CheckpointId, u64)>,
    next_checkpoint: Option<CheckpointId>,
    chunk_size: usize,
}

const RECENT_TRANSACTIONS: usize = 4096;

impl SourceFunction<Change> for PostgresCdcSource {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        // A subtask that restores no position (or, on a fresh start, is not subtask 0) reads
        // nothing: a slot has one reader.
        let position = match restored {
            None if ctx.index == 0 => None,
            None => return Ok(()),
            Some(elements) => match elements.as_slice() {
                [] => return Ok(()),
                [one] => Some(Position::decode(one).map_err(TaskError::BadInput)?),
                _ => {
                    return Err(TaskError::BadInput(
                        "a PostgreSQL CDC source subtask was given several positions".into(),
                    ))
                }
            },
        };
        self.reader = Some(Box::new(Reader::open(self, position)?));
        Ok(())
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<Change>,
        max: usize,
    ) -> Result<SourceStatus, TaskError> {
        let Some(reader) = self.reader.as_deref_mut() else {
            return Ok(SourceStatus::Idle);
        };
        reader.poll(batch, max)?;
        Ok(if batch.is_empty() {
            SourceStatus::Idle
        } else {
            SourceStatus::Emitted
        })
    }

    fn snapshot_started(&mut self, checkpoint: CheckpointId) {
        if let Some(reader) = self.reader.as_deref_mut() {
            reader.next_checkpoint = Some(checkpoint);
        }
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        let Some(reader) = self.reader.as_deref_mut() else {
            return Ok(Vec::new());
        };
        let mut position = reader.position.clone();
        if let Some(chunk) = reader.chunk.as_ref().filter(|c| c.emitted) {
            position.windows.push(chunk.window.clone());
        }
        if let Some(checkpoint) = reader.next_checkpoint.take() {
            reader.unacknowledged.push_back((checkpoint, position.lsn));
        }
        Ok(vec![position.encode()])
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        let Some(reader) = self.reader.as_deref_mut() else {
            return Ok(());
        };
        let mut lsn = None;
        while reader
            .unacknowledged
            .front()
            .is_some_and(|(id, _)| *id <= checkpoint)
        {
            lsn = reader.unacknowledged.pop_front().map(|(_, l)| l);
        }
        if let Some(lsn) = lsn {
            reader.stream.acknowledge(lsn);
        }
        Ok(())
    }
}

/// Runs `what` until it stops failing with "is active" (the slot is still held by the
/// connection of an attempt that just ended, which the server notices within moments), for up
/// to 30 s.
async fn while_slot_busy<T, F, Fut>(mut what: F) -> Result<T, PgError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, PgError>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match what().await {
            Err(e)
                if e.to_string().contains("is active") && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

impl Reader {
    fn open(source: &PostgresCdcSource, restored: Option<Position>) -> Result<Reader, PgError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-cdc")
            .enable_all()
            .build()
            .map_err(|e| PgError::Config(format!("cannot start an I/O runtime: {e}")))?;
        let (sql, tables, position, stream) = runtime.block_on(async {
            let sql = source.url.connect().await?;
            let session = SESSION_OPTIONS
                .split("-c ")
                .filter(|s| !s.trim().is_empty())
                .map(|s| format!("SET {};", s.trim()))
                .collect::<String>();
            sql.batch_execute(&session)
                .await
                .map_err(|e| PgError::statement("setting up the session", e))?;
            let mut tables = Vec::with_capacity(source.tables.len());
            for name in &source.tables {
                let schema = TableSchema::load(&sql, name).await?;
                if schema.primary_key.is_empty() {
                    return Err(PgError::Config(format!(
                        "table {} has no primary key: the CDC source reads its snapshot in key order and matches changes by key",
                        schema.name
                    )));
                }
                tables.push(Table {
                    name: CompactString::from(schema.name.as_str()),
                    schema,
                });
            }
            let position = match restored {
                None => start_fresh(source, &sql, &tables).await?,
                Some(p) => check_restored(source, &sql, &tables, p).await?,
            };
            let stream = while_slot_busy(|| {
                ReplicationStream::start(&source.url, &source.slot, &source.publication, position.lsn)
            })
            .await?;
            Ok::<_, PgError>((sql, tables, position, stream))
        })?;
        tracing::info!(
            slot = %source.slot,
            lsn = %chunks::format_lsn(position.lsn),
            tables = ?source.tables,
            snapshot_done = position.tables.iter().all(|t| t.done),
            "PostgreSQL CDC source reading"
        );
        Ok(Reader {
            runtime,
            sql,
            stream,
            to_skip: position.skip,
            position: Position {
                skip: 0,
                ..position
            },
            tables,
            relations: HashMap::new(),
            xid: 0,
            chunk: None,
            chunk_turn: true,
            recent: VecDeque::with_capacity(RECENT_TRANSACTIONS),
            unacknowledged: VecDeque::new(),
            next_checkpoint: None,
            chunk_size: source.chunk_size,
        })
    }

    fn poll(&mut self, batch: &mut Vec<Change>, max: usize) -> Result<(), PgError> {
        if self.chunk.is_some() {
            self.emit_chunk(batch, max);
            return Ok(());
        }
        let snapshot_pending = self.position.tables.iter().any(|t| !t.done);
        if self.chunk_turn && snapshot_pending {
            self.chunk_turn = false;
            self.read_chunk()?;
            self.emit_chunk(batch, max);
            return Ok(());
        }
        self.chunk_turn = true;
        while batch.len() < max {
            let event = match self.stream.events.try_recv() {
                Ok(event) => event,
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    return Err(PgError::Transient {
                        what: format!("replication from slot {}", self.position.slot),
                        message: "the stream ended".into(),
                    })
                }
            };
            match event {
                StreamEvent::Begin { xid } => {
                    self.xid = xid;
                    self.position.skip = 0;
                    if self.recent.len() == RECENT_TRANSACTIONS {
                        self.recent.pop_front();
                    }
                    self.recent.push_back(xid);
                }
                StreamEvent::Data(bytes) => self.handle(&bytes, batch)?,
                StreamEvent::Commit { end_lsn } => {
                    self.position.advance(end_lsn);
                    self.to_skip = 0;
                }
                StreamEvent::Failed(message) => {
                    return Err(PgError::Transient {
                        what: format!("replication from slot {}", self.position.slot),
                        message,
                    })
                }
            }
        }
        Ok(())
    }

    /// One pgoutput message of the current transaction.
    fn handle(&mut self, bytes: &[u8], batch: &mut Vec<Change>) -> Result<(), PgError> {
        let message = pgoutput::decode(bytes).map_err(PgError::Data)?;
        let relation_id = match &message {
            Message::Relation(relation) => {
                let decoded = DecodedRelation::new(relation)?;
                let Some(table) = self.tables.iter().find(|t| t.schema.name == relation.name)
                else {
                    return Ok(());
                };
                let key = table
                    .schema
                    .primary_key
                    .iter()
                    .map(|&i| {
                        let name = &table.schema.columns[i].name;
                        decoded
                            .columns
                            .iter()
                            .position(|c| c == name)
                            .ok_or_else(|| {
                                PgError::Data(format!(
                                    "key column {name} of {} is missing from the stream",
                                    relation.name
                                ))
                            })
                    })
                    .collect::<Result<_, _>>()?;
                self.relations.insert(
                    relation.id,
                    StreamRelation {
                        decoded,
                        name: table.name.clone(),
                        key,
                    },
                );
                return Ok(());
            }
            Message::Insert { relation, .. }
            | Message::Update { relation, .. }
            | Message::Delete { relation, .. } => *relation,
            Message::Truncate { relations } => {
                let names: Vec<&str> = relations
                    .iter()
                    .filter_map(|r| self.relations.get(r).map(|s| s.name.as_str()))
                    .collect();
                return Err(PgError::Data(format!(
                    "TRUNCATE of {}: a changelog cannot express it as row changes; \
                     start the job fresh to read the tables again",
                    names.join(", ")
                )));
            }
            Message::Other => return Ok(()),
        };
        self.position.skip += 1;
        if self.position.skip <= self.to_skip {
            return Ok(());
        }
        let relation = self.relations.get(&relation_id).ok_or_else(|| {
            PgError::Data(format!(
                "a change refers to relation {relation_id}, which the stream never described"
            ))
        })?;
        let key_of =
            |row: &Row| -> Vec<Value> { relation.key.iter().map(|&i| row[i].clone()).collect() };
        let emits = |key: &[Value]| self.position.emits(&relation.name, key, self.xid);
        let change = |kind, row| Change {
            kind,
            table: relation.name.clone(),
            row,
        };
        match message {
            Message::Insert { new, .. } => {
                let row = relation.decoded.row(&new)?;
                if emits(&key_of(&row)) {
                    batch.push(change(RowKind::Insert, row));
                }
            }
            Message::Update { old, new, .. } => {
                let new = relation.decoded.row(&new)?;
                let new_key = key_of(&new);
                let old = old
                    .map(|(key_only, fields)| relation.decoded.row(&fields).map(|r| (key_only, r)))
                    .transpose()?;
                let old_key = old.as_ref().map(|(_, r)| key_of(r));
                let emit_new = emits(&new_key);
                let emit_old = old_key.as_deref().map_or(emit_new, emits);
                let key_changed = old_key.as_ref().is_some_and(|k| *k != new_key);
                match (emit_old, emit_new) {
                    (true, true) if !key_changed => {
                        if let Some((false, old)) = old {
                            batch.push(change(RowKind::UpdateBefore, old));
                        }
                        batch.push(change(RowKind::UpdateAfter, new));
                    }
                    (true, true) => {
                        if let Some((_, old)) = old {
                            batch.push(change(RowKind::Delete, old));
                        }
                        batch.push(change(RowKind::Insert, new));
                    }
                    (true, false) => {
                        if let Some((_, old)) = old {
                            batch.push(change(RowKind::Delete, old));
                        }
                    }
                    (false, true) => batch.push(change(RowKind::Insert, new)),
                    (false, false) => {}
                }
            }
            Message::Delete { old, .. } => {
                let row = relation.decoded.row(&old)?;
                if emits(&key_of(&row)) {
                    batch.push(change(RowKind::Delete, row));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads the next chunk of the first table whose snapshot is not done.
    fn read_chunk(&mut self) -> Result<(), PgError> {
        let Some(index) = self.position.tables.iter().position(|t| !t.done) else {
            return Ok(());
        };
        let after = self.position.tables[index].after.clone();
        let table = &self.tables[index];
        let mut attempts = 0;
        let chunk = loop {
            let chunk = self.runtime.block_on(chunks::read_chunk(
                &self.sql,
                &table.schema,
                after.as_deref(),
                self.chunk_size,
            ))?;
            // A transaction already handled (its changes to unread keys dropped) must be
            // visible to the chunk; right after its commit it may briefly not be yet.
            if !self.recent.iter().any(|&x| chunk.snapshot.misses(x)) {
                break chunk;
            }
            attempts += 1;
            if attempts == 200 {
                return Err(PgError::Transient {
                    what: format!("reading the snapshot of {}", table.name),
                    message: "the snapshot kept missing a transaction already streamed".into(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let last = chunk.rows.len() < self.chunk_size;
        if chunk.rows.is_empty() {
            self.position.tables[index].done = last;
            return Ok(());
        }
        self.chunk = Some(PendingChunk {
            table: index,
            rows: chunk.rows.into(),
            last,
            window: Window {
                table: self.position.tables[index].table.clone(),
                lo: after,
                hi: Vec::new(),
                snapshot: chunk.snapshot,
                until: chunk.until,
            },
            emitted: false,
        });
        Ok(())
    }

    /// Emits rows of the pending chunk as inserts; the keys up to the last one emitted are
    /// covered from then on, under the chunk's window.
    fn emit_chunk(&mut self, batch: &mut Vec<Change>, max: usize) {
        let Some(chunk) = self.chunk.as_mut() else {
            return;
        };
        let table = &self.tables[chunk.table];
        let n = max.saturating_sub(batch.len()).min(chunk.rows.len());
        for row in chunk.rows.drain(..n) {
            chunk.window.hi.clear();
            chunk
                .window
                .hi
                .extend(table.schema.primary_key.iter().map(|&i| row[i].clone()));
            batch.push(Change {
                kind: RowKind::Insert,
                table: table.name.clone(),
                row,
            });
            chunk.emitted = true;
        }
        let progress = &mut self.position.tables[chunk.table];
        if chunk.emitted {
            progress.after = Some(chunk.window.hi.clone());
        }
        if chunk.rows.is_empty() {
            let chunk = self.chunk.take().expect("a pending chunk");
            let progress = &mut self.position.tables[chunk.table];
            progress.done = chunk.last;
            if chunk.emitted && chunk.window.until > self.position.lsn {
                self.position.windows.push(chunk.window);
            }
        }
    }
}

/// A fresh start: the publication and the slot are made anew; the stream starts where the
/// slot was created, and every table's snapshot from its first key.
async fn start_fresh(
    source: &PostgresCdcSource,
    sql: &tokio_postgres::Client,
    tables: &[Table],
) -> Result<Position, PgError> {
    let level = sql
        .query_one("SHOW wal_level", &[])
        .await
        .map_err(|e| PgError::statement("reading wal_level", e))?;
    let level: String = level.get(0);
    if level != "logical" {
        return Err(PgError::Config(format!(
            "the server at {} has wal_level={level}; the CDC source needs wal_level=logical \
             (set it in postgresql.conf and restart the server)",
            source.url
        )));
    }
    let names: Vec<&str> = tables.iter().map(|t| t.schema.sql_name.as_str()).collect();
    sql.batch_execute(&format!(
        "DROP PUBLICATION IF EXISTS {pub}; CREATE PUBLICATION {pub} FOR TABLE {tables}",
        pub = crate::schema::quote(&source.publication),
        tables = names.join(", ")
    ))
    .await
    .map_err(|e| PgError::statement(format!("creating publication {}", source.publication), e))?;
    let slot = source.slot.as_str();
    while_slot_busy(|| async {
        sql.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| PgError::statement(format!("dropping the old slot {slot}"), e))
    })
    .await?;
    let created = sql
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .map_err(|e| PgError::statement(format!("creating replication slot {slot}"), e))?;
    let lsn = chunks::parse_lsn(created.get(0)).map_err(PgError::Data)?;
    tracing::info!(%slot, lsn = %chunks::format_lsn(lsn), "created replication slot");
    Ok(Position {
        slot: source.slot.clone(),
        lsn,
        skip: 0,
        tables: tables
            .iter()
            .map(|t| TableProgress {
                table: t.schema.name.clone(),
                done: false,
                after: None,
            })
            .collect(),
        windows: Vec::new(),
    })
}

/// A restore: the position must belong to this slot and these tables, and the slot must not
/// have been told a later position (the changes in between would be gone).
async fn check_restored(
    source: &PostgresCdcSource,
    sql: &tokio_postgres::Client,
    tables: &[Table],
    position: Position,
) -> Result<Position, PgError> {
    if position.slot != source.slot {
        return Err(PgError::Config(format!(
            "the checkpoint's CDC position is in slot {}, this source reads slot {}",
            position.slot, source.slot
        )));
    }
    for table in tables {
        if !position.tables.iter().any(|t| t.table == table.schema.name) {
            return Err(PgError::Config(format!(
                "table {} is not in the checkpoint's CDC position: start the job fresh to read it",
                table.schema.name
            )));
        }
    }
    let rows = sql
        .query(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&source.slot],
        )
        .await
        .map_err(|e| PgError::statement(format!("reading slot {}", source.slot), e))?;
    let Some(row) = rows.first() else {
        return Err(PgError::Config(format!(
            "replication slot {} does not exist any more: the changes since the checkpoint are \
             gone; start the job fresh",
            source.slot
        )));
    };
    let confirmed: Option<&str> = row.get(0);
    if let Some(confirmed) = confirmed
        .map(chunks::parse_lsn)
        .transpose()
        .map_err(PgError::Data)?
    {
        if confirmed > position.lsn {
            return Err(PgError::Config(format!(
                "replication slot {} has confirmed {}, past this snapshot's position {}: the \
                 changes in between are gone from the slot; restore the latest checkpoint or \
                 start the job fresh",
                source.slot,
                chunks::format_lsn(confirmed),
                chunks::format_lsn(position.lsn)
            )));
        }
    }
    sql.batch_execute(&format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '{pub}') THEN \
         CREATE PUBLICATION {quoted} FOR TABLE {tables}; END IF; END $$",
        pub = source.publication,
        quoted = crate::schema::quote(&source.publication),
        tables = tables
            .iter()
            .map(|t| t.schema.sql_name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .await
    .map_err(|e| PgError::statement(format!("checking publication {}", source.publication), e))?;
    Ok(position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::{execute, fresh_database, query};
    use std::collections::BTreeMap;
    use weir_core::KeyGroupRange;

    fn ctx(index: u32) -> OperatorContext {
        OperatorContext {
            uid: "cdc".into(),
            name: "cdc".into(),
            index,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 0),
        }
    }

    /// Applies a changelog to a table keyed by its first column, refusing any change that
    /// contradicts what came before (an insert of a present key, a retraction of an absent
    /// one): a lost or repeated change shows up here or in the final comparison.
    #[derive(Default)]
    struct Materialized(BTreeMap<i64, Row>);

    impl Materialized {
        fn apply(&mut self, changes: &[Change]) {
            for c in changes {
                let id = c.row[0].as_i64().unwrap();
                match c.kind {
                    RowKind::Insert => {
                        assert!(self.0.insert(id, c.row.clone()).is_none(), "{c:?} twice")
                    }
                    RowKind::UpdateBefore => {
                        assert_eq!(self.0.get(&id), Some(&c.row), "-U of a row not there")
                    }
                    RowKind::UpdateAfter => {
                        assert!(
                            self.0.insert(id, c.row.clone()).is_some(),
                            "{c:?} of nothing"
                        )
                    }
                    RowKind::Delete => assert!(self.0.remove(&id).is_some(), "{c:?} of nothing"),
                }
            }
        }

        fn rows(&self) -> Vec<Vec<String>> {
            self.0
                .values()
                .map(|r| {
                    r.iter()
                        .map(|v| v.to_string().trim_matches('\'').to_string())
                        .collect()
                })
                .collect()
        }
    }

    fn poll_until_quiet(source: &mut PostgresCdcSource, out: &mut Vec<Change>) {
        let mut quiet = 0;
        while quiet < 20 {
            let mut batch = Vec::new();
            source.poll_batch(&mut batch, 64).unwrap();
            if batch.is_empty() {
                quiet += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            } else {
                quiet = 0;
            }
            out.extend(batch);
        }
    }

    fn table_rows(url: &PgUrl) -> Vec<Vec<String>> {
        query(url, "SELECT id, customer, amount FROM orders ORDER BY id")
    }

    #[test]
    fn snapshot_and_changes_interleaved_with_writes_and_a_restore_emit_every_change_once() {
        let url = fresh_database("cdc_interleaved");
        execute(
            &url,
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL);
             ALTER TABLE orders REPLICA IDENTITY FULL;
             INSERT INTO orders SELECT g, g % 7, g * 1.5 FROM generate_series(1, 100) g;",
        );
        let source = PostgresCdcSource::new(url.clone(), &["orders"], "cdc_interleaved")
            .unwrap()
            .chunk_size(7);
        let mut first = source.clone();
        first.open(&ctx(0), None).unwrap();
        let mut emitted = Vec::new();
        let mut checkpoint = None;
        for step in 0..60i64 {
            // Writes land while the snapshot is read: new keys, updates and deletes on both
            // sides of the chunks read so far.
            execute(
                &url,
                &format!(
                    "INSERT INTO orders VALUES ({}, 3, 1.00);
                     UPDATE orders SET amount = amount + 1 WHERE id IN ({}, {});
                     DELETE FROM orders WHERE id = {};",
                    1000 + step,
                    step + 1,
                    100 - step,
                    40 + step,
                ),
            );
            let mut batch = Vec::new();
            first.poll_batch(&mut batch, 5).unwrap();
            emitted.extend(batch);
            if step == 30 {
                first.snapshot_started(CheckpointId(1));
                checkpoint = Some((first.snapshot_position().unwrap(), emitted.len()));
            }
        }
        // A crash: what was emitted after the checkpoint is lost downstream too. The restored
        // source must bring it again, and nothing the checkpoint covers.
        drop(first);
        let (state, covered) = checkpoint.unwrap();
        let mut view = Materialized::default();
        view.apply(&emitted[..covered]);
        let mut restored = source.clone();
        restored.open(&ctx(0), Some(state)).unwrap();
        execute(
            &url,
            "UPDATE orders SET customer = 9 WHERE id % 5 = 0; DELETE FROM orders WHERE id = 2;",
        );
        let mut after = Vec::new();
        poll_until_quiet(&mut restored, &mut after);
        view.apply(&after);
        assert_eq!(view.rows(), table_rows(&url));
        assert!(after.iter().any(|c| c.kind == RowKind::UpdateBefore));
    }

    #[test]
    fn every_supported_type_arrives_typed_from_the_snapshot_and_from_the_stream() {
        let url = fresh_database("cdc_types");
        execute(
            &url,
            "CREATE TABLE typed (id int PRIMARY KEY, b bool, s smallint, big bigint, r real,
               d double precision, n numeric(10,3), t text, v varchar(5), c char(2), by bytea,
               ts timestamp, tz timestamptz, day date, j json, jb jsonb, u uuid);
             INSERT INTO typed VALUES (1, true, -2, 9000000000, 1.5, -2.25, 3.125, 'x''y', 'v',
               'c', '\\x00ff', '2024-02-29 12:34:56.789', '2024-02-29 12:34:56+02',
               '2024-02-29', '{\"a\": 1}', '{\"b\": [2]}',
               '00000000-0000-0000-0000-0000000000ff');",
        );
        let mut source = PostgresCdcSource::new(url.clone(), &["typed"], "cdc_types").unwrap();
        source.open(&ctx(0), None).unwrap();
        execute(
            &url,
            "INSERT INTO typed SELECT 2, b, s, big, r, d, n, t, v, c, by, ts, tz, day, j, jb, u
               FROM typed WHERE id = 1;
             INSERT INTO typed (id, t) VALUES (3, NULL);",
        );
        let mut changes = Vec::new();
        poll_until_quiet(&mut source, &mut changes);
        assert_eq!(changes.len(), 3, "{changes:?}");
        let row = &changes[0].row;
        let expected = vec![
            Value::Int(1),
            Value::Bool(true),
            Value::Int(-2),
            Value::Int(9_000_000_000),
            Value::Float(1.5),
            Value::Float(-2.25),
            Value::Numeric(crate::Decimal::new(3125, 3)),
            Value::Text("x'y".into()),
            Value::Text("v".into()),
            Value::Text("c ".into()),
            Value::Bytes(vec![0, 255]),
            Value::Timestamp(1_709_210_096_789_000),
            Value::TimestampTz(1_709_202_896_000_000),
            Value::Date(19_782),
            Value::Json("{\"a\": 1}".into()),
            Value::Json("{\"b\": [2]}".into()),
            Value::Uuid({
                let mut u = [0; 16];
                u[15] = 255;
                u
            }),
        ];
        assert_eq!(row, &expected, "from the snapshot");
        let mut streamed = expected.clone();
        streamed[0] = Value::Int(2);
        assert_eq!(changes[1].row, streamed, "from the stream");
        assert_eq!(changes[2].kind, RowKind::Insert);
        assert_eq!(changes[2].row[7], Value::Null);
        assert_eq!(changes[2].table.as_str(), "public.typed");
    }

    #[test]
    fn a_column_of_an_unsupported_type_or_a_table_without_a_key_is_an_error_naming_it() {
        let url = fresh_database("cdc_unsupported");
        execute(
            &url,
            "CREATE TABLE shapes (id int PRIMARY KEY, at point); CREATE TABLE loose (x int);",
        );
        let mut source = PostgresCdcSource::new(url.clone(), &["shapes"], "cdc_bad").unwrap();
        let err = source.open(&ctx(0), None).unwrap_err().to_string();
        assert!(
            err.contains("column at of public.shapes has type point"),
            "{err}"
        );
        let mut source = PostgresCdcSource::new(url.clone(), &["loose"], "cdc_bad").unwrap();
        let err = source.open(&ctx(0), None).unwrap_err().to_string();
        assert!(err.contains("public.loose has no primary key"), "{err}");
        assert!(PostgresCdcSource::new(url, &["loose"], "Bad-Slot").is_err());
    }

    fn confirmed(url: &PgUrl, slot: &str) -> String {
        query(
            url,
            &format!(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
            ),
        )[0][0]
            .clone()
    }

    #[test]
    fn the_slot_is_told_a_position_only_when_the_checkpoint_holding_it_completes() {
        let url = fresh_database("cdc_confirm");
        execute(&url, "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL)");
        let mut source = PostgresCdcSource::new(url.clone(), &["orders"], "cdc_confirm").unwrap();
        source.open(&ctx(0), None).unwrap();
        let created = confirmed(&url, "cdc_confirm");
        execute(
            &url,
            "INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 100) g",
        );
        let mut changes = Vec::new();
        poll_until_quiet(&mut source, &mut changes);
        assert_eq!(changes.len(), 100);
        source.snapshot_started(CheckpointId(1));
        source.snapshot_position().unwrap();
        // Status updates go out every second: two of them pass without the position.
        std::thread::sleep(std::time::Duration::from_millis(2500));
        assert_eq!(
            confirmed(&url, "cdc_confirm"),
            created,
            "confirmed before completion"
        );
        source.notify_complete(CheckpointId(1)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while confirmed(&url, "cdc_confirm") == created {
            assert!(std::time::Instant::now() < deadline, "never confirmed");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
