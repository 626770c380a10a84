//! Properties of keyed state through the public API: snapshot, encode, decode and restore keep
//! contents exactly, at the same or a different parallelism, and bad bytes are errors.

use proptest::prelude::*;
use std::collections::BTreeMap;
use weir_state::*;

/// Every kind of table, including a nested tuple, all keyed by `u32`.
type Tables = (
    ValueState<u32, String>,
    MapState<u32, u8, i64>,
    (ListState<u32, u16>, ValueState<u32, (u8, Option<u64>)>),
);

fn tables() -> Tables {
    (
        ValueState::new("value"),
        MapState::new("map"),
        (ListState::new("list"), ValueState::new("pair")),
    )
}

#[derive(Clone, Debug)]
enum Op {
    Set(u32, String),
    Clear(u32),
    Put(u32, u8, i64),
    Remove(u32, u8),
    Add(u32, u16),
    ReplaceList(u32, Vec<u16>),
    SetPair(u32, u8, Option<u64>),
}

impl Op {
    fn key(&self) -> u32 {
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

fn op() -> impl Strategy<Value = Op> {
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
struct Contents {
    value: BTreeMap<u32, String>,
    map: BTreeMap<(u32, u8), i64>,
    list: BTreeMap<u32, Vec<u16>>,
    pair: BTreeMap<u32, (u8, Option<u64>)>,
}

impl Contents {
    fn apply(&mut self, op: &Op) {
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

    fn of(t: &Tables) -> Contents {
        Contents {
            value: t.0.iter().map(|(k, v)| (*k, v.clone())).collect(),
            map: t.1.iter().map(|(k, u, v)| ((*k, *u), *v)).collect(),
            list: t.2 .0.iter().map(|(k, v)| (*k, v.to_vec())).collect(),
            pair: t.2 .1.iter().map(|(k, v)| (*k, *v)).collect(),
        }
    }

    fn keys(&self) -> Vec<u32> {
        let mut keys: Vec<u32> = self.value.keys().copied().collect();
        keys.extend(self.map.keys().map(|(k, _)| *k));
        keys.extend(self.list.keys());
        keys.extend(self.pair.keys());
        keys
    }

    fn extend(&mut self, other: Contents) {
        self.value.extend(other.value);
        self.map.extend(other.map);
        self.list.extend(other.list);
        self.pair.extend(other.pair);
    }
}

fn apply(t: &mut Tables, op: &Op, max_parallelism: u32) {
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

fn snapshot_bytes(t: &mut Tables, range: KeyGroupRange) -> Vec<u8> {
    let mut frozen = Vec::new();
    t.snapshot(&mut frozen);
    encode_keyed_snapshot(&frozen, range).expect("encode")
}

proptest! {
    #[test]
    fn snapshot_encode_decode_restore_yields_the_contents_as_of_the_snapshot(
        max_parallelism in 8u32..64,
        parallelism_seed in any::<u32>(),
        index_seed in any::<u32>(),
        before in prop::collection::vec(op(), 0..120),
        after in prop::collection::vec(op(), 0..60),
    ) {
        let parallelism = parallelism_seed % 4 + 1;
        let range = KeyGroupRange::for_subtask(max_parallelism, parallelism, index_seed % parallelism);
        let owned = |op: &&Op| range.contains(key_group_of(&op.key(), max_parallelism));

        let mut live = tables();
        live.init(max_parallelism, range);
        let mut expected = Contents::default();
        for op in before.iter().filter(owned) {
            apply(&mut live, op, max_parallelism);
            expected.apply(op);
        }
        let mut frozen = Vec::new();
        live.snapshot(&mut frozen);
        // Writes after the synchronous phase must not show in the snapshot (copy-on-write).
        let mut expected_live = expected.clone();
        for op in after.iter().filter(owned) {
            apply(&mut live, op, max_parallelism);
            expected_live.apply(op);
        }
        let bytes = encode_keyed_snapshot(&frozen, range).unwrap();

        let mut restored = tables();
        restored.init(max_parallelism, range);
        let reader = KeyedSnapshotReader::decode(&bytes).unwrap();
        reader.check_covers(range).unwrap();
        restored.restore(&reader).unwrap();
        prop_assert_eq!(Contents::of(&restored), expected);
        prop_assert_eq!(Contents::of(&live), expected_live);
    }

    #[test]
    fn rescaling_restores_every_key_exactly_once_in_the_subtask_owning_its_key_group(
        max_parallelism in 8u32..64,
        old_seed in any::<u32>(),
        new_seed in any::<u32>(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let old_parallelism = old_seed % max_parallelism + 1;
        let new_parallelism = new_seed % max_parallelism + 1;

        let mut expected = Contents::default();
        let mut old: Vec<Tables> = (0..old_parallelism)
            .map(|i| {
                let mut t = tables();
                t.init(max_parallelism, KeyGroupRange::for_subtask(max_parallelism, old_parallelism, i));
                t
            })
            .collect();
        for op in &ops {
            let group = key_group_of(&op.key(), max_parallelism);
            let owner = subtask_for_key_group(max_parallelism, old_parallelism, group);
            apply(&mut old[owner as usize], op, max_parallelism);
            expected.apply(op);
        }
        let snapshots: Vec<(KeyGroupRange, Vec<u8>)> = old
            .iter_mut()
            .enumerate()
            .map(|(i, t)| {
                let range = KeyGroupRange::for_subtask(max_parallelism, old_parallelism, i as u32);
                (range, snapshot_bytes(t, range))
            })
            .collect();

        let mut union = Contents::default();
        let mut key_count = 0;
        for index in 0..new_parallelism {
            let range = KeyGroupRange::for_subtask(max_parallelism, new_parallelism, index);
            // Only the old subtasks whose key groups overlap the new range.
            let overlapping = snapshots
                .iter()
                .filter(|(r, _)| r.start < range.end && range.start < r.end)
                .map(|(_, bytes)| bytes.as_slice());
            let reader = KeyedSnapshotReader::decode_many(overlapping).unwrap();
            reader.check_covers(range).unwrap();
            let mut t = tables();
            t.init(max_parallelism, range);
            t.restore(&reader).unwrap();
            let contents = Contents::of(&t);
            for key in contents.keys() {
                let group = key_group_of(&key, max_parallelism);
                prop_assert_eq!(subtask_for_key_group(max_parallelism, new_parallelism, group), index);
            }
            key_count += contents.value.len() + contents.map.len() + contents.list.len() + contents.pair.len();
            union.extend(contents);
        }
        // Disjoint subtasks (no key counted twice) whose union is exactly the old contents.
        prop_assert_eq!(key_count, expected.value.len() + expected.map.len() + expected.list.len() + expected.pair.len());
        prop_assert_eq!(union, expected);
    }

    #[test]
    fn truncated_or_bit_flipped_keyed_snapshots_are_errors(
        ops in prop::collection::vec(op(), 0..40),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let range = KeyGroupRange::new(0, 16);
        let mut t = tables();
        t.init(16, range);
        for op in &ops {
            apply(&mut t, op, 16);
        }
        let bytes = snapshot_bytes(&mut t, range);
        prop_assert!(KeyedSnapshotReader::decode(&bytes[..cut.index(bytes.len())]).is_err());
        let mut flipped = bytes.clone();
        flipped[flip.index(bytes.len())] ^= 1 << bit;
        prop_assert!(KeyedSnapshotReader::decode(&flipped).is_err());
    }

    #[test]
    fn damaged_entries_under_a_valid_checksum_never_panic_on_restore(
        ops in prop::collection::vec(op(), 1..40),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
    ) {
        let range = KeyGroupRange::new(0, 16);
        let mut t = tables();
        t.init(16, range);
        for op in &ops {
            apply(&mut t, op, 16);
        }
        let mut bytes = snapshot_bytes(&mut t, range);
        // Damage anything after the checksum, then make the checksum agree, as a buggy writer
        // would: decoding and restoring must return, with Ok or Err.
        for (at, bit) in flips {
            let at = 20 + at.index(bytes.len() - 20);
            bytes[at] ^= 1 << bit;
        }
        let checksum = xxhash_rust::xxh3::xxh3_64(&bytes[20..]);
        bytes[12..20].copy_from_slice(&checksum.to_le_bytes());
        if let Ok(reader) = KeyedSnapshotReader::decode(&bytes) {
            let mut restored = tables();
            restored.init(16, range);
            let _ = restored.restore(&reader);
        }
    }
}

#[test]
fn restoring_a_table_as_another_kind_is_a_kind_mismatch() {
    let range = KeyGroupRange::new(0, 8);
    let mut values = ValueState::<u32, u32>::new("t");
    values.init(8, range);
    let mut frozen = Vec::new();
    values.snapshot(&mut frozen);
    let reader =
        KeyedSnapshotReader::decode(&encode_keyed_snapshot(&frozen, range).unwrap()).unwrap();
    let mut lists = ListState::<u32, u32>::new("t");
    lists.init(8, range);
    let err = lists.restore(&reader).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::KindMismatch {
                expected: TableKind::List,
                found: TableKind::Value,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn restoring_with_another_max_parallelism_is_refused() {
    let mut values = ValueState::<u32, u32>::new("t");
    values.init(8, KeyGroupRange::new(0, 8));
    let bytes = snapshot_bytes_of(&mut values, KeyGroupRange::new(0, 8));
    let mut other = ValueState::<u32, u32>::new("t");
    other.init(16, KeyGroupRange::new(0, 16));
    let err = other
        .restore(&KeyedSnapshotReader::decode(&bytes).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            err,
            StateError::MaxParallelismMismatch {
                snapshot: 8,
                expected: 16
            }
        ),
        "{err}"
    );
}

#[test]
fn tables_absent_from_the_snapshot_start_empty() {
    let range = KeyGroupRange::new(0, 8);
    let mut a = ValueState::<u32, u32>::new("a");
    a.init(8, range);
    a.set(&CurrentKey::new(&1, 8), 1);
    let reader = KeyedSnapshotReader::decode(&snapshot_bytes_of(&mut a, range)).unwrap();
    let mut b = (
        ValueState::<u32, u32>::new("a"),
        ListState::<u32, u32>::new("new"),
    );
    b.init(8, range);
    b.1.add(&CurrentKey::new(&1, 8), 5);
    b.restore(&reader).unwrap();
    assert_eq!(b.0.len(), 1);
    assert_eq!(b.1.num_keys(), 0);
}

#[test]
fn merging_overlapping_snapshots_is_an_error_and_missing_key_groups_are_reported() {
    let mut a = ValueState::<u32, u32>::new("a");
    a.init(8, KeyGroupRange::new(0, 4));
    let bytes = snapshot_bytes_of(&mut a, KeyGroupRange::new(0, 4));
    let twice = KeyedSnapshotReader::decode_many([bytes.as_slice(), bytes.as_slice()]);
    assert!(matches!(
        twice,
        Err(StateError::OverlappingSnapshots { key_group: 0 })
    ));

    let reader = KeyedSnapshotReader::decode(&bytes).unwrap();
    let err = reader.check_covers(KeyGroupRange::new(2, 6)).unwrap_err();
    assert!(
        matches!(err, StateError::MissingKeyGroup { key_group: 4, .. }),
        "{err}"
    );
}

#[test]
fn a_snapshot_without_tables_round_trips() {
    let mut none = ();
    <() as KeyedStateSet<u32>>::init(&mut none, 8, KeyGroupRange::new(0, 8));
    let mut frozen = Vec::new();
    <() as KeyedStateSet<u32>>::snapshot(&mut none, &mut frozen);
    let bytes = encode_keyed_snapshot(&frozen, KeyGroupRange::new(0, 8)).unwrap();
    let reader = KeyedSnapshotReader::decode(&bytes).unwrap();
    assert_eq!(reader.max_parallelism(), None);
    assert_eq!(reader.tables().count(), 0);
    reader.check_covers(KeyGroupRange::new(0, 8)).unwrap();
}

fn snapshot_bytes_of<S: KeyedStateSet<u32>>(s: &mut S, range: KeyGroupRange) -> Vec<u8> {
    let mut frozen = Vec::new();
    s.snapshot(&mut frozen);
    encode_keyed_snapshot(&frozen, range).unwrap()
}
