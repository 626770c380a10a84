//! The sink against a real server (`WEIR_TEST_PG`), one fresh database per test.

use rust_decimal::Decimal;
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::TaskError;

use super::*;
use crate::test_server::{execute, fresh_database, query};
use crate::value::Value;

const TOTALS: &str = "CREATE TABLE order_totals (
    customer bigint PRIMARY KEY,
    total numeric NOT NULL,
    note text
)";

const EVENTS: &str = "CREATE TABLE events (id bigint, what text)";

fn total(customer: i64, total: i64) -> Row {
    vec![
        Value::Int(customer),
        Value::Numeric(Decimal::from(total)),
        Value::Null,
    ]
}

fn event(id: i64, what: &str) -> Row {
    vec![Value::Int(id), Value::Text(what.into())]
}

/// Gids are unique across the server, not per database: each test's database names its jobs.
fn job(url: &PgUrl) -> String {
    url.database.clone()
}

fn exactly_once(url: &PgUrl, table: &str) -> PostgresSink {
    PostgresSink::new(url.clone(), table)
        .guarantee(DeliveryGuarantee::ExactlyOnce)
        .transaction_prefix(&job(url))
}

fn opened(sink: &PostgresSink, index: u32, restored: Option<Vec<Vec<u8>>>) -> PostgresSink {
    let mut sink = sink.clone();
    sink.open(&operator_context("totals", index, 2), restored)
        .unwrap();
    sink
}

fn totals(url: &PgUrl) -> Vec<Vec<String>> {
    query(
        url,
        "SELECT customer, total FROM order_totals ORDER BY customer",
    )
}

fn events(url: &PgUrl) -> Vec<Vec<String>> {
    query(url, "SELECT id, what FROM events ORDER BY id, what")
}

fn rows(expected: &[(&str, &str)]) -> Vec<Vec<String>> {
    expected
        .iter()
        .map(|(a, b)| vec![a.to_string(), b.to_string()])
        .collect()
}

fn prepared(url: &PgUrl) -> Vec<String> {
    query(
        url,
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY gid",
    )
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

#[test]
fn exactly_once_rows_stay_invisible_until_their_checkpoint_completes_and_a_repeated_notice_is_a_no_op(
) {
    let url = fresh_database("eo_invisible");
    execute(&url, EVENTS);
    let mut sink = opened(&exactly_once(&url, "events"), 0, None);
    sink.write_batch(vec![event(1, "a"), event(2, "b")])
        .unwrap();
    let state = sink.snapshot(CheckpointId(1)).unwrap();
    assert_eq!(state.len(), 1);
    assert_eq!(prepared(&url), vec![format!("{}:totals:0:1", job(&url))]);
    assert!(events(&url).is_empty(), "prepared rows are not visible");

    sink.notify_complete(CheckpointId(1)).unwrap();
    assert_eq!(events(&url), rows(&[("1", "a"), ("2", "b")]));
    assert!(prepared(&url).is_empty());
    sink.notify_complete(CheckpointId(1)).unwrap();
    assert_eq!(events(&url), rows(&[("1", "a"), ("2", "b")]));

    assert!(
        sink.snapshot(CheckpointId(2)).unwrap().is_empty(),
        "empty checkpoint"
    );
    sink.notify_complete(CheckpointId(2)).unwrap();
}

#[test]
fn restore_commits_the_recorded_transaction_and_rolls_back_only_this_sinks_unrecorded_ones() {
    let url = fresh_database("eo_restore");
    execute(&url, EVENTS);
    let sink = exactly_once(&url, "events");
    let mut first = opened(&sink, 1, None);
    first.write_batch(vec![event(1, "recorded")]).unwrap();
    let state = first.snapshot(CheckpointId(5)).unwrap();
    drop(first); // the crash: checkpoint 5 completed, its notice never arrived
                 // Prepared after checkpoint 5, by this sink and by other jobs' sinks.
    let job = job(&url);
    let mine = format!("{job}:totals:0:6");
    let other_uid = format!("{job}:totals:eu:0:6");
    let other_job = format!("{job}-2:totals:0:6");
    for gid in [&mine, &other_uid, &other_job] {
        execute(
            &url,
            &format!("BEGIN; INSERT INTO events VALUES (9, '{gid}'); PREPARE TRANSACTION '{gid}'"),
        );
    }

    let _other = opened(&sink, 1, Some(state.clone()));
    assert_eq!(
        prepared(&url).len(),
        4,
        "only subtask 0 settles transactions"
    );
    let _restored = opened(&sink, 0, Some(state));
    assert_eq!(events(&url), rows(&[("1", "recorded")]));
    assert_eq!(
        prepared(&url),
        vec![other_job.clone(), other_uid.clone()],
        "another uid's and another prefix's transactions are left alone"
    );
    for gid in [other_uid, other_job] {
        execute(&url, &format!("ROLLBACK PREPARED '{gid}'"));
    }
}

#[test]
fn a_fresh_start_rolls_back_the_prepared_transactions_of_an_earlier_run() {
    let url = fresh_database("eo_fresh");
    execute(&url, EVENTS);
    execute(
        &url,
        &format!(
            "BEGIN; INSERT INTO events VALUES (1, 'old'); PREPARE TRANSACTION '{}:totals:1:3'",
            job(&url)
        ),
    );
    let _sink = opened(&exactly_once(&url, "events"), 0, None);
    assert!(prepared(&url).is_empty());
    assert!(events(&url).is_empty());
}

#[test]
fn an_aborted_checkpoint_keeps_its_transaction_prepared_until_a_later_one_completes() {
    let url = fresh_database("eo_abort");
    execute(&url, TOTALS);
    let mut sink = opened(&exactly_once(&url, "order_totals"), 0, None);
    sink.write_batch(vec![total(1, 10), total(2, 20)]).unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    sink.write_batch(vec![total(2, 25)]).unwrap();
    sink.notify_aborted(CheckpointId(1)).unwrap();
    let first = format!("{}:totals:0:1", job(&url));
    assert_eq!(prepared(&url), vec![first.clone()], "still prepared");
    assert!(totals(&url).is_empty());

    // Checkpoint 2 lists transaction 1 and, as it is still prepared, the newer row itself.
    let state = sink.snapshot(CheckpointId(2)).unwrap();
    assert_eq!(state.len(), 2);
    sink.notify_complete(CheckpointId(2)).unwrap();
    assert_eq!(totals(&url), rows(&[("1", "10"), ("2", "20")]));
    sink.snapshot(CheckpointId(3)).unwrap();
    sink.notify_complete(CheckpointId(3)).unwrap();
    assert_eq!(
        totals(&url),
        rows(&[("1", "10"), ("2", "25")]),
        "the newer row of a key wins"
    );
    assert!(prepared(&url).is_empty());
}

#[test]
fn a_barrier_before_the_last_notice_records_an_upserting_sinks_rows_and_a_restore_writes_them() {
    let url = fresh_database("eo_late_upsert");
    execute(&url, TOTALS);
    let sink = exactly_once(&url, "order_totals");
    let mut first = opened(&sink, 1, None);
    first.write_batch(vec![total(1, 10), total(2, 20)]).unwrap();
    first.snapshot(CheckpointId(1)).unwrap();
    first.write_batch(vec![total(2, 25), total(3, 30)]).unwrap();
    // The barrier of checkpoint 2 arrives before the notice of 1: nothing is written (row 2's
    // lock is held by transaction 1), the rows are recorded.
    let state = first.snapshot(CheckpointId(2)).unwrap();
    let gid = format!("{}:totals:1:1", job(&url));
    assert_eq!(prepared(&url), vec![gid], "nothing new prepared");
    assert_eq!(state.len(), 2);
    drop(first); // the crash: checkpoint 2 completed, no notice arrived

    // Restored at parallelism 2: subtask 1 (old 1 % 2) upserts the recorded rows, waiting for
    // subtask 0 to commit transaction 1, whose row 2 they overwrite.
    let waiting = {
        let sink = sink.clone();
        let state = state.clone();
        std::thread::spawn(move || opened(&sink, 1, Some(state)))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _zero = opened(&sink, 0, Some(state));
    let _one = waiting.join().unwrap();
    assert_eq!(totals(&url), rows(&[("1", "10"), ("2", "25"), ("3", "30")]));
    assert!(prepared(&url).is_empty());
}

#[test]
fn a_barrier_before_the_last_notice_prepares_an_appending_sinks_rows_all_the_same() {
    let url = fresh_database("eo_late_append");
    execute(&url, EVENTS);
    let mut sink = opened(&exactly_once(&url, "events"), 0, None);
    sink.write_batch(vec![event(1, "a")]).unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    sink.write_batch(vec![event(2, "b")]).unwrap();
    let state = sink.snapshot(CheckpointId(2)).unwrap();
    assert_eq!(state.len(), 2, "both transactions are listed");
    assert_eq!(prepared(&url).len(), 2);
    sink.notify_complete(CheckpointId(1)).unwrap(); // the late notice
    assert_eq!(events(&url), rows(&[("1", "a")]));
    sink.notify_complete(CheckpointId(2)).unwrap();
    assert_eq!(events(&url), rows(&[("1", "a"), ("2", "b")]));
    assert!(prepared(&url).is_empty());
}

#[test]
fn upsert_compacts_by_key_and_overwrites_while_append_appends() {
    let url = fresh_database("upsert_append");
    execute(&url, TOTALS);
    execute(&url, EVENTS);
    execute(&url, "INSERT INTO order_totals VALUES (1, 1, 'kept')");
    let mut upsert = opened(
        &PostgresSink::new(url.clone(), "public.order_totals")
            .columns(&["customer", "total"])
            .guarantee(DeliveryGuarantee::ExactlyOnce)
            .transaction_prefix(&job(&url)),
        0,
        None,
    );
    let pair = |c: i64, t: i64| vec![Value::Int(c), Value::Int(t)];
    upsert
        .write_batch(vec![pair(1, 10), pair(2, 20), pair(1, 11), pair(2, 21)])
        .unwrap();
    upsert.snapshot(CheckpointId(1)).unwrap();
    upsert.notify_complete(CheckpointId(1)).unwrap();
    upsert.write_batch(vec![pair(2, 22)]).unwrap();
    upsert.snapshot(CheckpointId(2)).unwrap();
    upsert.notify_complete(CheckpointId(2)).unwrap();
    assert_eq!(totals(&url), rows(&[("1", "11"), ("2", "22")]));
    assert_eq!(
        query(&url, "SELECT note FROM order_totals WHERE customer = 1"),
        vec![vec!["kept".to_string()]],
        "columns not written keep their values"
    );

    let mut append = opened(
        &PostgresSink::new(url.clone(), "events").batch_size(2),
        0,
        None,
    );
    append
        .write_batch(vec![event(1, "a"), event(1, "a"), event(2, "b")])
        .unwrap();
    assert_eq!(events(&url).len(), 2, "a full batch is written at once");
    append.finish().unwrap();
    assert_eq!(events(&url), rows(&[("1", "a"), ("1", "a"), ("2", "b")]));
}

#[test]
fn a_value_of_the_wrong_type_or_a_violated_constraint_is_bad_input_naming_table_and_column() {
    let url = fresh_database("bad_input");
    execute(&url, TOTALS);
    let mut sink = opened(&PostgresSink::new(url.clone(), "order_totals"), 0, None);
    let row = vec![Value::Int(1), Value::Text("abc".into()), Value::Null];
    match sink.write_batch(vec![row]).unwrap_err() {
        TaskError::BadInput(e) => assert!(
            e.contains(
                "table public.order_totals, column total: cannot write 'abc' into a column of type numeric"
            ),
            "{e}"
        ),
        e => panic!("{e:?}"),
    }
    let err = sink.write_batch(vec![vec![Value::Int(1)]]).unwrap_err();
    assert!(err.to_string().contains("a row of 1 values"), "{err}");

    sink.write_batch(vec![vec![Value::Int(1), Value::Null, Value::Null]])
        .unwrap();
    match sink.snapshot(CheckpointId(1)).unwrap_err() {
        TaskError::BadInput(e) => {
            assert!(
                e.contains("public.order_totals") && e.contains("total"),
                "{e}"
            )
        }
        e => panic!("{e:?}"),
    }

    execute(&url, "INSERT INTO order_totals VALUES (7, 1)");
    let mut eo = opened(&exactly_once(&url, "order_totals").append(), 0, None);
    eo.write_batch(vec![total(7, 2)]).unwrap();
    match eo.snapshot(CheckpointId(1)).unwrap_err() {
        TaskError::BadInput(e) => assert!(
            e.contains("public.order_totals") && e.contains("(customer)=(7)"),
            "{e}"
        ),
        e => panic!("{e:?}"),
    }
    assert!(prepared(&url).is_empty());
    let next = eo.notify_aborted(CheckpointId(1)).unwrap_err();
    assert!(
        matches!(next, TaskError::BadInput(_)),
        "a refusal on the barrier fails the sink's next call: {next:?}"
    );
}

#[test]
fn a_wrong_password_fails_to_connect_without_showing_it() {
    let url = fresh_database("password");
    let wrong = PgUrl::parse(&format!(
        "postgres://{}:not-the-pass-7f3a@{}:{}/{}",
        url.user, url.host, url.port, url.database
    ))
    .unwrap();
    let mut sink = PostgresSink::new(wrong, "events");
    let err = sink
        .open(&operator_context("totals", 0, 1), None)
        .unwrap_err();
    assert!(matches!(err, TaskError::User(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains("not-the-pass-7f3a"), "{err}");
}

#[test]
fn at_least_once_writes_everything_on_the_barrier() {
    let url = fresh_database("alo");
    execute(&url, EVENTS);
    let mut sink = opened(&PostgresSink::new(url.clone(), "events"), 0, None);
    sink.write_batch(vec![event(1, "a"), event(2, "b")])
        .unwrap();
    assert!(events(&url).is_empty(), "less than a batch is buffered");
    assert!(sink.snapshot(CheckpointId(1)).unwrap().is_empty());
    assert_eq!(events(&url), rows(&[("1", "a"), ("2", "b")]));
}

#[test]
fn a_checkpoint_of_many_rows_commits_them_all() {
    let url = fresh_database("eo_many");
    execute(&url, TOTALS);
    let mut sink = opened(
        &exactly_once(&url, "order_totals").batch_size(1000),
        0,
        None,
    );
    let rows = (0..10_000).map(|i| total(i, i * 2)).collect();
    write_through_checkpoint(&mut sink, rows, CheckpointId(1)).unwrap();
    assert_eq!(
        query(&url, "SELECT count(*), sum(total) FROM order_totals"),
        vec![vec!["10000".to_string(), "99990000".to_string()]]
    );
}

#[test]
fn configuration_errors_say_what_to_fix() {
    let url = PgUrl::parse("postgres://weir:secret@127.0.0.1/db").unwrap();
    let err = "twice"
        .parse::<DeliveryGuarantee>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("none, at-least-once or exactly-once"), "{err}");
    assert_eq!(
        "exactly-once".parse::<DeliveryGuarantee>().unwrap(),
        DeliveryGuarantee::ExactlyOnce
    );
    let no_prefix = PostgresSink::new(url.clone(), "t").guarantee(DeliveryGuarantee::ExactlyOnce);
    assert!(no_prefix
        .validate()
        .unwrap_err()
        .to_string()
        .contains("needs a transaction prefix"));
    let bad_prefix = no_prefix.transaction_prefix("job:1");
    assert!(bad_prefix
        .validate()
        .unwrap_err()
        .to_string()
        .contains("letters, digits"));
}

#[test]
fn upsert_without_every_key_column_or_append_into_a_missing_column_is_refused_on_open() {
    let url = fresh_database("config");
    execute(&url, TOTALS);
    execute(&url, EVENTS);
    let ctx = operator_context("totals", 0, 1);
    let mut no_key = PostgresSink::new(url.clone(), "order_totals").columns(&["total"]);
    let err = no_key.open(&ctx, None).unwrap_err();
    assert!(
        err.to_string().contains("column customer is not among"),
        "{err}"
    );
    let mut keyless = PostgresSink::new(url.clone(), "events").upsert();
    let err = keyless.open(&ctx, None).unwrap_err();
    assert!(err.to_string().contains("has none"), "{err}");
    let mut missing = PostgresSink::new(url.clone(), "events").columns(&["nope"]);
    let err = missing.open(&ctx, None).unwrap_err();
    assert!(matches!(err, TaskError::BadInput(_)), "{err:?}");
    assert!(err.to_string().contains("has no column nope"), "{err}");
}

#[test]
fn upsert_by_a_key_of_several_columns_in_another_order_than_the_tables() {
    let url = fresh_database("composite_key");
    execute(
        &url,
        "CREATE TABLE stock (item bigint, amount bigint, site text, PRIMARY KEY (site, item))",
    );
    let mut sink = opened(&PostgresSink::new(url.clone(), "stock"), 0, None);
    let row = |item: i64, amount: i64, site: &str| {
        vec![
            Value::Int(item),
            Value::Int(amount),
            Value::Text(site.into()),
        ]
    };
    sink.write_batch(vec![row(1, 5, "a"), row(1, 6, "b"), row(1, 7, "a")])
        .unwrap();
    sink.snapshot(CheckpointId(1)).unwrap();
    sink.write_batch(vec![row(1, 8, "b")]).unwrap();
    sink.finish().unwrap();
    assert_eq!(
        query(&url, "SELECT site, amount FROM stock ORDER BY site"),
        rows(&[("a", "7"), ("b", "8")])
    );
}
