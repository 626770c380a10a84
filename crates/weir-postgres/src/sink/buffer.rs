//! Rows waiting to be written, compacted by primary key when upserting: the last row of a key
//! wins, so that one statement never touches the same table row twice (which PostgreSQL refuses:
//! "ON CONFLICT DO UPDATE command cannot affect row a second time").

use std::collections::HashMap;

use crate::value::Row;

/// Buffered rows in arrival order (a key keeps the place of its first row).
#[derive(Debug, Default)]
pub(crate) struct RowBuffer {
    rows: Vec<Row>,
    /// Upsert: the encoded key of each buffered row → its index in `rows`.
    by_key: HashMap<Vec<u8>, usize>,
}

impl RowBuffer {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds `row`; with a key, it replaces the buffered row of the same key.
    // Invariant: no two buffered rows have the same key.
    pub(crate) fn push(&mut self, key: Option<Vec<u8>>, row: Row) {
        match key {
            None => self.rows.push(row),
            Some(key) => match self.by_key.get(&key) {
                Some(&i) => self.rows[i] = row,
                None => {
                    self.by_key.insert(key, self.rows.len());
                    self.rows.push(row);
                }
            },
        }
    }

    /// The buffered rows, in order.
    pub(crate) fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Takes every buffered row out, leaving the buffer empty.
    pub(crate) fn take(&mut self) -> Vec<Row> {
        self.by_key.clear();
        std::mem::take(&mut self.rows)
    }

    /// Puts `older` rows back in front of the buffered ones (a transaction that was rolled back
    /// or never prepared): buffered rows came later, so they win over older ones of their key.
    pub(crate) fn put_back(&mut self, older: Vec<Row>, key_of: impl Fn(&Row) -> Option<Vec<u8>>) {
        let newer = self.take();
        for row in older.into_iter().chain(newer) {
            let key = key_of(&row);
            self.push(key, row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn key(row: &Row) -> Option<Vec<u8>> {
        Some(postcard::to_allocvec(&row[0]).unwrap())
    }

    fn row(k: i64, v: &str) -> Row {
        vec![Value::Int(k), Value::Text(v.into())]
    }

    #[test]
    fn the_last_row_of_a_key_wins_in_the_place_of_the_first() {
        let mut b = RowBuffer::default();
        for r in [row(1, "a"), row(2, "b"), row(1, "c")] {
            b.push(key(&r), r);
        }
        assert_eq!(b.take(), vec![row(1, "c"), row(2, "b")]);
        assert!(b.is_empty());
    }

    #[test]
    fn rows_put_back_go_first_and_lose_to_newer_rows_of_their_key() {
        let mut b = RowBuffer::default();
        for r in [row(2, "new"), row(3, "new")] {
            b.push(key(&r), r);
        }
        b.put_back(vec![row(1, "old"), row(2, "old")], key);
        assert_eq!(b.take(), vec![row(1, "old"), row(2, "new"), row(3, "new")]);
    }

    #[test]
    fn rows_without_a_key_are_all_kept() {
        let mut b = RowBuffer::default();
        b.push(None, row(1, "a"));
        b.push(None, row(1, "a"));
        b.put_back(vec![row(0, "z")], |_| None);
        assert_eq!(b.len(), 3);
    }
}
