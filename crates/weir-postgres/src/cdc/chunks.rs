//! Reading a table's initial snapshot in chunks of rows, in primary-key order, each in a
//! repeatable-read transaction whose snapshot is recorded (see `position.rs` for why).

use std::fmt::Write;

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::cdc::position::TxSnapshot;
use crate::error::PgError;
use crate::schema::{quote, TableSchema};
use crate::value::{Kind, Row, Value};

/// Rows read under one snapshot.
pub(crate) struct Chunk {
    pub rows: Vec<Row>,
    pub snapshot: TxSnapshot,
    /// The WAL insert position read right after the snapshot was taken.
    pub until: u64,
}

/// Reads up to `limit` rows of `table` with keys after `after`.
pub(crate) async fn read_chunk(
    client: &Client,
    table: &TableSchema,
    after: Option<&[Value]>,
    limit: usize,
) -> Result<Chunk, PgError> {
    let what = |e| PgError::statement(format!("reading the snapshot of {}", table.name), e);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(what)?;
    // The first statement takes the transaction's snapshot; the insert position is read after.
    let head = client
        .simple_query("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text")
        .await
        .map_err(what)?;
    let (snapshot, until) = match head.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => Some((r.get(0), r.get(1))),
        _ => None,
    }) {
        Some((Some(s), Some(l))) => (
            TxSnapshot::parse(s).map_err(PgError::Data)?,
            parse_lsn(l).map_err(PgError::Data)?,
        ),
        _ => return Err(PgError::Data("the server returned no snapshot".into())),
    };
    let sql = chunk_query(table, after, limit)?;
    let messages = client.simple_query(&sql).await.map_err(what)?;
    client.batch_execute("COMMIT").await.map_err(what)?;
    let mut rows = Vec::with_capacity(limit.min(messages.len()));
    for message in messages {
        let SimpleQueryMessage::Row(r) = message else {
            continue;
        };
        let mut row = Vec::with_capacity(table.columns.len());
        for (i, column) in table.columns.iter().enumerate() {
            row.push(match r.get(i) {
                None => Value::Null,
                Some(text) => column.kind.parse(text).map_err(|e| {
                    PgError::Data(format!("{}, column {}: {e}", table.name, column.name))
                })?,
            });
        }
        rows.push(row);
    }
    Ok(Chunk {
        rows,
        snapshot,
        until,
    })
}

/// `SELECT … WHERE (key) > (after) ORDER BY key LIMIT n`, text keys compared bytewise.
fn chunk_query(
    table: &TableSchema,
    after: Option<&[Value]>,
    limit: usize,
) -> Result<String, PgError> {
    let key_exprs: Vec<String> = table
        .primary_key
        .iter()
        .map(|&i| {
            let c = &table.columns[i];
            if c.kind == Kind::Text {
                format!("{} COLLATE \"C\"", quote(&c.name))
            } else {
                quote(&c.name)
            }
        })
        .collect();
    let columns: Vec<String> = table.columns.iter().map(|c| quote(&c.name)).collect();
    let mut sql = format!("SELECT {} FROM {}", columns.join(", "), table.sql_name);
    if let Some(after) = after {
        let literals = after
            .iter()
            .map(literal)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|v| {
                PgError::Data(format!(
                    "{}: key value {v} cannot be written as a literal",
                    table.name
                ))
            })?;
        let _ = write!(
            sql,
            " WHERE ({}) > ({})",
            key_exprs.join(", "),
            literals.join(", ")
        );
    }
    let _ = write!(sql, " ORDER BY {} LIMIT {limit}", key_exprs.join(", "));
    Ok(sql)
}

/// A key value as an SQL literal of its type.
fn literal(value: &Value) -> Result<String, String> {
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    Ok(match value {
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Numeric(d) => format!("{d}::numeric"),
        Value::Float(x) => format!("'{x:?}'::float8"),
        Value::Text(s) => quoted(s),
        Value::Bytes(b) => {
            let mut hex = String::from("'\\x");
            for byte in b {
                let _ = write!(hex, "{byte:02x}");
            }
            hex + "'::bytea"
        }
        Value::Uuid(_) | Value::Timestamp(_) | Value::TimestampTz(_) | Value::Date(_) => {
            let ty = match value {
                Value::Uuid(_) => "uuid",
                Value::Timestamp(_) => "timestamp",
                Value::TimestampTz(_) => "timestamptz",
                _ => "date",
            };
            let text = match value {
                Value::TimestampTz(us) => chrono::DateTime::from_timestamp_micros(*us)
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string())
                    .ok_or_else(|| value.to_string())?,
                Value::Timestamp(us) => chrono::DateTime::from_timestamp_micros(*us)
                    .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
                    .ok_or_else(|| value.to_string())?,
                other => other.to_string(),
            };
            format!("{}::{ty}", quoted(&text))
        }
        other => return Err(other.to_string()),
    })
}

/// Parses `X/Y` (two hexadecimal halves) into a 64-bit LSN.
pub(crate) fn parse_lsn(text: &str) -> Result<u64, String> {
    let bad = || format!("cannot read LSN `{text}`");
    let (hi, lo) = text.split_once('/').ok_or_else(bad)?;
    let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
    let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
    Ok(hi << 32 | lo)
}

/// An LSN as PostgreSQL prints it.
pub(crate) fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_parse_and_print_as_postgresql_does() {
        assert_eq!(parse_lsn("16/B374D848").unwrap(), 0x16_B374_D848);
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert!(parse_lsn("16B374D848").is_err());
    }

    #[test]
    fn key_literals_quote_text_and_type_the_rest() {
        assert_eq!(literal(&Value::Text("o'k".into())).unwrap(), "'o''k'");
        assert_eq!(literal(&Value::Int(-3)).unwrap(), "-3");
        assert_eq!(literal(&Value::Date(0)).unwrap(), "'1970-01-01'::date");
        assert!(literal(&Value::Null).is_err());
    }
}
