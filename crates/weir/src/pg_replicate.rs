//! `weir run pg-replicate`: reads the changes of an orders table from PostgreSQL, keeps a
//! running total per customer, and upserts the totals into a table of another (or the same)
//! database, exactly once.
//!
//! ```text
//! PostgresCdcSource ─► by order id: last row per order ─► by customer: total, orders ─► PostgresSink
//!   (snapshot, then     turns upserts and deletes into      ValueState per customer       (upsert by customer,
//!    the slot's changes)  signed deltas (any replica identity)                              one transaction per checkpoint)
//! ```
//!
//! The first keyed step keeps each order's last row, so the job needs no before images: a
//! table with the default replica identity works as well as one with `REPLICA IDENTITY FULL`.
//! A customer whose orders are all deleted keeps a row with total 0 and 0 orders.

use clap::Args;
use weir_api::prelude::*;
use weir_postgres::{
    Change, Decimal, DeliveryGuarantee, PgUrl, PostgresCdcSource, PostgresSink, RowKind,
    Value as PgValue,
};

use crate::args::JobArgs;
use crate::demo::execution_config;
use crate::runnable::{ClusterJob, Runnable};
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct PgReplicateArgs {
    /// The database to read: postgres://user:password@host:port/database (it needs
    /// wal_level=logical; the password is never printed).
    #[arg(long, value_name = "URL")]
    pub source_url: String,
    /// The orders table (name or schema.name); it needs a primary key.
    #[arg(long, value_name = "TABLE", default_value = "orders")]
    pub table: String,
    /// The order id column (the table's primary key).
    #[arg(long, value_name = "COLUMN", default_value = "id")]
    pub id_column: String,
    /// The customer column (an integer).
    #[arg(long, value_name = "COLUMN", default_value = "customer")]
    pub customer_column: String,
    /// The amount column (an integer or numeric).
    #[arg(long, value_name = "COLUMN", default_value = "amount")]
    pub amount_column: String,
    /// The replication slot to read through (created on a fresh start, kept across
    /// restarts; the publication is weir_<slot>).
    #[arg(long, value_name = "NAME", default_value = "weir_pg_replicate")]
    pub slot: String,
    /// Rows per snapshot chunk.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub chunk_size: usize,
    /// The database to write: postgres://user:password@host:port/database.
    #[arg(long, value_name = "URL")]
    pub sink_url: String,
    /// The totals table; created if missing as (customer bigint primary key, total numeric,
    /// orders bigint).
    #[arg(long, value_name = "TABLE", default_value = "order_totals")]
    pub target: String,
    /// none, at-least-once or exactly-once.
    #[arg(long, value_name = "GUARANTEE", default_value = "exactly-once")]
    pub delivery_guarantee: String,
    /// Names this job's prepared transactions (`<prefix>:<sink uid>:<subtask>:<checkpoint>`);
    /// two jobs writing one database need different prefixes.
    #[arg(long, value_name = "PREFIX", default_value = "weir-pg-replicate")]
    pub transaction_prefix: String,
    #[command(flatten)]
    pub job: JobArgs,
}

/// What an order contributes to its customer's total.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    customer: i64,
    amount: Decimal,
}

/// A change to a customer's total.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Delta {
    customer: i64,
    amount: Decimal,
    orders: i64,
}

/// Column positions in the source table's rows.
#[derive(Clone, Copy, Debug)]
struct Columns {
    id: usize,
    customer: usize,
    amount: usize,
}

/// Keeps each order's last row and turns every change into signed deltas per customer.
#[derive(Clone)]
struct LastOrder {
    columns: Columns,
}

impl KeyedProcessFunction<i64, Change, Delta> for LastOrder {
    type State = ValueState<i64, Order>;

    fn state(&self) -> Self::State {
        ValueState::new("last-order")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, i64>,
        change: Change,
        state: &mut Self::State,
        out: &mut Output<Delta>,
    ) -> Result<(), TaskError> {
        if change.kind == RowKind::UpdateBefore {
            return Ok(()); // the kept row is the before image
        }
        if let Some(old) = state.get(key).copied() {
            out.emit(Delta {
                customer: old.customer,
                amount: -old.amount,
                orders: -1,
            });
        }
        if change.kind.is_addition() {
            let order = order(&change, self.columns)?;
            out.emit(Delta {
                customer: order.customer,
                amount: order.amount,
                orders: 1,
            });
            state.set(key, order);
        } else {
            state.clear(key);
        }
        Ok(())
    }
}

fn order(change: &Change, columns: Columns) -> Result<Order, TaskError> {
    let bad = |column: usize, what: &str| {
        TaskError::BadInput(format!(
            "{}: column {column} is {}, expected {what}",
            change.table, change.row[column]
        ))
    };
    let customer = change.row[columns.customer]
        .as_i64()
        .ok_or_else(|| bad(columns.customer, "an integer customer"))?;
    let amount = change.row[columns.amount]
        .as_decimal()
        .ok_or_else(|| bad(columns.amount, "an integer or numeric amount"))?;
    Ok(Order { customer, amount })
}

/// The running total and order count per customer, emitted as the target table's row.
#[derive(Clone)]
struct Totals;

impl KeyedProcessFunction<i64, Delta, Vec<PgValue>> for Totals {
    type State = ValueState<i64, (Decimal, i64)>;

    fn state(&self) -> Self::State {
        ValueState::new("totals")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, i64>,
        delta: Delta,
        state: &mut Self::State,
        out: &mut Output<Vec<PgValue>>,
    ) -> Result<(), TaskError> {
        let (total, orders) = state.get(key).copied().unwrap_or_default();
        let (total, orders) = (total + delta.amount, orders + delta.orders);
        state.set(key, (total, orders));
        out.emit(vec![
            PgValue::Int(delta.customer),
            PgValue::Numeric(total),
            PgValue::Int(orders),
        ]);
        Ok(())
    }
}

pub fn run(args: PgReplicateArgs) -> Result<(), CliError> {
    if args.job.checkpoint_dir.is_none() {
        return Err(CliError::usage("pg-replicate needs --checkpoint-dir DIR"));
    }
    let source_url = PgUrl::parse(&args.source_url)
        .map_err(|e| CliError::usage(format!("--source-url: {e}")))?;
    let sink_url =
        PgUrl::parse(&args.sink_url).map_err(|e| CliError::usage(format!("--sink-url: {e}")))?;
    let guarantee: DeliveryGuarantee = args
        .delivery_guarantee
        .parse()
        .map_err(|e| CliError::usage(format!("--delivery-guarantee: {e}")))?;
    let config = args
        .job
        .local_config(&[("execution.checkpointing.interval", "1s")])?;
    let mut exec = execution_config(&config, args.job.start_mode())?;
    args.job.apply_restore(&mut exec);

    // The columns are looked up once, before the job starts: a missing table or column, or
    // one of the wrong type, is a usage error, not a failing job.
    let columns = source_columns(&source_url, &args)?;
    weir_postgres::admin::execute(
        &sink_url,
        &format!(
            "CREATE TABLE IF NOT EXISTS {} (customer bigint PRIMARY KEY, total numeric NOT NULL, orders bigint NOT NULL)",
            weir_postgres::admin::quote_table(&args.target).map_err(|e| CliError::usage(e.to_string()))?
        ),
    )
    .map_err(|e| CliError::usage(format!("creating the target table: {e}")))?;

    let source = PostgresCdcSource::new(source_url, &[&args.table], &args.slot)
        .map_err(|e| CliError::usage(e.to_string()))?
        .chunk_size(args.chunk_size);
    let sink = PostgresSink::new(sink_url, &args.target)
        .upsert()
        .guarantee(guarantee)
        .transaction_prefix(&args.transaction_prefix);
    sink.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;

    let env = StreamEnv::with_config("pg-replicate", &config)?;
    let id = columns.id;
    let totals = env
        .source("orders-cdc", source)
        .uid("orders-cdc")
        .parallelism(1)
        .key_by(move |c: &Change| c.row[id].as_i64().unwrap_or(i64::MIN))
        .process("last-order", LastOrder { columns })
        .uid("last-order")
        .key_by(|d: &Delta| d.customer)
        .process("totals", Totals)
        .uid("totals");
    totals
        .forward()
        .sink("order-totals", sink)
        .uid("order-totals");
    let graph = env.build()?;

    crate::rest_args::run_local("pg-replicate", "changes", &graph, &exec, &args.job.rest)?;
    Ok(())
}

/// Where the id, customer and amount columns sit in the source table's rows, checking that
/// the first two are integers and the amount an integer or numeric.
fn source_columns(url: &PgUrl, args: &PgReplicateArgs) -> Result<Columns, CliError> {
    let table = weir_postgres::admin::columns(url, &args.table)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let find = |name: &str, allowed: &[&str], what: &str| -> Result<usize, CliError> {
        let (i, (_, ty)) = table
            .iter()
            .enumerate()
            .find(|(_, (n, _))| n == name)
            .ok_or_else(|| CliError::usage(format!("table {} has no column {name}", args.table)))?;
        if allowed.iter().any(|a| ty.starts_with(a)) {
            Ok(i)
        } else {
            Err(CliError::usage(format!(
                "column {name} of {} is {ty}; the {what} must be {}",
                args.table,
                allowed.join(", ")
            )))
        }
    };
    let integers = ["smallint", "integer", "bigint"];
    Ok(Columns {
        id: find(&args.id_column, &integers, "order id")?,
        customer: find(&args.customer_column, &integers, "customer")?,
        amount: find(
            &args.amount_column,
            &["smallint", "integer", "bigint", "numeric"],
            "amount",
        )?,
    })
}

impl Runnable for PgReplicateArgs {
    fn run(self: Box<Self>) -> Result<(), CliError> {
        run(*self)
    }

    fn on_cluster(self: Box<Self>) -> Result<Box<dyn ClusterJob>, CliError> {
        Err(CliError::usage(
            "`run pg-replicate` runs in one process only",
        ))
    }
}
