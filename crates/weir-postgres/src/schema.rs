//! Tables as the catalog describes them: columns, their types and the primary key.

use crate::error::PgError;
use crate::value::Kind;

/// A table's columns, in order, and its primary key.
#[derive(Clone, Debug)]
pub(crate) struct TableSchema {
    /// `schema.name`, quoted only where needed for display.
    pub name: String,
    /// The table in SQL, each part quoted: `"public"."orders"`.
    pub sql_name: String,
    pub columns: Vec<Column>,
    /// Indexes into `columns` of the primary key's columns, in key order (empty: no key).
    pub primary_key: Vec<usize>,
}

#[derive(Clone, Debug)]
pub(crate) struct Column {
    pub name: String,
    pub oid: u32,
    /// The type's name, as `format_type` prints it (`numeric(12,2)`, `bigint`).
    pub type_name: String,
    pub kind: Kind,
}

/// Splits `name` or `schema.name` (default schema `public`).
pub(crate) fn split_name(table: &str) -> Result<(String, String), PgError> {
    let (schema, name) = match table.split_once('.') {
        Some((s, n)) => (s, n),
        None => ("public", table),
    };
    if schema.is_empty() || name.is_empty() || name.contains('.') {
        return Err(PgError::Config(format!(
            "table `{table}`: expected name or schema.name"
        )));
    }
    Ok((schema.to_string(), name.to_string()))
}

/// Quotes an identifier for SQL.
pub(crate) fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

impl TableSchema {
    /// Reads `table`'s columns and primary key from the catalog. A missing table, or a column
    /// of a type Weir does not read, is an error naming it.
    pub(crate) async fn load(
        client: &tokio_postgres::Client,
        table: &str,
    ) -> Result<TableSchema, PgError> {
        let (schema, name) = split_name(table)?;
        let display = format!("{schema}.{name}");
        // The key position is counted by ordinality: an int2vector's subscripts start at 0.
        let rows = client
            .query(
                "SELECT a.attname::text, a.atttypid::oid, format_type(a.atttypid, a.atttypmod), \
                        COALESCE((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(att, n) \
                                  WHERE k.att = a.attnum), 0)::int4 \
                 FROM pg_attribute a \
                 JOIN pg_class c ON c.oid = a.attrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') \
                   AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
                &[&schema, &name],
            )
            .await
            .map_err(|e| PgError::statement(format!("reading the columns of {display}"), e))?;
        if rows.is_empty() {
            return Err(PgError::Config(format!(
                "table {display} does not exist (or has no columns)"
            )));
        }
        let mut columns = Vec::with_capacity(rows.len());
        let mut key: Vec<(i32, usize)> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let column: String = row.get(0);
            let oid: u32 = row.get(1);
            let type_name: String = row.get(2);
            let key_position: i32 = row.get(3);
            let kind = Kind::of(oid, &display, &column)?;
            if key_position > 0 {
                key.push((key_position, i));
            }
            columns.push(Column {
                name: column,
                oid,
                type_name,
                kind,
            });
        }
        key.sort();
        Ok(TableSchema {
            sql_name: format!("{}.{}", quote(&schema), quote(&name)),
            name: display,
            columns,
            primary_key: key.into_iter().map(|(_, i)| i).collect(),
        })
    }

    /// The index of the column called `name`.
    pub(crate) fn column(&self, name: &str) -> Result<usize, PgError> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| PgError::Config(format!("table {} has no column {name}", self.name)))
    }
}
