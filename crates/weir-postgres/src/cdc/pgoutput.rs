//! Decoding the `pgoutput` plugin's messages (protocol version 1, text values): relations and
//! the row changes that refer to them. Begin and commit arrive already decoded by the
//! replication client. Every read is bounds-checked: a truncated or unknown message is an
//! error naming what was expected, never a panic.

use crate::value::{Kind, Row, Value};

/// A table as the stream describes it (sent before its first change, and again after DDL).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Relation {
    pub id: u32,
    /// `schema.name`.
    pub name: String,
    pub columns: Vec<RelationColumn>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RelationColumn {
    pub name: String,
    pub type_oid: u32,
    /// Part of the replica identity (the primary key by default).
    pub key: bool,
}

/// A row as sent: each column null, unchanged (a TOASTed value an update did not touch; or a
/// column outside the replica identity in a key-only image), or its text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Field<'a> {
    Null,
    Unchanged,
    Text(&'a str),
}

#[derive(Debug, PartialEq)]
pub(crate) enum Message<'a> {
    Relation(Relation),
    Insert {
        relation: u32,
        new: Vec<Field<'a>>,
    },
    Update {
        relation: u32,
        /// The old row: `(true, …)` when it holds only the key columns.
        old: Option<(bool, Vec<Field<'a>>)>,
        new: Vec<Field<'a>>,
    },
    Delete {
        relation: u32,
        key_only: bool,
        old: Vec<Field<'a>>,
    },
    Truncate {
        relations: Vec<u32>,
    },
    /// Type, origin and other messages a changelog does not need.
    Other,
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("pgoutput message truncated in {what}"));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn i16(&mut self, what: &str) -> Result<i16, String> {
        Ok(i16::from_be_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn cstr(&mut self, what: &str) -> Result<&'a str, String> {
        let end = self
            .bytes
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("pgoutput message truncated in {what}"))?;
        let s = std::str::from_utf8(&self.bytes[..end])
            .map_err(|_| format!("pgoutput {what} is not UTF-8"))?;
        self.bytes = &self.bytes[end + 1..];
        Ok(s)
    }
    fn tuple(&mut self) -> Result<Vec<Field<'a>>, String> {
        let n = self.i16("a tuple's column count")?;
        let mut fields = Vec::with_capacity(n.max(0) as usize);
        for _ in 0..n {
            fields.push(match self.u8("a column's kind")? {
                b'n' => Field::Null,
                b'u' => Field::Unchanged,
                b't' => {
                    let len = self.u32("a value's length")? as usize;
                    let bytes = self.take(len, "a value")?;
                    Field::Text(
                        std::str::from_utf8(bytes).map_err(|_| "a text value is not UTF-8")?,
                    )
                }
                other => {
                    return Err(format!(
                        "pgoutput column kind `{}` is not text (binary output is not used)",
                        other as char
                    ))
                }
            });
        }
        Ok(fields)
    }
}

/// Decodes one message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message<'_>, String> {
    let mut r = Reader { bytes };
    let tag = r.u8("the message type")?;
    Ok(match tag {
        b'R' => {
            let id = r.u32("the relation id")?;
            let schema = r.cstr("the schema name")?;
            let name = r.cstr("the table name")?;
            let _identity = r.u8("the replica identity")?;
            let n = r.i16("the column count")?;
            let mut columns = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let flags = r.u8("a column's flags")?;
                let name = r.cstr("a column name")?.to_string();
                let type_oid = r.u32("a column type")?;
                let _typmod = r.u32("a column type modifier")?;
                columns.push(RelationColumn {
                    name,
                    type_oid,
                    key: flags & 1 == 1,
                });
            }
            Message::Relation(Relation {
                id,
                name: format!("{schema}.{name}"),
                columns,
            })
        }
        b'I' => {
            let relation = r.u32("the relation id")?;
            expect(r.u8("the new tuple marker")?, b'N')?;
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32("the relation id")?;
            let mut marker = r.u8("the tuple marker")?;
            let mut old = None;
            if marker == b'K' || marker == b'O' {
                old = Some((marker == b'K', r.tuple()?));
                marker = r.u8("the new tuple marker")?;
            }
            expect(marker, b'N')?;
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32("the relation id")?;
            let marker = r.u8("the old tuple marker")?;
            if marker != b'K' && marker != b'O' {
                return Err(format!(
                    "pgoutput delete carries tuple `{}`, expected K or O",
                    marker as char
                ));
            }
            Message::Delete {
                relation,
                key_only: marker == b'K',
                old: r.tuple()?,
            }
        }
        b'T' => {
            let n = r.u32("the relation count")?;
            let _options = r.u8("the truncate options")?;
            let relations = (0..n)
                .map(|_| r.u32("a relation id"))
                .collect::<Result<_, _>>()?;
            Message::Truncate { relations }
        }
        _ => Message::Other,
    })
}

fn expect(got: u8, want: u8) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "pgoutput tuple marker `{}` where `{}` was expected",
            got as char, want as char
        ))
    }
}

/// A relation with each column's kind resolved (an unsupported type is an error naming it).
#[derive(Clone, Debug)]
pub(crate) struct DecodedRelation {
    pub name: String,
    pub kinds: Vec<Kind>,
    pub columns: Vec<String>,
}

impl DecodedRelation {
    pub(crate) fn new(relation: &Relation) -> Result<DecodedRelation, crate::PgError> {
        let kinds = relation
            .columns
            .iter()
            .map(|c| Kind::of(c.type_oid, &relation.name, &c.name))
            .collect::<Result<_, _>>()?;
        Ok(DecodedRelation {
            name: relation.name.clone(),
            kinds,
            columns: relation.columns.iter().map(|c| c.name.clone()).collect(),
        })
    }

    /// A tuple as a typed row; a value that does not parse is an error naming the column.
    pub(crate) fn row(&self, fields: &[Field<'_>]) -> Result<Row, crate::PgError> {
        if fields.len() != self.kinds.len() {
            return Err(crate::PgError::Data(format!(
                "a change of {} has {} columns, the relation {}",
                self.name,
                fields.len(),
                self.kinds.len()
            )));
        }
        fields
            .iter()
            .zip(&self.kinds)
            .zip(&self.columns)
            .map(|((field, kind), column)| match field {
                Field::Null => Ok(Value::Null),
                Field::Unchanged => Ok(Value::Unavailable),
                Field::Text(text) => kind.parse(text).map_err(|e| {
                    crate::PgError::Data(format!("{}, column {column}: {e}", self.name))
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation_message() -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend_from_slice(&16384u32.to_be_bytes());
        m.extend_from_slice(b"public\0orders\0");
        m.push(b'd');
        m.extend_from_slice(&2i16.to_be_bytes());
        for (flags, name, oid) in [(1u8, "id", 20u32), (0, "note", 25)] {
            m.push(flags);
            m.extend_from_slice(name.as_bytes());
            m.push(0);
            m.extend_from_slice(&oid.to_be_bytes());
            m.extend_from_slice(&(-1i32).to_be_bytes());
        }
        m
    }

    fn tuple(fields: &[Option<&str>]) -> Vec<u8> {
        let mut m = (fields.len() as i16).to_be_bytes().to_vec();
        for f in fields {
            match f {
                None => m.push(b'n'),
                Some(t) => {
                    m.push(b't');
                    m.extend_from_slice(&(t.len() as u32).to_be_bytes());
                    m.extend_from_slice(t.as_bytes());
                }
            }
        }
        m
    }

    #[test]
    fn relations_and_changes_decode_into_typed_rows() {
        let Message::Relation(rel) = decode(&relation_message()).unwrap() else {
            panic!("not a relation")
        };
        assert_eq!(rel.name, "public.orders");
        assert!(rel.columns[0].key && !rel.columns[1].key);
        let decoded = DecodedRelation::new(&rel).unwrap();

        let mut update = vec![b'U'];
        update.extend_from_slice(&16384u32.to_be_bytes());
        update.push(b'O');
        update.extend(tuple(&[Some("7"), Some("old")]));
        update.push(b'N');
        update.extend(tuple(&[Some("7"), None]));
        let Message::Update { old, new, .. } = decode(&update).unwrap() else {
            panic!("not an update")
        };
        let (key_only, old) = old.unwrap();
        assert!(!key_only);
        assert_eq!(
            decoded.row(&old).unwrap(),
            vec![Value::Int(7), Value::Text("old".into())]
        );
        assert_eq!(decoded.row(&new).unwrap(), vec![Value::Int(7), Value::Null]);
    }

    #[test]
    fn a_truncated_or_malformed_message_is_an_error_not_a_panic() {
        let full = relation_message();
        for cut in 0..full.len() {
            assert!(decode(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut insert = vec![b'I'];
        insert.extend_from_slice(&1u32.to_be_bytes());
        insert.push(b'N');
        insert.extend(tuple(&[Some("x")]));
        let Message::Insert { new, .. } = decode(&insert).unwrap() else {
            panic!()
        };
        let rel = DecodedRelation {
            name: "public.t".into(),
            kinds: vec![Kind::Int],
            columns: vec!["id".into()],
        };
        let err = rel.row(&new).unwrap_err().to_string();
        assert!(err.contains("public.t, column id"), "{err}");
    }
}
