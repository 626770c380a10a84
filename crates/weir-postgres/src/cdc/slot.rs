//! The slot and the publication: made anew on a fresh start, checked on a restore.

use super::chunks;
use super::position::{Position, TableProgress};
use super::reader::Table;
use super::PostgresCdcSource;
use crate::error::PgError;

/// Runs `what` until it stops failing with "is active" (the slot is still held by the
/// connection of an attempt that just ended, which the server notices within moments), for up
/// to 30 s.
pub(super) async fn while_slot_busy<T, F, Fut>(mut what: F) -> Result<T, PgError>
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

/// A fresh start: the publication and the slot are made anew; the stream starts where the
/// slot was created, and every table's snapshot from its first key.
pub(super) async fn start_fresh(
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
pub(super) async fn check_restored(
    source: &PostgresCdcSource,
    sql: &tokio_postgres::Client,
    tables: &[Table],
    mut position: Position,
) -> Result<Position, PgError> {
    if position.slot != source.slot {
        return Err(PgError::Config(format!(
            "the checkpoint's CDC position is in slot {}, this source reads slot {}",
            position.slot, source.slot
        )));
    }
    // Invariant: the position's tables are the source's, in the source's order (the reader
    // indexes both alike); a table no longer read is dropped with its windows.
    let mut ordered = Vec::with_capacity(tables.len());
    for table in tables {
        let Some(i) = position
            .tables
            .iter()
            .position(|t| t.table == table.schema.name)
        else {
            return Err(PgError::Config(format!(
                "table {} is not in the checkpoint's CDC position: start the job fresh to read it",
                table.schema.name
            )));
        };
        ordered.push(position.tables.swap_remove(i));
    }
    position.tables = ordered;
    let read: Vec<&str> = tables.iter().map(|t| t.schema.name.as_str()).collect();
    position
        .windows
        .retain(|w| read.contains(&w.table.as_str()));
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
