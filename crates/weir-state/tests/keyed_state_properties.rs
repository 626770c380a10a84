//! Properties of keyed state through the public API: snapshot, encode, decode and restore keep
//! contents exactly, at the same or a different parallelism, and bad bytes are errors.

mod common;

use common::*;
use proptest::prelude::*;
use weir_state::*;

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
        init(&mut live, max_parallelism, range);
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
        init(&mut restored, max_parallelism, range);
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
                init(&mut t, max_parallelism, KeyGroupRange::for_subtask(max_parallelism, old_parallelism, i));
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
            init(&mut t, max_parallelism, range);
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
        init(&mut t, 16, range);
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
        init(&mut t, 16, range);
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
            init(&mut restored, 16, range);
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
