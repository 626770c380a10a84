//! Typed rows: PostgreSQL's common types as Rust values, the changelog a CDC source emits, and
//! how values are written back into columns.
//!
//! | PostgreSQL | [`Value`] |
//! |---|---|
//! | `bool` | `Bool` |
//! | `smallint`, `integer`, `bigint`, `oid` | `Int(i64)` |
//! | `real`, `double precision` | `Float(f64)` |
//! | `numeric` (up to 28 significant digits) | `Numeric(Decimal)` |
//! | `text`, `varchar`, `char`, `name` | `Text` |
//! | `bytea` | `Bytes` |
//! | `timestamp` | `Timestamp` (microseconds since 1970-01-01, no zone) |
//! | `timestamptz` | `TimestampTz` (microseconds since 1970-01-01 UTC) |
//! | `date` | `Date` (days since 1970-01-01) |
//! | `json`, `jsonb` | `Json` (the document's text) |
//! | `uuid` | `Uuid` |
//!
//! Any other column type is refused with an error naming the table, the column and the type.

use std::fmt;

use bytes::BytesMut;
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use compact_str::CompactString;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use tokio_postgres::types::{IsNull, ToSql, Type};

use crate::error::PgError;

/// One column's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Numeric(Decimal),
    Text(String),
    Bytes(Vec<u8>),
    /// Microseconds since 1970-01-01 00:00, without a time zone.
    Timestamp(i64),
    /// Microseconds since 1970-01-01 00:00 UTC.
    TimestampTz(i64),
    /// Days since 1970-01-01.
    Date(i32),
    /// A JSON document's text (`serde_json::from_str` reads it).
    Json(String),
    Uuid([u8; 16]),
    /// Not sent by the server: a TOASTed value an update left unchanged, or a column outside
    /// the replica identity in a before image.
    Unavailable,
}

impl Value {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// Integers and numerics as a decimal.
    pub fn as_decimal(&self) -> Option<Decimal> {
        match self {
            Value::Numeric(d) => Some(*d),
            Value::Int(i) => Some(Decimal::from(*i)),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) | Value::Json(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

impl fmt::Display for Value {
    /// Values as PostgreSQL would print them, for error messages (long ones cut short).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Numeric(d) => write!(f, "{d}"),
            Value::Text(s) | Value::Json(s) => {
                let cut: String = s.chars().take(80).collect();
                let more = if cut.len() < s.len() { "…" } else { "" };
                write!(f, "'{cut}{more}'")
            }
            Value::Bytes(b) => write!(f, "bytea of {} bytes", b.len()),
            Value::Timestamp(us) => match DateTime::from_timestamp_micros(*us) {
                Some(t) => write!(f, "{}", t.naive_utc()),
                None => write!(f, "timestamp {us} µs"),
            },
            Value::TimestampTz(us) => match DateTime::from_timestamp_micros(*us) {
                Some(t) => write!(f, "{t}"),
                None => write!(f, "timestamptz {us} µs"),
            },
            Value::Date(d) => match NaiveDate::from_epoch_days(*d) {
                Some(day) => write!(f, "{day}"),
                None => write!(f, "date {d}"),
            },
            Value::Uuid(u) => write!(f, "{}", uuid::Uuid::from_bytes(*u)),
            Value::Unavailable => f.write_str("(unavailable)"),
        }
    }
}

/// A row: one value per column, in the table's column order.
pub type Row = Vec<Value>;

/// What a change did to a row, as Flink's `RowKind`: `+I`, `-U`, `+U`, `-D`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RowKind {
    /// `+I`: a new row (also every row of the initial snapshot).
    Insert,
    /// `-U`: the row as it was before an update (only where the table's replica identity
    /// sends before images: `REPLICA IDENTITY FULL`).
    UpdateBefore,
    /// `+U`: the row after an update.
    UpdateAfter,
    /// `-D`: a deleted row (the key columns only, others [`Value::Unavailable`], unless the
    /// table's replica identity is `FULL`).
    Delete,
}

impl RowKind {
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// Whether the row is added (`+I`, `+U`) rather than retracted (`-U`, `-D`).
    pub fn is_addition(self) -> bool {
        matches!(self, RowKind::Insert | RowKind::UpdateAfter)
    }
}

/// One entry of the changelog a [`PostgresCdcSource`](crate::PostgresCdcSource) emits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub kind: RowKind,
    /// The table, as `schema.name` (short names are stored inline, without allocating).
    pub table: CompactString,
    pub row: Row,
}

/// A column's type, as far as Weir reads and writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int,
    Float,
    Numeric,
    Text,
    Bytes,
    Timestamp,
    TimestampTz,
    Date,
    Json,
    Uuid,
}

impl Kind {
    /// The kind of the type with this OID, or an error naming the column.
    pub(crate) fn of(oid: u32, table: &str, column: &str) -> Result<Kind, PgError> {
        Ok(match oid {
            16 => Kind::Bool,
            20 | 21 | 23 | 26 => Kind::Int,
            700 | 701 => Kind::Float,
            1700 => Kind::Numeric,
            25 | 1043 | 1042 | 19 => Kind::Text,
            17 => Kind::Bytes,
            1114 => Kind::Timestamp,
            1184 => Kind::TimestampTz,
            1082 => Kind::Date,
            114 | 3802 => Kind::Json,
            2950 => Kind::Uuid,
            _ => {
                let name = Type::from_oid(oid)
                    .map(|t| t.name().to_string())
                    .unwrap_or_else(|| format!("type with OID {oid}"));
                return Err(PgError::Config(format!(
                    "column {column} of {table} has type {name}, which Weir does not read \
                     (supported: bool, integers, real, double precision, numeric, text, varchar, \
                     char, bytea, timestamp, timestamptz, date, json, jsonb, uuid)"
                )));
            }
        })
    }

    /// Parses a value in PostgreSQL's text format (with `DateStyle=ISO` and `TimeZone=UTC`,
    /// which Weir's connections set).
    pub(crate) fn parse(self, text: &str) -> Result<Value, String> {
        let bad = || format!("cannot read `{}` as {self:?}", cut(text));
        Ok(match self {
            Kind::Bool => Value::Bool(match text {
                "t" | "true" => true,
                "f" | "false" => false,
                _ => return Err(bad()),
            }),
            Kind::Int => Value::Int(text.parse().map_err(|_| bad())?),
            Kind::Float => Value::Float(match text {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                _ => text.parse().map_err(|_| bad())?,
            }),
            Kind::Numeric => Value::Numeric(
                Decimal::from_str_exact(text)
                    .map_err(|e| format!("numeric `{}` does not fit: {e}", cut(text)))?,
            ),
            Kind::Text => Value::Text(text.to_string()),
            Kind::Bytes => {
                let hex = text.strip_prefix("\\x").ok_or_else(bad)?;
                if hex.len() % 2 != 0 {
                    return Err(bad());
                }
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| bad())?;
                Value::Bytes(bytes)
            }
            Kind::Timestamp => Value::Timestamp(
                NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                    .map_err(|_| bad())?
                    .and_utc()
                    .timestamp_micros(),
            ),
            Kind::TimestampTz => Value::TimestampTz(
                DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z")
                    .map_err(|_| bad())?
                    .timestamp_micros(),
            ),
            Kind::Date => Value::Date(
                NaiveDate::parse_from_str(text, "%Y-%m-%d")
                    .map_err(|_| bad())?
                    .to_epoch_days(),
            ),
            Kind::Json => Value::Json(text.to_string()),
            Kind::Uuid => Value::Uuid(*uuid::Uuid::parse_str(text).map_err(|_| bad())?.as_bytes()),
        })
    }
}

fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Writing a value into a column: each value goes into the column types that hold it without
/// loss (an integer into any integer type it fits, or numeric; a numeric into numeric); any
/// other pairing is an error that names the value and the column's type.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let mismatch = || -> Box<dyn std::error::Error + Sync + Send> {
            format!("cannot write {self} into a column of type {}", ty.name()).into()
        };
        match (self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Bool(b), &Type::BOOL) => b.to_sql(ty, out),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => {
                i32::try_from(*i).map_err(|_| mismatch())?.to_sql(ty, out)
            }
            (Value::Int(i), &Type::INT2) => {
                i16::try_from(*i).map_err(|_| mismatch())?.to_sql(ty, out)
            }
            (Value::Int(i), &Type::NUMERIC) => Decimal::from(*i).to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Value::Numeric(d), &Type::NUMERIC) => d.to_sql(ty, out),
            (Value::Float(x), &Type::FLOAT8) => x.to_sql(ty, out),
            (Value::Float(x), &Type::FLOAT4) => (*x as f32).to_sql(ty, out),
            (Value::Text(s), &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME) => {
                s.as_str().to_sql(ty, out)
            }
            (Value::Bytes(b), &Type::BYTEA) => b.as_slice().to_sql(ty, out),
            (Value::Timestamp(us), &Type::TIMESTAMP) => DateTime::from_timestamp_micros(*us)
                .ok_or_else(mismatch)?
                .naive_utc()
                .to_sql(ty, out),
            (Value::TimestampTz(us), &Type::TIMESTAMPTZ) => DateTime::from_timestamp_micros(*us)
                .ok_or_else(mismatch)?
                .to_sql(ty, out),
            (Value::Date(d), &Type::DATE) => NaiveDate::from_epoch_days(*d)
                .ok_or_else(mismatch)?
                .to_sql(ty, out),
            (Value::Json(s), &Type::JSON | &Type::JSONB) => {
                let doc: serde_json::Value = serde_json::from_str(s).map_err(|_| mismatch())?;
                doc.to_sql(ty, out)
            }
            (Value::Uuid(u), &Type::UUID) => uuid::Uuid::from_bytes(*u).to_sql(ty, out),
            _ => Err(mismatch()),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_values_parse_into_their_types() {
        assert_eq!(Kind::Int.parse("-42").unwrap(), Value::Int(-42));
        assert_eq!(Kind::Bool.parse("t").unwrap(), Value::Bool(true));
        assert_eq!(
            Kind::Numeric.parse("12.50").unwrap(),
            Value::Numeric(Decimal::new(1250, 2))
        );
        assert_eq!(
            Kind::Bytes.parse("\\x00ff").unwrap(),
            Value::Bytes(vec![0, 255])
        );
        assert_eq!(
            Kind::TimestampTz.parse("1970-01-01 00:00:01.5+00").unwrap(),
            Value::TimestampTz(1_500_000)
        );
        assert_eq!(
            Kind::Timestamp.parse("1970-01-02 00:00:00").unwrap(),
            Value::Timestamp(86_400_000_000)
        );
        assert_eq!(Kind::Date.parse("1970-01-11").unwrap(), Value::Date(10));
        assert_eq!(
            Kind::Uuid
                .parse("00000000-0000-0000-0000-0000000000ff")
                .unwrap(),
            Value::Uuid({
                let mut u = [0; 16];
                u[15] = 255;
                u
            })
        );
    }

    #[test]
    fn values_round_trip_through_postcard_as_state_and_channels_carry_them() {
        // Decimal's default serde needs a self-describing format; Weir's is postcard.
        let row = vec![
            Value::Numeric(Decimal::new(-12345, 2)),
            Value::Text("x".into()),
            Value::Null,
            Value::Uuid([7; 16]),
        ];
        let bytes = postcard::to_stdvec(&row).unwrap();
        assert_eq!(postcard::from_bytes::<Row>(&bytes).unwrap(), row);
    }

    #[test]
    fn an_unreadable_value_or_type_is_an_error_naming_it() {
        assert!(Kind::Int.parse("x1").unwrap_err().contains("`x1`"));
        assert!(Kind::Numeric.parse("NaN").unwrap_err().contains("`NaN`"));
        let err = Kind::of(600, "public.shapes", "where")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column where of public.shapes has type point"),
            "{err}"
        );
    }
}
