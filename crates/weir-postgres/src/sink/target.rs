//! The table a sink writes into: the listed columns and their types, how a row is checked
//! before it is buffered, and the two ways rows reach the table (binary `COPY` to append, one
//! `INSERT … SELECT * FROM unnest(…) ON CONFLICT … DO UPDATE` per batch to upsert).

use bytes::BytesMut;
use futures::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

use crate::error::PgError;
use crate::schema::{quote, TableSchema};
use crate::value::{Row, Value};

/// How rows reach the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// Every row is a new row (binary `COPY`).
    Append,
    /// A row replaces the table's row with the same primary key, or is inserted.
    Upsert,
}

/// The listed columns of one table, resolved against the catalog.
#[derive(Debug)]
pub(crate) struct Target {
    /// `schema.name`, for messages.
    pub name: String,
    pub mode: WriteMode,
    columns: Vec<String>,
    types: Vec<Type>,
    /// Upsert: positions (in the listed columns) of the primary key's columns, in key order.
    key: Vec<usize>,
    copy_sql: String,
    upsert_sql: String,
}

impl Target {
    /// Resolves `columns` (all of the table's, in table order, when `None`) and the write mode
    /// (upsert when the table has a primary key, unless told otherwise).
    pub(crate) fn new(
        schema: &TableSchema,
        columns: Option<&[String]>,
        mode: Option<WriteMode>,
    ) -> Result<Target, PgError> {
        let indexes: Vec<usize> = match columns {
            Some(names) => names
                .iter()
                .map(|n| schema.column(n))
                .collect::<Result<_, _>>()?,
            None => (0..schema.columns.len()).collect(),
        };
        if indexes.is_empty() {
            return Err(PgError::Config(format!(
                "PostgreSQL sink into {}: no columns to write",
                schema.name
            )));
        }
        for (i, a) in indexes.iter().enumerate() {
            if indexes[..i].contains(a) {
                return Err(PgError::Config(format!(
                    "PostgreSQL sink into {}: column {} is listed twice",
                    schema.name, schema.columns[*a].name
                )));
            }
        }
        let mode = mode.unwrap_or(if schema.primary_key.is_empty() {
            WriteMode::Append
        } else {
            WriteMode::Upsert
        });
        let mut key = Vec::new();
        if mode == WriteMode::Upsert {
            if schema.primary_key.is_empty() {
                return Err(PgError::Config(format!(
                    "PostgreSQL sink into {}: upsert needs a primary key and the table has none \
                     (add one, or write with append)",
                    schema.name
                )));
            }
            for k in &schema.primary_key {
                let position = indexes.iter().position(|i| i == k).ok_or_else(|| {
                    PgError::Config(format!(
                        "PostgreSQL sink into {}: upsert needs every primary key column, and \
                         column {} is not among the listed columns",
                        schema.name, schema.columns[*k].name
                    ))
                })?;
                key.push(position);
            }
        }
        let names: Vec<String> = indexes
            .iter()
            .map(|i| schema.columns[*i].name.clone())
            .collect();
        let types = indexes
            .iter()
            .map(|i| {
                let c = &schema.columns[*i];
                // Every type `Kind::of` accepts is a built-in one.
                Type::from_oid(c.oid).ok_or_else(|| {
                    PgError::Config(format!(
                        "column {} of {} has a type with OID {} that Weir cannot write",
                        c.name, schema.name, c.oid
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let quoted: Vec<String> = names.iter().map(|n| quote(n)).collect();
        let list = quoted.join(", ");
        let copy_sql = format!(
            "COPY {} ({list}) FROM STDIN (FORMAT binary)",
            schema.sql_name
        );
        let arrays: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("${}::{}[]", i + 1, t.name()))
            .collect();
        let key_list: Vec<&str> = key.iter().map(|k| quoted[*k].as_str()).collect();
        let updates: Vec<String> = (0..quoted.len())
            .filter(|i| !key.contains(i))
            .map(|i| format!("{c} = EXCLUDED.{c}", c = quoted[i]))
            .collect();
        let on_conflict = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let upsert_sql = format!(
            "INSERT INTO {} ({list}) SELECT * FROM unnest({}) ON CONFLICT ({}) {on_conflict}",
            schema.sql_name,
            arrays.join(", "),
            key_list.join(", ")
        );
        Ok(Target {
            name: schema.name.clone(),
            mode,
            columns: names,
            types,
            key,
            copy_sql,
            upsert_sql,
        })
    }

    /// Checks that `row` has one value per listed column and that each value can go into its
    /// column, by encoding it as the server would receive it (into `scratch`).
    pub(crate) fn check(&self, row: &Row, scratch: &mut BytesMut) -> Result<(), PgError> {
        if row.len() != self.columns.len() {
            return Err(PgError::Data(format!(
                "table {}: a row of {} values does not fit the {} columns written ({})",
                self.name,
                row.len(),
                self.columns.len(),
                self.columns.join(", ")
            )));
        }
        for ((value, ty), column) in row.iter().zip(&self.types).zip(&self.columns) {
            scratch.clear();
            if let Err(e) = value.to_sql(ty, scratch) {
                return Err(PgError::Data(format!(
                    "table {}, column {column}: {e}",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// The primary key of `row` as bytes (upsert), to compact rows by key; `None` appending.
    pub(crate) fn key_of(&self, row: &Row) -> Option<Vec<u8>> {
        if self.mode != WriteMode::Upsert {
            return None;
        }
        let key: Vec<&Value> = self.key.iter().map(|k| &row[*k]).collect();
        Some(postcard::to_allocvec(&key).expect("values always serialize"))
    }

    /// The upsert statement, prepared on `client` (kept by the caller for the connection's life).
    pub(crate) async fn prepare_upsert(&self, client: &Client) -> Result<Statement, PgError> {
        client.prepare(&self.upsert_sql).await.map_err(|e| {
            PgError::statement(format!("preparing the upsert into table {}", self.name), e)
        })
    }

    fn what(&self, rows: &[Row]) -> String {
        format!("writing {} rows into table {}", rows.len(), self.name)
    }

    /// Appends `rows` (already checked) with one binary `COPY`: in the current transaction, or
    /// in its own when there is none.
    pub(crate) async fn append(&self, client: &Client, rows: &[Row]) -> Result<(), PgError> {
        let sink = client
            .copy_in(self.copy_sql.as_str())
            .await
            .map_err(|e| PgError::statement(self.what(rows), e))?;
        let writer = BinaryCopyInWriter::new(sink, &self.types);
        pin_mut!(writer);
        for row in rows {
            writer
                .as_mut()
                .write_raw(row.iter().map(|v| v as &dyn ToSql))
                .await
                .map_err(|e| PgError::statement(self.what(rows), e))?;
        }
        writer
            .finish()
            .await
            .map_err(|e| PgError::statement(self.what(rows), e))?;
        Ok(())
    }

    /// Upserts `rows` (already checked, at most one per key) with `statement` (from
    /// [`prepare_upsert`](Self::prepare_upsert)), one statement per `batch_size` rows.
    pub(crate) async fn upsert(
        &self,
        client: &Client,
        statement: &Statement,
        rows: &[Row],
        batch_size: usize,
    ) -> Result<(), PgError> {
        for chunk in rows.chunks(batch_size.max(1)) {
            let arrays: Vec<Vec<&Value>> = (0..self.columns.len())
                .map(|c| chunk.iter().map(|row| &row[c]).collect())
                .collect();
            let params: Vec<&(dyn ToSql + Sync)> =
                arrays.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
            client
                .execute(statement, &params)
                .await
                .map_err(|e| PgError::statement(self.what(rows), e))?;
        }
        Ok(())
    }
}
