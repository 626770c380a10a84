//! An opened source subtask that reads: it alternates between emitting a chunk of the initial
//! snapshot and draining the replication stream, and keeps the position a checkpoint records.

use std::collections::{HashMap, VecDeque};

use compact_str::CompactString;
use weir_core::CheckpointId;

use super::chunks;
use super::pgoutput::{self, DecodedRelation, Message};
use super::position::{Position, Window};
use super::slot::{check_restored, start_fresh, while_slot_busy};
use super::stream::{ReplicationStream, StreamEvent, SESSION_OPTIONS};
use super::PostgresCdcSource;
use crate::error::PgError;
use crate::schema::TableSchema;
use crate::value::{Change, Row, RowKind, Value};

/// A table's catalog description with where its key sits in a row.
pub(super) struct Table {
    pub(super) schema: TableSchema,
    pub(super) name: CompactString,
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
pub(super) struct Reader {
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

impl Reader {
    /// The next [`position`](Self::position) is `checkpoint`'s.
    pub(super) fn snapshot_started(&mut self, checkpoint: CheckpointId) {
        self.next_checkpoint = Some(checkpoint);
    }

    /// What a checkpoint records now: the position, with the window of a chunk being emitted.
    pub(super) fn position(&mut self) -> Position {
        let mut position = self.position.clone();
        // Invariant: in the first transaction after a restore, the changes handled include
        // those the restored position skips, even before they are read again.
        position.skip = position.skip.max(self.to_skip);
        if let Some(chunk) = self.chunk.as_ref().filter(|c| c.emitted) {
            position.windows.push(chunk.window.clone());
        }
        if let Some(checkpoint) = self.next_checkpoint.take() {
            self.unacknowledged.push_back((checkpoint, position.lsn));
        }
        position
    }

    /// `checkpoint` completed: the slot may forget the changes before its position.
    pub(super) fn completed(&mut self, checkpoint: CheckpointId) {
        let mut lsn = None;
        while self
            .unacknowledged
            .front()
            .is_some_and(|(id, _)| *id <= checkpoint)
        {
            lsn = self.unacknowledged.pop_front().map(|(_, l)| l);
        }
        if let Some(lsn) = lsn {
            self.stream.acknowledge(lsn);
        }
    }

    pub(super) fn open(
        source: &PostgresCdcSource,
        restored: Option<Position>,
    ) -> Result<Reader, PgError> {
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
            position,
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

    pub(super) fn poll(&mut self, batch: &mut Vec<Change>, max: usize) -> Result<(), PgError> {
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
