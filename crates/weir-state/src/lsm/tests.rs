//! The RocksDB tables against the heap tables: the same operations give the same state, through
//! spills, snapshots and restores at other parallelisms, into either backend.

use super::*;
use crate::StateError;
use crate::{
    encode_keyed_snapshot, CurrentKey, KeyGroupRange, KeyedSnapshotReader, KeyedStateSet,
    ListState, LsmFile, LsmManifest, MapState, SharedStateFile, ValueState,
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
    LsmStore::open(&options, "test/0", &names(t), &[], None).unwrap()
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
        store.begin_snapshot(0);
    }
    let mut frozen = Vec::new();
    t.snapshot(&mut frozen);
    if let Some(store) = store {
        store.end_snapshot(0);
    }
    // The task keeps writing while the snapshot is encoded: the snapshot must not see it.
    for i in 0..500 {
        apply(t, 1_000_000 + i);
    }
    t.maintain().unwrap();
    encode_keyed_snapshot(&frozen, range).unwrap()
}

/// A store in `dir`, and the same tables over every key group on the heap and in the store.
fn side_by_side(dir: &tempfile::TempDir) -> (Arc<LsmStore>, Tables, Tables) {
    let s = store(dir, &tables());
    let all = KeyGroupRange::new(0, MP);
    let (heap, lsm) = (open(all, None), open(all, Some(&s)));
    (s, heap, lsm)
}

/// The contents of three RocksDB subtasks (parallelism 3), each restored from the reader
/// `reader_for` its index gives, merged.
fn restored_in_three<'a>(
    dir: &tempfile::TempDir,
    reader_for: impl Fn(u32) -> &'a KeyedSnapshotReader,
) -> Contents {
    let mut merged: Contents = Default::default();
    for index in 0..3 {
        let range = KeyGroupRange::for_subtask(MP, 3, index);
        let reader = reader_for(index);
        reader.check_covers(range).unwrap();
        let s = store(dir, &tables());
        let mut part = open(range, Some(&s));
        part.restore(reader).unwrap();
        let (v, l, m) = contents(&part);
        merged.0.extend(v);
        merged.1.extend(l);
        merged.2.extend(m);
    }
    merged
}

#[test]
fn rocksdb_tables_hold_what_heap_tables_hold_through_spills() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, mut heap, mut lsm) = side_by_side(&dir);
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
fn batches_read_ahead_with_one_lookup_see_what_reads_one_at_a_time_see() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut heap, mut lsm) = side_by_side(&dir);
    for batch in 0..40u64 {
        let ops: Vec<u64> = (0..500).map(|j| batch * 500 + j * 7).collect();
        // Keys repeat within a batch, some are dirty, frozen by a snapshot, cached or absent.
        let keys: Vec<u64> = ops.iter().map(|i| i % 997).collect();
        let current: Vec<CurrentKey<'_, u64>> =
            keys.iter().map(|k| CurrentKey::new(k, MP)).collect();
        lsm.prefetch(&current);
        for &i in &ops {
            apply(&mut heap, i);
            apply(&mut lsm, i);
        }
        if batch % 5 == 4 {
            store.begin_snapshot(batch);
            lsm.snapshot(&mut Vec::new());
            store.end_snapshot(batch);
        }
        lsm.maintain().unwrap();
        for key in &current {
            assert_eq!(
                heap.0.get(key),
                lsm.0.get(key),
                "value of {} in batch {batch}",
                key.key
            );
            assert_eq!(
                heap.2.get(key, &"u1".to_string()),
                lsm.2.get(key, &"u1".to_string())
            );
        }
    }
    assert_eq!(contents(&heap), contents(&lsm));
}

#[test]
fn index_and_filter_blocks_are_held_in_the_block_cache_not_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, &tables());
    let mut t = open(KeyGroupRange::new(0, MP), Some(&s));
    for k in 0..1_000_000u64 {
        t.0.set(&CurrentKey::new(&k, MP), String::new());
        if k % 50_000 == 0 {
            t.maintain().unwrap();
        }
    }
    t.maintain().unwrap();
    for name in names(&t) {
        s.db().flush_cf(s.family(&name).unwrap()).unwrap();
    }
    for k in (0..1_000_000u64).step_by(997) {
        assert_eq!(t.0.get(&CurrentKey::new(&k, MP)), Some(&String::new()));
    }
    let usage = s.usage();
    assert!(usage.sst_files > 1 << 20, "{usage:?}");
    // Outside the cache a million keys' filters alone take over a megabyte.
    assert!(usage.table_readers < 256 << 10, "{usage:?}");
    // The reads went through the cache the tables share, which stays within its half.
    assert!(usage.block_cache_usage > 1 << 20, "{usage:?}");
    assert!(
        usage.block_cache_usage <= usage.memory_budget / 2,
        "{usage:?}"
    );
}

#[test]
fn a_rocksdb_snapshot_restores_into_either_backend_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, MP);
    let (s, mut heap, mut lsm) = side_by_side(&dir);
    for i in 0..10_000 {
        apply(&mut heap, i);
        apply(&mut lsm, i);
    }
    let expected = contents(&heap);
    let bytes = snapshot(&mut lsm, all, Some(&s));
    let reader = KeyedSnapshotReader::decode(&bytes).unwrap();

    // Rescaled to three subtasks, each on RocksDB, and to one on the heap.
    assert_eq!(restored_in_three(&dir, |_| &reader), expected);
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
    let (s, mut heap, mut lsm) = side_by_side(&dir);
    let mut pending = Vec::new();
    for round in 0..4u64 {
        for i in round * 3_000..(round + 1) * 3_000 {
            apply(&mut heap, i);
            apply(&mut lsm, i);
        }
        s.begin_snapshot(round);
        let mut frozen = Vec::new();
        lsm.snapshot(&mut frozen);
        s.end_snapshot(round);
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

/// Checkpoint storage for the native snapshots below: a directory the "uploads" are copied to.
struct Uploaded {
    dir: tempfile::TempDir,
}

impl Uploaded {
    /// Takes a native snapshot of `t` for `checkpoint`: uploads the table files no completed
    /// checkpoint uploaded, returns the manifest and how many files were uploaded and reused.
    fn snapshot(
        &self,
        t: &mut Tables,
        s: &Arc<LsmStore>,
        checkpoint: u64,
    ) -> (LsmManifest, usize, usize) {
        t.maintain().unwrap();
        s.begin_snapshot(checkpoint);
        let mut frozen = Vec::new();
        t.snapshot(&mut frozen);
        let snapshot = s.end_snapshot(checkpoint).unwrap();
        let path_for = |name: &str| format!("shared/{checkpoint}-{name}");
        let mut files = snapshot.files(&path_for).unwrap();
        let reused = files.reused().len();
        let uploads: Vec<(String, std::path::PathBuf, String)> = files
            .uploads()
            .iter()
            .map(|u| (u.name.clone(), u.local.clone(), u.path.clone()))
            .collect();
        for (name, local, path) in &uploads {
            let bytes = std::fs::read(local).unwrap();
            let target = self.dir.path().join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, &bytes).unwrap();
            files.uploaded(
                name,
                SharedStateFile {
                    path: path.clone(),
                    size: bytes.len() as u64,
                    checksum: 0,
                },
            );
        }
        let bytes = files.manifest(frozen, KeyGroupRange::new(0, MP)).unwrap();
        (LsmManifest::decode(&bytes).unwrap(), uploads.len(), reused)
    }

    fn read(&self, manifest: &LsmManifest, range: KeyGroupRange) -> KeyedSnapshotReader {
        let mut fetch = |file: &LsmFile, dest: &std::path::Path| {
            std::fs::copy(self.dir.path().join(&file.file.path), dest)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        read_native(manifest, range, self.dir.path(), &mut fetch).unwrap()
    }
}

#[test]
fn a_native_snapshot_uploads_only_new_table_files_and_restores_into_either_backend() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Uploaded {
        dir: tempfile::tempdir().unwrap(),
    };
    let all = KeyGroupRange::new(0, MP);
    let (s, mut heap, mut lsm) = side_by_side(&dir);
    for i in 0..10_000 {
        apply(&mut heap, i);
        apply(&mut lsm, i);
    }
    let (first, uploaded, reused) = storage.snapshot(&mut lsm, &s, 1);
    assert!(
        uploaded > 0 && reused == 0,
        "{uploaded} uploaded, {reused} reused"
    );
    s.complete(1);
    for i in 10_000..10_100 {
        apply(&mut heap, i);
        apply(&mut lsm, i);
    }
    let (second, uploaded, reused) = storage.snapshot(&mut lsm, &s, 2);
    assert!(reused > 0, "nothing of checkpoint 1 reused");
    assert!(
        uploaded >= 1,
        "the changes since checkpoint 1 are in a new file"
    );
    for file in &second.files {
        if first.files.contains(file) {
            assert!(file.file.path.starts_with("shared/1-"), "{file:?}");
        }
    }

    // Restored at another parallelism into RocksDB, and whole into the heap.
    let expected = contents(&heap);
    let readers: Vec<KeyedSnapshotReader> = (0..3)
        .map(|index| storage.read(&second, KeyGroupRange::for_subtask(MP, 3, index)))
        .collect();
    let merged = restored_in_three(&dir, |index| &readers[index as usize]);
    assert_eq!(merged, expected);
    let mut back = open(all, None);
    back.restore(&storage.read(&second, all)).unwrap();
    assert_eq!(contents(&back), expected);
}

/// The native snapshot of checkpoint `checkpoint` of a store whose tables took `writes`
/// operations (the heap tables beside it took the same), its storage and directory.
fn native_snapshot(
    writes: u64,
    checkpoint: u64,
) -> (
    tempfile::TempDir,
    Uploaded,
    Arc<LsmStore>,
    Tables,
    LsmManifest,
) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Uploaded {
        dir: tempfile::tempdir().unwrap(),
    };
    let (s, mut heap, mut lsm) = side_by_side(&dir);
    for i in 0..writes {
        apply(&mut heap, i);
        apply(&mut lsm, i);
    }
    let (manifest, _, _) = storage.snapshot(&mut lsm, &s, checkpoint);
    (dir, storage, s, heap, manifest)
}

impl Uploaded {
    /// The database of `manifest` (checkpoint `checkpoint`, the job's own if `owned`) fetched
    /// into `dir`, and opened in place as a new store for `tables`.
    fn open_in_place(
        &self,
        manifest: &LsmManifest,
        checkpoint: u64,
        owned: bool,
        dir: &tempfile::TempDir,
        tables: &[String],
    ) -> (KeyGroupRange, Arc<LsmStore>) {
        let mut fetch = |file: &LsmFile, dest: &std::path::Path| {
            std::fs::copy(self.dir.path().join(&file.file.path), dest)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let native = fetch_native(manifest, checkpoint, owned, dir.path(), &mut fetch).unwrap();
        let held = native.key_groups();
        let options = LsmOptions {
            local_dir: dir.path().to_path_buf(),
            memory_bytes: 0,
        };
        let store = LsmStore::open(&options, "test/1", tables, &[], Some(native)).unwrap();
        (held, store)
    }
}

#[test]
fn a_native_snapshot_opens_in_place_and_its_uploads_are_reused_only_if_owned() {
    let (dir, storage, s, heap, manifest) = native_snapshot(10_000, 7);
    s.complete(7);
    let all = KeyGroupRange::new(0, MP);
    let uploaded = manifest.files.len();
    let expected = contents(&heap);
    for owned in [true, false] {
        let (held, restored) = storage.open_in_place(&manifest, 7, owned, &dir, &names(&tables()));
        assert_eq!(held, all);
        let mut back = open(all, Some(&restored));
        // Nothing to restore from a reader: the database is the restored one.
        back.restore(&KeyedSnapshotReader::default()).unwrap();
        assert_eq!(contents(&back), expected);
        for i in 10_000..10_100 {
            apply(&mut back, i);
        }
        let (_, new, reused) = storage.snapshot(&mut back, &restored, 8);
        if owned {
            assert!(
                reused > 0,
                "the restored checkpoint's uploads are referenced"
            );
            assert!(new < uploaded + 1, "{new} uploaded after the restore");
        } else {
            assert_eq!(
                reused, 0,
                "a snapshot the job does not own is never referenced"
            );
        }
    }
}

#[test]
fn a_database_restored_in_place_by_more_subtasks_is_clipped_to_each_ones_key_groups() {
    let (dir, storage, _s, heap, manifest) = native_snapshot(10_000, 1);
    let mut merged: Contents = Default::default();
    for index in 0..3 {
        let range = KeyGroupRange::for_subtask(MP, 3, index);
        let (held, part_store) = storage.open_in_place(&manifest, 1, true, &dir, &names(&tables()));
        part_store.clip(held, range).unwrap();
        let part = open(range, Some(&part_store));
        let (v, l, m) = contents(&part);
        let owned = |k: &u64| range.contains(crate::key_group_of(k, MP));
        assert!(v.keys().all(owned) && l.keys().all(owned) && m.keys().all(|(k, _)| owned(k)));
        merged.0.extend(v);
        merged.1.extend(l);
        merged.2.extend(m);
    }
    assert_eq!(merged, contents(&heap));
}

#[test]
fn a_table_no_longer_declared_is_dropped_from_a_database_restored_in_place() {
    let (dir, storage, _s, _heap, manifest) = native_snapshot(1_000, 1);
    let only_value = ["value".to_string()];
    let (_, restored) = storage.open_in_place(&manifest, 1, true, &dir, &only_value);
    assert!(restored.family("value").is_ok());
    assert!(restored.family("list").is_err() && restored.family("map").is_err());
}

#[test]
fn a_table_restored_in_place_as_another_kind_is_an_error() {
    let (dir, storage, _s, _heap, mut manifest) = native_snapshot(100, 1);
    manifest.tables[0].1 = crate::TableKind::List;
    let (_, restored) = storage.open_in_place(&manifest, 1, true, &dir, &names(&tables()));
    let mut t = tables();
    t.init(MP, KeyGroupRange::new(0, MP));
    let err = t.use_lsm(&restored).unwrap_err();
    assert!(matches!(err, StateError::KindMismatch { .. }), "{err}");
}

/// A RocksDB store (in a directory of its own) whose tables took `writes` operations, and a
/// checkpoint storage for its native snapshots.
fn written_store(writes: u64) -> (tempfile::TempDir, Uploaded, Arc<LsmStore>, Tables) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Uploaded {
        dir: tempfile::tempdir().unwrap(),
    };
    let s = store(&dir, &tables());
    let mut lsm = open(KeyGroupRange::new(0, MP), Some(&s));
    for i in 0..writes {
        apply(&mut lsm, i);
    }
    (dir, storage, s, lsm)
}

#[test]
fn a_snapshot_taken_before_a_completion_is_known_uploads_its_own_copies() {
    let (_dir, storage, s, mut lsm) = written_store(5_000);
    storage.snapshot(&mut lsm, &s, 1);
    // Checkpoint 2 decides before 1 is known complete: nothing to reuse.
    let (_, _, reused) = storage.snapshot(&mut lsm, &s, 2);
    assert_eq!(reused, 0);
    s.complete(1);
    // Checkpoint 2 may still complete with its own copies: 3 must not reference 1's, which
    // 2's completion would let the coordinator delete.
    let (_, _, reused) = storage.snapshot(&mut lsm, &s, 3);
    assert_eq!(
        reused, 0,
        "referenced checkpoint 1's copies while 2 may complete"
    );
    s.complete(2);
    // 3 may still complete with its own copies: 4 cannot reference 2's either...
    let (_, _, reused) = storage.snapshot(&mut lsm, &s, 4);
    assert_eq!(
        reused, 0,
        "referenced checkpoint 2's copies while 3 may complete"
    );
    // ...until 3 and 4 are aborted: an aborted snapshot constrains nothing.
    s.abort(3);
    s.abort(4);
    let (fifth, uploaded, reused) = storage.snapshot(&mut lsm, &s, 5);
    assert!(reused > 0, "{uploaded} uploaded");
    assert!(fifth
        .files
        .iter()
        .all(|f| f.file.path.starts_with("shared/2-") || f.file.path.starts_with("shared/5-")));
}

#[test]
fn a_truncated_or_missing_table_file_fails_the_restore_with_an_error() {
    let (_dir, storage, s, mut lsm) = written_store(5_000);
    let (manifest, _, _) = storage.snapshot(&mut lsm, &s, 1);
    let truncated = |file: &LsmFile, dest: &std::path::Path| {
        let bytes = std::fs::read(storage.dir.path().join(&file.file.path)).unwrap();
        std::fs::write(dest, &bytes[..bytes.len() / 2]).map_err(|e| e.to_string())
    };
    let missing = |_: &LsmFile, _: &std::path::Path| Err("shared/x.sst: no such file".to_string());
    type Fetch<'a> = Box<dyn FnMut(&LsmFile, &std::path::Path) -> Result<(), String> + 'a>;
    let mut fetches: [Fetch; 2] = [Box::new(truncated), Box::new(missing)];
    for fetch in &mut fetches {
        let Err(err) = read_native(
            &manifest,
            KeyGroupRange::new(0, MP),
            storage.dir.path(),
            &mut **fetch,
        ) else {
            panic!("a damaged snapshot was restored");
        };
        let err = err.to_string();
        assert!(
            err.contains("RocksDB") || err.contains("no such file"),
            "{err}"
        );
    }
}
