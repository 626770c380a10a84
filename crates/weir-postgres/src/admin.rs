//! One-off statements a job runs before it starts (creating its target table, checking the
//! source's columns), each on a short connection of its own.

use crate::error::PgError;
use crate::runtime::new_runtime;
use crate::schema::{quote, split_name, TableSchema};
use crate::url::PgUrl;

/// Runs `sql` (one or more statements) on `url`.
pub fn execute(url: &PgUrl, sql: &str) -> Result<(), PgError> {
    new_runtime()?.block_on(async {
        let client = url.connect().await?;
        client
            .batch_execute(sql)
            .await
            .map_err(|e| PgError::statement("running a statement", e))
    })
}

/// The columns of `table` (name or schema.name) as `(name, type)`, in table order; a table
/// that does not exist, or a column of a type Weir does not read, is an error naming it.
pub fn columns(url: &PgUrl, table: &str) -> Result<Vec<(String, String)>, PgError> {
    new_runtime()?.block_on(async {
        let client = url.connect().await?;
        let schema = TableSchema::load(&client, table).await?;
        Ok(schema
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.type_name.clone()))
            .collect())
    })
}

/// `table` (name or schema.name) quoted for SQL.
pub fn quote_table(table: &str) -> Result<String, PgError> {
    let (schema, name) = split_name(table)?;
    Ok(format!("{}.{}", quote(&schema), quote(&name)))
}

/// The rows of `sql` on `url`, each column as text (NULL as an empty string).
pub fn query(url: &PgUrl, sql: &str) -> Result<Vec<Vec<String>>, PgError> {
    new_runtime()?.block_on(async {
        let client = url.connect().await?;
        let messages = client
            .simple_query(sql)
            .await
            .map_err(|e| PgError::statement("running a query", e))?;
        Ok(messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("").to_string())
                        .collect(),
                ),
                _ => None,
            })
            .collect())
    })
}

/// Appends `rows` (one value per column, in table order) to `table` with one binary `COPY`
/// in one transaction: what PostgreSQL takes in fastest, the sink's ceiling.
pub fn copy_in(url: &PgUrl, table: &str, rows: &[crate::Row]) -> Result<(), PgError> {
    new_runtime()?.block_on(async {
        let client = url.connect().await?;
        let schema = TableSchema::load(&client, table).await?;
        let target = crate::sink::Target::new(&schema, None, Some(crate::sink::WriteMode::Append))?;
        target.append(&client, rows).await
    })
}
