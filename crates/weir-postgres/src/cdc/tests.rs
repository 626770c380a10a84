//! The source against a real server (`WEIR_TEST_PG`), one fresh database per test.

use super::*;
use crate::test_server::{execute, fresh_database, query};
use crate::value::{Row, RowKind, Value};
use std::collections::BTreeMap;
use weir_core::KeyGroupRange;

fn ctx(index: u32) -> OperatorContext {
    OperatorContext {
        uid: "cdc".into(),
        name: "cdc".into(),
        index,
        parallelism: 1,
        max_parallelism: 128,
        key_groups: KeyGroupRange::new(0, 0),
        state_backend: Default::default(),
        metrics: Default::default(),
    }
}

/// Applies a changelog to a table keyed by its first column, refusing any change that
/// contradicts what came before (an insert of a present key, a retraction of an absent
/// one): a lost or repeated change shows up here or in the final comparison.
#[derive(Default)]
struct Materialized(BTreeMap<i64, Row>);

impl Materialized {
    fn apply(&mut self, changes: &[Change]) {
        for c in changes {
            let id = c.row[0].as_i64().unwrap();
            match c.kind {
                RowKind::Insert => {
                    assert!(self.0.insert(id, c.row.clone()).is_none(), "{c:?} twice")
                }
                RowKind::UpdateBefore => {
                    assert_eq!(self.0.get(&id), Some(&c.row), "-U of a row not there")
                }
                RowKind::UpdateAfter => {
                    assert!(
                        self.0.insert(id, c.row.clone()).is_some(),
                        "{c:?} of nothing"
                    )
                }
                RowKind::Delete => assert!(self.0.remove(&id).is_some(), "{c:?} of nothing"),
            }
        }
    }

    fn rows(&self) -> Vec<Vec<String>> {
        self.0
            .values()
            .map(|r| {
                r.iter()
                    .map(|v| v.to_string().trim_matches('\'').to_string())
                    .collect()
            })
            .collect()
    }
}

fn poll_until_quiet(source: &mut PostgresCdcSource, out: &mut Vec<Change>) {
    let mut quiet = 0;
    while quiet < 20 {
        let mut batch = Vec::new();
        source.poll_batch(&mut batch, 64).unwrap();
        if batch.is_empty() {
            quiet += 1;
            std::thread::sleep(std::time::Duration::from_millis(10));
        } else {
            quiet = 0;
        }
        out.extend(batch);
    }
}

fn table_rows(url: &PgUrl) -> Vec<Vec<String>> {
    query(url, "SELECT id, customer, amount FROM orders ORDER BY id")
}

#[test]
fn snapshot_and_changes_interleaved_with_writes_and_a_restore_emit_every_change_once() {
    let url = fresh_database("cdc_interleaved");
    execute(
        &url,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL);
         ALTER TABLE orders REPLICA IDENTITY FULL;
         INSERT INTO orders SELECT g, g % 7, g * 1.5 FROM generate_series(1, 100) g;",
    );
    let source = PostgresCdcSource::new(url.clone(), &["orders"], "cdc_interleaved")
        .unwrap()
        .chunk_size(7);
    let mut first = source.clone();
    first.open(&ctx(0), None).unwrap();
    let mut emitted = Vec::new();
    let mut checkpoint = None;
    for step in 0..60i64 {
        // Writes land while the snapshot is read: new keys, updates and deletes on both
        // sides of the chunks read so far.
        execute(
            &url,
            &format!(
                "INSERT INTO orders VALUES ({}, 3, 1.00);
                 UPDATE orders SET amount = amount + 1 WHERE id IN ({}, {});
                 DELETE FROM orders WHERE id = {};",
                1000 + step,
                step + 1,
                100 - step,
                40 + step,
            ),
        );
        let mut batch = Vec::new();
        first.poll_batch(&mut batch, 5).unwrap();
        emitted.extend(batch);
        if step == 30 {
            first.snapshot_started(CheckpointId(1));
            checkpoint = Some((first.snapshot_position().unwrap(), emitted.len()));
        }
    }
    // A crash: what was emitted after the checkpoint is lost downstream too. The restored
    // source must bring it again, and nothing the checkpoint covers.
    drop(first);
    let (state, covered) = checkpoint.unwrap();
    let mut view = Materialized::default();
    view.apply(&emitted[..covered]);
    let mut restored = source.clone();
    restored.open(&ctx(0), Some(state)).unwrap();
    execute(
        &url,
        "UPDATE orders SET customer = 9 WHERE id % 5 = 0; DELETE FROM orders WHERE id = 2;",
    );
    let mut after = Vec::new();
    poll_until_quiet(&mut restored, &mut after);
    view.apply(&after);
    assert_eq!(view.rows(), table_rows(&url));
    assert!(after.iter().any(|c| c.kind == RowKind::UpdateBefore));
}

#[test]
fn every_supported_type_arrives_typed_from_the_snapshot_and_from_the_stream() {
    let url = fresh_database("cdc_types");
    execute(
        &url,
        "CREATE TABLE typed (id int PRIMARY KEY, b bool, s smallint, big bigint, r real,
           d double precision, n numeric(10,3), t text, v varchar(5), c char(2), by bytea,
           ts timestamp, tz timestamptz, day date, j json, jb jsonb, u uuid);
         INSERT INTO typed VALUES (1, true, -2, 9000000000, 1.5, -2.25, 3.125, 'x''y', 'v',
           'c', '\\x00ff', '2024-02-29 12:34:56.789', '2024-02-29 12:34:56+02',
           '2024-02-29', '{\"a\": 1}', '{\"b\": [2]}',
           '00000000-0000-0000-0000-0000000000ff');",
    );
    let mut source = PostgresCdcSource::new(url.clone(), &["typed"], "cdc_types").unwrap();
    source.open(&ctx(0), None).unwrap();
    execute(
        &url,
        "INSERT INTO typed SELECT 2, b, s, big, r, d, n, t, v, c, by, ts, tz, day, j, jb, u
           FROM typed WHERE id = 1;
         INSERT INTO typed (id, t) VALUES (3, NULL);",
    );
    let mut changes = Vec::new();
    poll_until_quiet(&mut source, &mut changes);
    assert_eq!(changes.len(), 3, "{changes:?}");
    let row = &changes[0].row;
    let expected = vec![
        Value::Int(1),
        Value::Bool(true),
        Value::Int(-2),
        Value::Int(9_000_000_000),
        Value::Float(1.5),
        Value::Float(-2.25),
        Value::Numeric(crate::Decimal::new(3125, 3)),
        Value::Text("x'y".into()),
        Value::Text("v".into()),
        Value::Text("c ".into()),
        Value::Bytes(vec![0, 255]),
        Value::Timestamp(1_709_210_096_789_000),
        Value::TimestampTz(1_709_202_896_000_000),
        Value::Date(19_782),
        Value::Json("{\"a\": 1}".into()),
        Value::Json("{\"b\": [2]}".into()),
        Value::Uuid({
            let mut u = [0; 16];
            u[15] = 255;
            u
        }),
    ];
    assert_eq!(row, &expected, "from the snapshot");
    let mut streamed = expected.clone();
    streamed[0] = Value::Int(2);
    assert_eq!(changes[1].row, streamed, "from the stream");
    assert_eq!(changes[2].kind, RowKind::Insert);
    assert_eq!(changes[2].row[7], Value::Null);
    assert_eq!(changes[2].table.as_str(), "public.typed");
}

#[test]
fn a_column_of_an_unsupported_type_or_a_table_without_a_key_is_an_error_naming_it() {
    let url = fresh_database("cdc_unsupported");
    execute(
        &url,
        "CREATE TABLE shapes (id int PRIMARY KEY, at point); CREATE TABLE loose (x int);",
    );
    let mut source = PostgresCdcSource::new(url.clone(), &["shapes"], "cdc_bad").unwrap();
    let err = source.open(&ctx(0), None).unwrap_err().to_string();
    assert!(
        err.contains("column at of public.shapes has type point"),
        "{err}"
    );
    let mut source = PostgresCdcSource::new(url.clone(), &["loose"], "cdc_bad").unwrap();
    let err = source.open(&ctx(0), None).unwrap_err().to_string();
    assert!(err.contains("public.loose has no primary key"), "{err}");
    assert!(PostgresCdcSource::new(url, &["loose"], "Bad-Slot").is_err());
}

fn confirmed(url: &PgUrl, slot: &str) -> String {
    query(
        url,
        &format!("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"),
    )[0][0]
        .clone()
}

#[test]
fn the_slot_is_told_a_position_only_when_the_checkpoint_holding_it_completes() {
    let url = fresh_database("cdc_confirm");
    execute(&url, "CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL)");
    let mut source = PostgresCdcSource::new(url.clone(), &["orders"], "cdc_confirm").unwrap();
    source.open(&ctx(0), None).unwrap();
    let created = confirmed(&url, "cdc_confirm");
    execute(
        &url,
        "INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 100) g",
    );
    let mut changes = Vec::new();
    poll_until_quiet(&mut source, &mut changes);
    assert_eq!(changes.len(), 100);
    source.snapshot_started(CheckpointId(1));
    source.snapshot_position().unwrap();
    // Status updates go out every second: two of them pass without the position.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(
        confirmed(&url, "cdc_confirm"),
        created,
        "confirmed before completion"
    );
    source.notify_complete(CheckpointId(1)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while confirmed(&url, "cdc_confirm") == created {
        assert!(std::time::Instant::now() < deadline, "never confirmed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Polls until `n` changes came (or fails after 10 s), at most `max` per poll.
fn poll_exactly(source: &mut PostgresCdcSource, n: usize, max: usize) -> Vec<Change> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} changes",
            out.len()
        );
        let mut batch = Vec::new();
        source
            .poll_batch(&mut batch, max.min(n - out.len()))
            .unwrap();
        out.extend(batch);
    }
    out
}

fn ids(changes: &[Change]) -> Vec<i64> {
    changes.iter().map(|c| c.row[0].as_i64().unwrap()).collect()
}

#[test]
fn a_checkpoint_inside_a_transaction_resumes_after_the_changes_it_covers_even_when_taken_again_at_once(
) {
    let url = fresh_database("cdc_mid_transaction");
    execute(&url, "CREATE TABLE t (id bigint PRIMARY KEY)");
    let source = PostgresCdcSource::new(url.clone(), &["t"], "cdc_mid").unwrap();
    let mut first = source.clone();
    first.open(&ctx(0), None).unwrap();
    let mut nothing = Vec::new();
    poll_until_quiet(&mut first, &mut nothing); // the (empty) snapshot is done
    assert!(nothing.is_empty());
    // One transaction of ten changes, from the stream.
    execute(&url, "INSERT INTO t SELECT generate_series(1, 10)");
    assert_eq!(ids(&poll_exactly(&mut first, 3, 3)), vec![1, 2, 3]);
    let a = first.snapshot_position().unwrap();
    drop(first);

    // Restored, and checkpointed again before reading anything: the same position.
    let mut second = source.clone();
    second.open(&ctx(0), Some(a)).unwrap();
    let b = second.snapshot_position().unwrap();
    drop(second);

    let mut third = source.clone();
    third.open(&ctx(0), Some(b)).unwrap();
    assert_eq!(ids(&poll_exactly(&mut third, 2, 2)), vec![4, 5]);
    let c = third.snapshot_position().unwrap();
    drop(third);

    let mut fourth = source.clone();
    fourth.open(&ctx(0), Some(c)).unwrap();
    let mut rest = Vec::new();
    poll_until_quiet(&mut fourth, &mut rest);
    assert_eq!(ids(&rest), vec![6, 7, 8, 9, 10]);
}

#[test]
fn a_restore_with_the_tables_listed_in_another_order_reads_each_table_once() {
    let url = fresh_database("cdc_reordered");
    execute(
        &url,
        "CREATE TABLE a (id bigint PRIMARY KEY); CREATE TABLE b (id bigint PRIMARY KEY);
         INSERT INTO a SELECT generate_series(1, 30); INSERT INTO b SELECT generate_series(101, 140);",
    );
    let mut first = PostgresCdcSource::new(url.clone(), &["a", "b"], "cdc_reordered")
        .unwrap()
        .chunk_size(8);
    first.open(&ctx(0), None).unwrap();
    let covered = poll_exactly(&mut first, 12, 4);
    let state = first.snapshot_position().unwrap();
    drop(first);
    let mut restored = PostgresCdcSource::new(url.clone(), &["b", "a"], "cdc_reordered")
        .unwrap()
        .chunk_size(8);
    restored.open(&ctx(0), Some(state)).unwrap();
    let mut rest = Vec::new();
    poll_until_quiet(&mut restored, &mut rest);
    let mut seen: Vec<(String, i64)> = covered
        .iter()
        .chain(&rest)
        .map(|c| (c.table.to_string(), c.row[0].as_i64().unwrap()))
        .collect();
    seen.sort();
    let mut expected: Vec<(String, i64)> = (1..=30)
        .map(|i| ("public.a".to_string(), i))
        .chain((101..=140).map(|i| ("public.b".to_string(), i)))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
}
