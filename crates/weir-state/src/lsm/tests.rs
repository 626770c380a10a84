//! The RocksDB tables against the heap tables: the same operations give the same state, through
//! spills, snapshots and restores at other parallelisms, into either backend.

use super::*;
use crate::{
    encode_keyed_snapshot, CurrentKey, KeyGroupRange, KeyedSnapshotReader, KeyedStateSet,
    ListState, MapState, ValueState,
};
use std::collections::BTreeMap;
use std::sync::Arc;

const MP: u32 = 32;

type Tables = (
    ValueState<u64, String>,
    ListState<u64, u32>,
    MapState<u64, String, i64>,
);

fn tables() -> Tables {
    (
        ValueState::new("value"),
        ListState::new("list"),
        MapState::new("map"),
    )
}

fn names(t: &Tables) -> Vec<String> {
    let mut names = Vec::new();
    t.names(&mut names);
    names
}

/// A store with no memory for its in-memory tier: every `maintain` spills.
fn store(dir: &tempfile::TempDir, t: &Tables) -> Arc<LsmStore> {
    let options = LsmOptions {
        local_dir: dir.path().to_path_buf(),
        memory_bytes: 0,
    };
    LsmStore::open(&options, "test/0", &names(t)).unwrap()
}

fn open(range: KeyGroupRange, store: Option<&Arc<LsmStore>>) -> Tables {
    let mut t = tables();
    t.init(MP, range);
    if let Some(store) = store {
        t.use_lsm(store).unwrap();
    }
    t
}

/// Applies operation `i` to `t`: a mix of every kind of write and removal.
fn apply(t: &mut Tables, i: u64) {
    let k = i % 997;
    let key = CurrentKey::new(&k, MP);
    match i % 7 {
        0 => t.0.set(&key, format!("v{i}")),
        1 => t.0.update(&key, |v| v.map(|v| format!("{v}+"))),
        2 => {
            t.0.clear(&key);
        }
        3 => t.1.add(&key, i as u32),
        4 => {
            t.1.take(&key);
        }
        5 => {
            t.2.put(&key, format!("u{}", i % 5), i as i64);
        }
        _ => {
            t.2.remove(&key, &format!("u{}", i % 5));
        }
    }
}

type Contents = (
    BTreeMap<u64, String>,
    BTreeMap<u64, Vec<u32>>,
    BTreeMap<(u64, String), i64>,
);

fn contents(t: &Tables) -> Contents {
    (
        t.0.iter().map(|(k, v)| (*k, v.clone())).collect(),
        t.1.iter().map(|(k, v)| (*k, v.to_vec())).collect(),
        t.2.iter()
            .map(|(k, uk, uv)| ((*k, uk.clone()), *uv))
            .collect(),
    )
}

fn snapshot(t: &mut Tables, range: KeyGroupRange, store: Option<&Arc<LsmStore>>) -> Vec<u8> {
    t.maintain().unwrap();
    if let Some(store) = store {
        store.begin_snapshot();
    }
    let mut frozen = Vec::new();
    t.snapshot(&mut frozen);
    if let Some(store) = store {
        store.end_snapshot();
    }
    // The task keeps writing while the snapshot is encoded: the snapshot must not see it.
    for i in 0..500 {
        apply(t, 1_000_000 + i);
    }
    t.maintain().unwrap();
    encode_keyed_snapshot(&frozen, range).unwrap()
}

#[test]
fn rocksdb_tables_hold_what_heap_tables_hold_through_spills() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, MP);
    let s = store(&dir, &tables());
    let (mut heap, mut lsm) = (open(all, None), open(all, Some(&s)));
    for i in 0..20_000 {
        apply(&mut heap, i);
        apply(&mut lsm, i);
        if i % 256 == 0 {
            lsm.maintain().unwrap();
        }
        let k = i % 997;
        let key = CurrentKey::new(&k, MP);
        assert_eq!(heap.0.get(&key), lsm.0.get(&key), "value of {k} after {i}");
        assert_eq!(heap.1.get(&key), lsm.1.get(&key), "list of {k} after {i}");
    }
    assert_eq!(contents(&heap), contents(&lsm));
    assert_eq!(heap.0.len(), lsm.0.len());
}

#[test]
fn a_rocksdb_snapshot_restores_into_either_backend_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, MP);
    let s = store(&dir, &tables());
    let (mut heap, mut lsm) = (open(all, None), open(all, Some(&s)));
    for i in 0..10_000 {
        apply(&mut heap, i);
        apply(&mut lsm, i);
    }
    let expected = contents(&heap);
    let bytes = snapshot(&mut lsm, all, Some(&s));
    let reader = KeyedSnapshotReader::decode(&bytes).unwrap();

    // Rescaled to three subtasks, each on RocksDB, and to one on the heap.
    let mut merged: Contents = Default::default();
    for index in 0..3 {
        let range = KeyGroupRange::for_subtask(MP, 3, index);
        let s = store(&dir, &tables());
        let mut part = open(range, Some(&s));
        part.restore(&reader).unwrap();
        let (v, l, m) = contents(&part);
        merged.0.extend(v);
        merged.1.extend(l);
        merged.2.extend(m);
    }
    assert_eq!(merged, expected);
    let mut back = open(all, None);
    back.restore(&reader).unwrap();
    assert_eq!(contents(&back), expected);

    // And a heap snapshot restores into RocksDB.
    let heap_bytes = snapshot(&mut heap, all, None);
    let s = store(&dir, &tables());
    let mut from_heap = open(all, Some(&s));
    from_heap
        .restore(&KeyedSnapshotReader::decode(&heap_bytes).unwrap())
        .unwrap();
    assert_eq!(contents(&from_heap), expected);
}

#[test]
fn snapshots_taken_back_to_back_each_hold_their_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, MP);
    let s = store(&dir, &tables());
    let (mut heap, mut lsm) = (open(all, None), open(all, Some(&s)));
    let mut pending = Vec::new();
    for round in 0..4u64 {
        for i in round * 3_000..(round + 1) * 3_000 {
            apply(&mut heap, i);
            apply(&mut lsm, i);
        }
        s.begin_snapshot();
        let mut frozen = Vec::new();
        lsm.snapshot(&mut frozen);
        s.end_snapshot();
        pending.push((frozen, contents(&heap)));
    }
    // Encoded newest first, after the task spilled (which materializes them all, in order).
    for i in 0..2_000 {
        apply(&mut lsm, 50_000 + i);
    }
    lsm.maintain().unwrap();
    for (frozen, expected) in pending.into_iter().rev() {
        let bytes = encode_keyed_snapshot(&frozen, all).unwrap();
        let mut back = open(all, None);
        back.restore(&KeyedSnapshotReader::decode(&bytes).unwrap())
            .unwrap();
        assert_eq!(contents(&back), expected);
    }
}

#[test]
fn the_store_lives_in_a_directory_of_its_own_removed_when_the_tables_go() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, &tables());
    let path = s.path().to_path_buf();
    assert!(path.starts_with(dir.path()) && path.exists());
    let t = open(KeyGroupRange::new(0, MP), Some(&s));
    drop(s);
    assert!(path.exists(), "the tables still use it");
    drop(t);
    assert!(!path.exists());
}

#[test]
fn a_max_parallelism_beyond_what_keys_can_hold_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, &tables());
    let mut t = tables();
    t.init(65_536, KeyGroupRange::new(0, 65_536));
    let err = t.use_lsm(&s).unwrap_err().to_string();
    assert!(err.contains("at most 32768"), "{err}");
}
