//! The prepared transactions of an exactly-once sink: their names (global transaction ids), the
//! checkpoint state that records them, which of them a restore commits or rolls back, and the
//! statements that do it.
//!
//! A gid is `{prefix}:{uid}:{subtask}:{checkpoint}`: the job's transaction prefix, the sink's
//! operator uid, the subtask index and the checkpoint. It is deterministic, so a restore can tell
//! this sink's transactions from any other's by name alone.

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;
use weir_core::CheckpointId;

use crate::error::PgError;
use crate::value::Row;

/// PostgreSQL's limit: a gid must be shorter than 200 bytes.
const MAX_GID_BYTES: usize = 199;

/// The longest `{subtask}:{checkpoint}` tail: a u32 and a u64 in decimal.
const MAX_TAIL_BYTES: usize = 10 + 1 + 20;

/// How one sink names its transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TransactionNames {
    /// `{prefix}:{uid}:`
    base: String,
}

/// Checks a transaction prefix: letters, digits, `-`, `_` and `.`, so that it can never
/// contain the `:` that separates a gid's parts.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), PgError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if prefix.is_empty() || !prefix.chars().all(allowed) {
        return Err(PgError::Config(format!(
            "transaction prefix `{prefix}`: use one or more letters, digits, `-`, `_` or `.` \
             (it names the job's prepared transactions, so give each job its own)"
        )));
    }
    Ok(())
}

impl TransactionNames {
    pub(crate) fn new(prefix: &str, uid: &str) -> Result<TransactionNames, PgError> {
        check_prefix(prefix)?;
        let base = format!("{prefix}:{uid}:");
        if base.len() + MAX_TAIL_BYTES > MAX_GID_BYTES {
            return Err(PgError::Config(format!(
                "transaction prefix `{prefix}` with the sink's uid `{uid}` makes transaction ids \
                 longer than PostgreSQL's {MAX_GID_BYTES} bytes: shorten one of them"
            )));
        }
        Ok(TransactionNames { base })
    }

    /// The gid of `subtask`'s transaction for `checkpoint`.
    pub(crate) fn gid(&self, subtask: u32, checkpoint: CheckpointId) -> String {
        format!("{}{subtask}:{}", self.base, checkpoint.0)
    }

    /// `{prefix}:{uid}:`, the start of every gid of this sink.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Whether `gid` is one of this sink's (of any subtask and checkpoint). A uid that merely
    /// starts like this one (`totals` and `totals:eu`) does not count.
    pub(crate) fn owns(&self, gid: &str) -> bool {
        let Some(tail) = gid.strip_prefix(&self.base) else {
            return false;
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        matches!(tail.split_once(':'), Some((s, n)) if digits(s) && digits(n))
    }
}

/// One entry of the sink's (union) checkpoint state. The enum's variant is the format's
/// version: a new layout is a new variant, and old checkpoints still decode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum StateEntry {
    /// A transaction prepared on a barrier (this checkpoint's or an earlier one's), to commit
    /// once a checkpoint at or after it completes.
    Prepared { gid: String, checkpoint: u64 },
    /// Rows of old subtask `subtask` that the checkpoint covers but no transaction holds (a
    /// transaction was still prepared on its barrier): a restore writes them first.
    Buffered {
        subtask: u32,
        checkpoint: u64,
        rows: Vec<Row>,
    },
}

/// [`StateEntry`] with borrowed rows, encoded the same way (the variants in the same order).
#[derive(Serialize)]
enum StateEntryRef<'a> {
    #[allow(dead_code)]
    Prepared { gid: &'a str, checkpoint: u64 },
    Buffered {
        subtask: u32,
        checkpoint: u64,
        rows: &'a [Row],
    },
}

impl StateEntry {
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("state entries always serialize")
    }

    /// A [`StateEntry::Buffered`] of `rows`, without copying them.
    pub(crate) fn encode_buffered(subtask: u32, checkpoint: u64, rows: &[Row]) -> Vec<u8> {
        postcard::to_allocvec(&StateEntryRef::Buffered {
            subtask,
            checkpoint,
            rows,
        })
        .expect("state entries always serialize")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<StateEntry, PgError> {
        postcard::from_bytes(bytes).map_err(|e| {
            PgError::Config(format!(
                "the PostgreSQL sink's checkpoint state is malformed ({e}): the checkpoint was \
                 not written by this sink, or by a newer version of it"
            ))
        })
    }
}

/// What a restore does with the prepared transactions it finds.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Recovery {
    /// Recorded in the restored checkpoint, which completed: their rows belong in the table.
    pub commit: Vec<String>,
    /// This sink's, but not recorded: prepared after the restored checkpoint (or by an earlier
    /// run), so their rows will be written again.
    pub roll_back: Vec<String>,
}

/// Decides the fate of each `prepared` gid (those of the current database) given the gids the
/// restored checkpoint `recorded`. Other prefixes' and other sinks' transactions are left alone.
pub(crate) fn plan_recovery(
    names: Option<&TransactionNames>,
    recorded: &[String],
    prepared: &[String],
) -> Recovery {
    let mut plan = Recovery::default();
    for gid in prepared {
        if recorded.contains(gid) {
            plan.commit.push(gid.clone());
        } else if names.is_some_and(|n| n.owns(gid)) {
            plan.roll_back.push(gid.clone());
        }
    }
    plan
}

fn literal(gid: &str) -> String {
    format!("'{}'", gid.replace('\'', "''"))
}

/// SQLSTATE 42704 (undefined_object): no prepared transaction of that name.
fn is_gone(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| db.code().code() == "42704")
}

/// The prepared transactions of the current database that start with `base` or are `recorded`.
pub(crate) async fn list_prepared(
    client: &Client,
    base: Option<&str>,
    recorded: &[String],
) -> Result<Vec<String>, PgError> {
    let rows = client
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() \
             AND (starts_with(gid, $1) OR gid = ANY($2))",
            &[&base.unwrap_or(""), &recorded],
        )
        .await
        .map_err(|e| PgError::statement("listing prepared transactions", e))?;
    // An empty base would match every gid: without names, only recorded ones count.
    Ok(rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|gid| base.is_some() || recorded.contains(gid))
        .collect())
}

/// Ends the current transaction with `PREPARE TRANSACTION`.
pub(crate) async fn prepare(client: &Client, gid: &str) -> Result<(), PgError> {
    client
        .batch_execute(&format!("PREPARE TRANSACTION {}", literal(gid)))
        .await
        .map_err(|e| match e.as_db_error().map(|db| db.code().code()) {
            Some("55000") => PgError::Config(format!(
                "cannot prepare transaction {gid}: the server does not allow prepared \
                 transactions; set max_prepared_transactions above 0 (at least the sink's \
                 parallelism) for exactly-once"
            )),
            Some("42710") => PgError::Config(format!(
                "transaction id {gid} is already in use: another job writes with the same \
                 transaction prefix and sink uid; give each job its own prefix"
            )),
            _ => PgError::statement(format!("preparing transaction {gid}"), e),
        })
}

/// `COMMIT PREPARED`; a transaction that no longer exists was committed already. Returns
/// whether this call committed it.
pub(crate) async fn commit(client: &Client, gid: &str) -> Result<bool, PgError> {
    match client
        .batch_execute(&format!("COMMIT PREPARED {}", literal(gid)))
        .await
    {
        Ok(()) => Ok(true),
        Err(e) if is_gone(&e) => Ok(false),
        Err(e) => Err(PgError::statement(
            format!("committing transaction {gid}"),
            e,
        )),
    }
}

/// `ROLLBACK PREPARED`; a transaction that no longer exists is gone already. Returns whether
/// this call rolled it back.
pub(crate) async fn roll_back(client: &Client, gid: &str) -> Result<bool, PgError> {
    match client
        .batch_execute(&format!("ROLLBACK PREPARED {}", literal(gid)))
        .await
    {
        Ok(()) => Ok(true),
        Err(e) if is_gone(&e) => Ok(false),
        Err(e) => Err(PgError::statement(
            format!("rolling back transaction {gid}"),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_rows_encode_without_a_copy_as_the_owned_entry_does() {
        let rows = vec![vec![
            crate::value::Value::Int(1),
            crate::value::Value::Text("a".into()),
        ]];
        let owned = StateEntry::Buffered {
            subtask: 2,
            checkpoint: 9,
            rows: rows.clone(),
        };
        let bytes = StateEntry::encode_buffered(2, 9, &rows);
        assert_eq!(bytes, owned.encode());
        assert_eq!(StateEntry::decode(&bytes).unwrap(), owned);
    }

    #[test]
    fn a_gid_names_prefix_uid_subtask_and_checkpoint_and_only_this_sinks_gids_are_owned() {
        let names = TransactionNames::new("orders-v2", "totals").unwrap();
        assert_eq!(names.gid(3, CheckpointId(42)), "orders-v2:totals:3:42");
        assert!(names.owns("orders-v2:totals:0:7"));
        assert!(!names.owns("orders-v2:totals:eu:0:7"), "another uid");
        assert!(!names.owns("orders-v3:totals:0:7"), "another prefix");
        assert!(!names.owns("orders-v2:totals:0:"), "not a gid of ours");
    }

    #[test]
    fn a_bad_or_too_long_prefix_is_a_config_error_saying_what_is_allowed() {
        for prefix in ["", "a:b", "job 1", "jöb"] {
            let err = TransactionNames::new(prefix, "sink")
                .unwrap_err()
                .to_string();
            assert!(err.contains("letters, digits"), "{prefix}: {err}");
        }
        let long = "p".repeat(180);
        let err = TransactionNames::new(&long, "sink")
            .unwrap_err()
            .to_string();
        assert!(err.contains("199 bytes"), "{err}");
    }

    #[test]
    fn a_state_entry_round_trips_and_a_malformed_one_is_a_clear_error() {
        let entry = StateEntry::Prepared {
            gid: "job:sink:0:5".into(),
            checkpoint: 5,
        };
        assert_eq!(StateEntry::decode(&entry.encode()).unwrap(), entry);
        let err = StateEntry::decode(&[9, 9, 9]).unwrap_err().to_string();
        assert!(err.contains("state is malformed"), "{err}");
    }

    #[test]
    fn recovery_commits_what_was_recorded_and_rolls_back_only_this_sinks_other_gids() {
        let names = TransactionNames::new("job", "totals").unwrap();
        let recorded = vec!["job:totals:0:5".to_string(), "job:totals:1:5".to_string()];
        let prepared: Vec<String> = ["job:totals:0:5", "job:totals:0:6", "other:totals:0:6"]
            .map(String::from)
            .to_vec();
        let plan = plan_recovery(Some(&names), &recorded, &prepared);
        assert_eq!(plan.commit, vec!["job:totals:0:5"]);
        assert_eq!(plan.roll_back, vec!["job:totals:0:6"]);
        let plan = plan_recovery(None, &recorded, &prepared);
        assert!(plan.roll_back.is_empty(), "without names nothing is ours");
    }
}
