//! PostgreSQL connectors for Weir.
//!
//! - [`PostgresCdcSource`] reads a consistent snapshot of a set of tables and then their
//!   changes from a logical replication slot (`pgoutput`), as a changelog of [`Change`]s. Its
//!   position is checkpointed; the slot is told a position only once a checkpoint holding it
//!   has completed, so the server keeps every change a restore may need.
//! - [`PostgresSink`] writes rows into a table, appending or upserting by primary key, with
//!   Flink's three delivery guarantees; exactly-once prepares one transaction per subtask and
//!   checkpoint (`PREPARE TRANSACTION`) and commits it when the checkpoint completes.
//!
//! Connections are given as URLs ([`PgUrl`]), which are never printed with their password.

pub mod admin;
mod cdc;
mod error;
mod runtime;
mod schema;
mod sink;
mod url;
mod value;

pub use cdc::PostgresCdcSource;
pub use error::PgError;
pub use rust_decimal::Decimal;
pub use sink::{DeliveryGuarantee, PostgresSink};
pub use url::PgUrl;
pub use value::{Change, Row, RowKind, Value};

#[cfg(test)]
mod test_server;
