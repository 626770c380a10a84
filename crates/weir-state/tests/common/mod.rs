//! Shared by the keyed state property tests: every kind of table, random operations on them,
//! and a model of their contents to compare against.
#![allow(dead_code)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use weir_state::*;

/// Every kind of table, including a nested tuple, all keyed by `u32`.
pub type Tables = (
    ValueState<u32, String>,
    MapState<u32, u8, i64>,
    (ListState<u32, u16>, ValueState<u32, (u8, Option<u64>)>),
);

pub fn tables() -> Tables {
    (
        ValueState::new("value"),
        MapState::new("map"),
        (ListState::new("list"), ValueState::new("pair")),
    )
}

#[derive(Clone, Debug)]
pub enum Op {
    Set(u32, String),
    Clear(u32),
    Put(u32, u8, i64),
    Remove(u32, u8),
    Add(u32, u16),
    ReplaceList(u32, Vec<u16>),
    SetPair(u32, u8, Option<u64>),
}

impl Op {
    pub fn key(&self) -> u32 {
        match self {
            Op::Set(k, _)
            | Op::Clear(k)
            | Op::Put(k, ..)
            | Op::Remove(k, _)
            | Op::Add(k, _)
            | Op::ReplaceList(k, _)
            | Op::SetPair(k, ..) => *k,
        }
    }
}

pub fn op() -> impl Strategy<Value = Op> {
    let key = 0u32..200;
    prop_oneof![
        (key.clone(), "[a-z]{0,6}").prop_map(|(k, v)| Op::Set(k, v)),
        key.clone().prop_map(Op::Clear),
        (key.clone(), 0u8..4, any::<i64>()).prop_map(|(k, u, v)| Op::Put(k, u, v)),
        (key.clone(), 0u8..4).prop_map(|(k, u)| Op::Remove(k, u)),
        (key.clone(), any::<u16>()).prop_map(|(k, v)| Op::Add(k, v)),
        (key.clone(), prop::collection::vec(any::<u16>(), 0..3))
            .prop_map(|(k, v)| Op::ReplaceList(k, v)),
        (key, any::<u8>(), any::<Option<u64>>()).prop_map(|(k, a, b)| Op::SetPair(k, a, b)),
    ]
}

/// The contents of every table, in a comparable form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Contents {
    pub value: BTreeMap<u32, String>,
    pub map: BTreeMap<(u32, u8), i64>,
    pub list: BTreeMap<u32, Vec<u16>>,
    pub pair: BTreeMap<u32, (u8, Option<u64>)>,
}

impl Contents {
    pub fn apply(&mut self, op: &Op) {
        match op.clone() {
            Op::Set(k, v) => {
                self.value.insert(k, v);
            }
            Op::Clear(k) => {
                self.value.remove(&k);
            }
            Op::Put(k, u, v) => {
                self.map.insert((k, u), v);
            }
            Op::Remove(k, u) => {
                self.map.remove(&(k, u));
            }
            Op::Add(k, v) => self.list.entry(k).or_default().push(v),
            Op::ReplaceList(k, v) if v.is_empty() => {
                self.list.remove(&k);
            }
            Op::ReplaceList(k, v) => {
                self.list.insert(k, v);
            }
            Op::SetPair(k, a, b) => {
                self.pair.insert(k, (a, b));
            }
        }
    }

    pub fn of(t: &Tables) -> Contents {
        Contents {
            value: t.0.iter().map(|(k, v)| (*k, v.clone())).collect(),
            map: t.1.iter().map(|(k, u, v)| ((*k, *u), *v)).collect(),
            list: t.2 .0.iter().map(|(k, v)| (*k, v.to_vec())).collect(),
            pair: t.2 .1.iter().map(|(k, v)| (*k, *v)).collect(),
        }
    }

    pub fn keys(&self) -> Vec<u32> {
        let mut keys: Vec<u32> = self.value.keys().copied().collect();
        keys.extend(self.map.keys().map(|(k, _)| *k));
        keys.extend(self.list.keys());
        keys.extend(self.pair.keys());
        keys
    }

    pub fn extend(&mut self, other: Contents) {
        self.value.extend(other.value);
        self.map.extend(other.map);
        self.list.extend(other.list);
        self.pair.extend(other.pair);
    }
}

/// Makes `t` the tables of the subtask owning `range`: on the heap, or, when
/// `WEIR_STATE_BACKEND_TYPE` is `rocksdb` (the test command runs these tests once per backend),
/// in a RocksDB of their own with no memory for the in-memory tier, so that [`apply`] moves
/// every write on to RocksDB.
pub fn init(t: &mut Tables, max_parallelism: u32, range: KeyGroupRange) {
    t.init(max_parallelism, range);
    let backend = weir_core::config::StateBackendConfig::from_env().expect("state backend");
    if backend.kind == weir_core::config::StateBackendKind::RocksDb {
        use_rocksdb(t);
    }
}

#[cfg(feature = "rocksdb")]
fn use_rocksdb(t: &mut Tables) {
    let mut names = Vec::new();
    t.names(&mut names);
    let options = lsm::LsmOptions {
        local_dir: std::env::temp_dir(),
        memory_bytes: 0,
    };
    let store =
        lsm::LsmStore::open(&options, "properties", &names, &[], None).expect("open RocksDB");
    t.use_lsm(&store).expect("tables in RocksDB");
}

#[cfg(not(feature = "rocksdb"))]
fn use_rocksdb(_: &mut Tables) {
    panic!("WEIR_STATE_BACKEND_TYPE is rocksdb: run these tests with --features rocksdb");
}

/// Applies `op` to `t`, then gives the tables their between-batches maintenance (with RocksDB
/// and no memory for the in-memory tier, the write moves on to RocksDB).
pub fn apply(t: &mut Tables, op: &Op, max_parallelism: u32) {
    apply_op(t, op, max_parallelism);
    t.maintain().expect("maintain");
}

fn apply_op(t: &mut Tables, op: &Op, max_parallelism: u32) {
    let key = op.key();
    let k = CurrentKey::new(&key, max_parallelism);
    match op.clone() {
        Op::Set(_, v) => t.0.set(&k, v),
        Op::Clear(_) => t.0.clear(&k),
        Op::Put(_, u, v) => {
            t.1.put(&k, u, v);
        }
        Op::Remove(_, u) => {
            t.1.remove(&k, &u);
        }
        Op::Add(_, v) => t.2 .0.add(&k, v),
        Op::ReplaceList(_, v) => t.2 .0.update(&k, v),
        Op::SetPair(_, a, b) => t.2 .1.update(&k, |_| Some((a, b))),
    }
}
