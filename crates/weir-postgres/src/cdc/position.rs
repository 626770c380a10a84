//! The source's position, as it is checkpointed, and the two rules that decide whether a change
//! read from the slot is emitted: snapshot coverage and snapshot visibility.
//!
//! **Coverage.** A table's initial snapshot is read in chunks, in primary-key order. Until the
//! last chunk, only keys up to the last one emitted are *covered*; a change to a key beyond it
//! is dropped, because the chunk that later reads the key will show the row as it is then.
//!
//! **Visibility.** A chunk is read in a repeatable-read transaction whose snapshot is recorded
//! (`pg_current_snapshot()`: `xmin`, `xmax` and the transactions in progress). For the keys of
//! that chunk, a change from the slot is already in the rows read if its transaction is
//! visible in that snapshot, and must be emitted if it is not. Transactions visible in the
//! snapshot committed before it was taken, so before the WAL insert position read right after
//! (`until`): once the slot's stream has passed `until`, no later change can be visible and the
//! window is dropped. Row locks order the writers of one row, so for every key the emitted
//! sequence is the row as of the chunk followed by exactly the changes after it.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::value::Value;

/// What a checkpoint records: one list-state element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Position {
    /// The slot this position is in; restoring into a source reading another slot is refused.
    pub slot: String,
    /// The end of the last transaction whose changes were all handled: streaming resumes here.
    pub lsn: u64,
    /// Changes of the transaction after `lsn` handled already (a checkpoint may fall inside a
    /// transaction): skipped when it is read again.
    pub skip: u64,
    pub tables: Vec<TableProgress>,
    pub windows: Vec<Window>,
}

/// How far a table's initial snapshot has got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct TableProgress {
    /// `schema.name`.
    pub table: String,
    /// Every row has been emitted: all keys are covered.
    pub done: bool,
    /// The last key emitted (keys up to it are covered); `None` before the first chunk.
    pub after: Option<Vec<Value>>,
}

/// The keys `(lo, hi]` of a table read under one snapshot, while the stream may still bring
/// changes that snapshot saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Window {
    pub table: String,
    pub lo: Option<Vec<Value>>,
    pub hi: Vec<Value>,
    pub snapshot: TxSnapshot,
    /// The WAL insert position read just after the snapshot was taken.
    pub until: u64,
}

/// A transaction snapshot as `pg_current_snapshot()` prints it: `xmin:xmax:xip,…`, with 64-bit
/// transaction ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TxSnapshot {
    pub xmin: u64,
    pub xmax: u64,
    pub in_progress: Vec<u64>,
}

impl TxSnapshot {
    pub(crate) fn parse(text: &str) -> Result<TxSnapshot, String> {
        let bad = || format!("cannot read transaction snapshot `{text}`");
        let mut parts = text.split(':');
        let xmin = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let xmax = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let xip = parts.next().ok_or_else(bad)?;
        let in_progress = if xip.is_empty() {
            Vec::new()
        } else {
            xip.split(',')
                .map(|x| x.parse().map_err(|_| bad()))
                .collect::<Result<_, _>>()?
        };
        Ok(TxSnapshot {
            xmin,
            xmax,
            in_progress,
        })
    }

    /// The 32-bit id the stream carries, widened to the epoch nearest `xmax`.
    fn widen(&self, xid: u32) -> u64 {
        let candidate = (self.xmax & !0xffff_ffff) | xid as u64;
        if candidate > self.xmax.saturating_add(1 << 31) {
            candidate.saturating_sub(1 << 32)
        } else {
            candidate
        }
    }

    /// Whether the committed transaction `xid` is visible in this snapshot.
    pub(crate) fn sees(&self, xid: u32) -> bool {
        let x = self.widen(xid);
        x < self.xmin || (x < self.xmax && !self.in_progress.contains(&x))
    }

    /// Whether the committed transaction `xid` was still running for this snapshot.
    pub(crate) fn misses(&self, xid: u32) -> bool {
        !self.sees(xid)
    }
}

/// Orders key values as PostgreSQL orders them in the chunk queries (text by bytes, as under
/// `COLLATE "C"`; NULL never occurs in a primary key).
pub(crate) fn compare_keys(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = compare_values(x, y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

fn compare_values(a: &Value, b: &Value) -> Ordering {
    use Value::*;
    match (a, b) {
        (Bool(x), Bool(y)) => x.cmp(y),
        (Int(x), Int(y)) => x.cmp(y),
        (Float(x), Float(y)) => x.total_cmp(y),
        (Numeric(x), Numeric(y)) => x.cmp(y),
        (Text(x), Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bytes(x), Bytes(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) | (TimestampTz(x), TimestampTz(y)) => x.cmp(y),
        (Date(x), Date(y)) => x.cmp(y),
        (Uuid(x), Uuid(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

impl Position {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        out.extend(postcard::to_stdvec(self).expect("a position always serialises"));
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Position, String> {
        match bytes.split_first() {
            Some((&FORMAT, rest)) => postcard::from_bytes(rest).map_err(|e| {
                format!("PostgreSQL CDC position is malformed ({e}): the checkpoint was not written by this source")
            }),
            _ => Err("PostgreSQL CDC position has an unknown format: the checkpoint was not written by this source".into()),
        }
    }

    /// Whether a change of `table` to `key`, in transaction `xid`, is emitted.
    pub(crate) fn emits(&self, table: &str, key: &[Value], xid: u32) -> bool {
        let Some(progress) = self.tables.iter().find(|t| t.table == table) else {
            return false;
        };
        let covered = progress.done
            || progress
                .after
                .as_deref()
                .is_some_and(|after| compare_keys(key, after) != Ordering::Greater);
        if !covered {
            return false;
        }
        match self
            .windows
            .iter()
            .find(|w| w.table == table && w.holds(key))
        {
            Some(window) => window.snapshot.misses(xid),
            None => true,
        }
    }

    /// The stream reached `lsn`: windows it has passed can see no later change.
    pub(crate) fn advance(&mut self, lsn: u64) {
        self.lsn = lsn;
        self.skip = 0;
        self.windows.retain(|w| w.until > lsn);
    }
}

impl Window {
    fn holds(&self, key: &[Value]) -> bool {
        self.lo
            .as_deref()
            .is_none_or(|lo| compare_keys(key, lo) == Ordering::Greater)
            && compare_keys(key, &self.hi) != Ordering::Greater
    }
}

const FORMAT: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> TxSnapshot {
        TxSnapshot::parse("100:110:103,105").unwrap()
    }

    #[test]
    fn visibility_follows_xmin_xmax_and_the_transactions_in_progress() {
        let s = snapshot();
        assert!(s.sees(99) && s.sees(104) && s.sees(109));
        assert!(s.misses(103) && s.misses(105) && s.misses(110) && s.misses(200));
        // Ids wrap at 2^32: the stream's 32-bit id is widened to the snapshot's epoch.
        let wrapped =
            TxSnapshot::parse(&format!("{}:{}:", (1u64 << 32) + 5, (1u64 << 32) + 10)).unwrap();
        assert!(wrapped.sees(7) && wrapped.misses(12) && wrapped.sees(u32::MAX - 3));
        assert!(TxSnapshot::parse("1:x:").is_err());
    }

    #[test]
    fn a_change_is_emitted_if_its_key_is_covered_and_the_chunk_did_not_see_it() {
        let position = Position {
            slot: "s".into(),
            lsn: 0,
            skip: 0,
            tables: vec![TableProgress {
                table: "public.t".into(),
                done: false,
                after: Some(vec![Value::Int(20)]),
            }],
            windows: vec![Window {
                table: "public.t".into(),
                lo: Some(vec![Value::Int(10)]),
                hi: vec![Value::Int(20)],
                snapshot: snapshot(),
                until: 1000,
            }],
        };
        let key = |k| [Value::Int(k)];
        assert!(!position.emits("public.t", &key(21), 200), "not read yet");
        assert!(
            position.emits("public.t", &key(5), 104),
            "covered by an expired chunk"
        );
        assert!(
            !position.emits("public.t", &key(15), 104),
            "the chunk saw it"
        );
        assert!(
            position.emits("public.t", &key(15), 105),
            "the chunk missed it"
        );
        assert!(
            !position.emits("public.other", &key(1), 1),
            "not a table of the source"
        );
        let mut later = position.clone();
        later.advance(1000);
        assert!(later.windows.is_empty());
        assert!(later.emits("public.t", &key(15), 104));
    }

    #[test]
    fn text_keys_order_by_bytes_and_positions_round_trip() {
        let a = [Value::Text("B".into())];
        let b = [Value::Text("a".into())];
        assert_eq!(compare_keys(&a, &b), Ordering::Less);
        let p = Position {
            slot: "s".into(),
            lsn: 42,
            skip: 3,
            tables: Vec::new(),
            windows: Vec::new(),
        };
        assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        assert!(Position::decode(&[9, 1, 2])
            .unwrap_err()
            .contains("unknown format"));
        assert!(Position::decode(&[1, 0xff])
            .unwrap_err()
            .contains("malformed"));
    }
}
