//! Time to live, on a manual clock: each update and visibility mode, each cleanup, snapshots.

use super::*;
use crate::{encode_keyed_snapshot, ValueState};

const MP: u32 = 16;
const TTL: Duration = Duration::from_millis(100);

fn range() -> KeyGroupRange {
    KeyGroupRange::new(0, MP)
}

fn value_state(config: StateTtlConfig) -> TtlValueState<u64, String> {
    let mut state = TtlValueState::new("v", config);
    state.init(MP, range());
    state
}

fn key(k: &u64) -> CurrentKey<'_, u64> {
    CurrentKey::new(k, MP)
}

#[test]
fn a_value_written_expires_ttl_after_the_write_and_reads_do_not_refresh_it() {
    let mut s = value_state(StateTtlConfig::new(TTL));
    s.advance_time(1_000);
    s.set(&key(&1), "a".into());
    s.advance_time(1_099);
    assert_eq!(s.get(&key(&1)).map(String::as_str), Some("a"));
    s.advance_time(1_100);
    assert_eq!(s.get(&key(&1)), None);
    // Reading it removed it.
    assert_eq!(s.len(), 0);
}

#[test]
fn a_value_read_lives_ttl_after_the_read_with_update_on_read() {
    let mut s = value_state(StateTtlConfig::new(TTL).update_on_read_and_write());
    s.advance_time(0);
    s.set(&key(&1), "a".into());
    s.advance_time(80);
    assert!(s.get(&key(&1)).is_some());
    s.advance_time(179);
    assert!(s.get(&key(&1)).is_some(), "refreshed at 80, then at 179");
    s.advance_time(278);
    assert!(s.get(&key(&1)).is_some());
    s.advance_time(378);
    assert_eq!(s.get(&key(&1)), None);
}

#[test]
fn writes_refresh_the_time_to_live() {
    let mut s = value_state(StateTtlConfig::new(TTL));
    s.advance_time(0);
    s.set(&key(&1), "a".into());
    s.advance_time(90);
    s.get_mut(&key(&1)).unwrap().push('b');
    s.advance_time(150);
    s.update(&key(&1), |v| v.map(|v| v + "c"));
    s.advance_time(249);
    assert_eq!(s.get(&key(&1)).map(String::as_str), Some("abc"));
    s.advance_time(250);
    assert_eq!(s.get(&key(&1)), None);
}

#[test]
fn an_expired_value_is_returned_until_cleaned_up_only_if_asked() {
    let config = StateTtlConfig::new(TTL).disable_cleanup_in_background();
    let mut never = value_state(config.clone());
    let mut returned = value_state(config.return_expired_if_not_cleaned_up());
    for s in [&mut never, &mut returned] {
        s.advance_time(0);
        s.set(&key(&1), "a".into());
        s.set(&key(&2), "b".into());
        s.advance_time(500);
    }
    assert_eq!(never.iter().count(), 0);
    assert_eq!(never.get(&key(&1)), None);
    assert_eq!(returned.iter().count(), 2);
    assert_eq!(returned.get(&key(&1)).map(String::as_str), Some("a"));
    assert_eq!(returned.take(&key(&2)).as_deref(), Some("b"));
    assert_eq!(never.take(&key(&2)), None);
    // Writing an expired value: absent to `update` unless returned.
    let mut seen = Vec::new();
    for s in [&mut never, &mut returned] {
        s.set(&key(&3), "c".into());
        s.advance_time(1_000);
        s.update(&key(&3), |old| {
            seen.push(old.clone());
            Some("d".into())
        });
        assert_eq!(s.get(&key(&3)).map(String::as_str), Some("d"));
    }
    assert_eq!(seen, [None, Some("c".to_string())]);
}

#[test]
fn get_or_insert_with_starts_over_from_an_expired_value() {
    let mut s = value_state(StateTtlConfig::new(TTL));
    s.advance_time(0);
    *s.get_or_insert_with(&key(&1), String::new) += "a";
    s.advance_time(50);
    *s.get_or_insert_with(&key(&1), String::new) += "b";
    s.advance_time(149);
    *s.get_or_insert_with(&key(&1), String::new) += "c";
    assert_eq!(s.get(&key(&1)).map(String::as_str), Some("abc"));
    s.advance_time(249);
    *s.get_or_insert_with(&key(&1), String::new) += "d";
    assert_eq!(s.get(&key(&1)).map(String::as_str), Some("d"));
}

#[test]
fn time_never_goes_back() {
    let mut s = value_state(StateTtlConfig::new(TTL));
    s.advance_time(1_000);
    s.set(&key(&1), "a".into());
    s.advance_time(2_000);
    s.advance_time(500);
    assert_eq!(s.get(&key(&1)), None);
}

#[test]
fn incremental_cleanup_removes_expired_keys_as_the_state_is_accessed() {
    let mut s = value_state(StateTtlConfig::new(TTL).cleanup_incrementally(20));
    s.advance_time(0);
    for k in 0..1_000u64 {
        s.set(&key(&k), k.to_string());
    }
    s.maintain().unwrap(); // every entry examined once, none expired
    assert_eq!(s.len(), 1_000);
    s.advance_time(50);
    for k in 1_000..1_100u64 {
        s.set(&key(&k), k.to_string());
    }
    s.advance_time(100); // the first 1,000 expired, the last 100 not
    s.maintain().unwrap();
    assert_eq!(s.len(), 100, "100 accesses let 2,000 entries be examined");
    assert!(s.iter().all(|(k, _)| *k >= 1_000));
    // No access, no cleanup.
    s.advance_time(10_000);
    s.maintain().unwrap();
    assert_eq!(s.len(), 100);
}

#[test]
fn incremental_cleanup_off_leaves_expired_keys_to_reads() {
    let mut s = value_state(StateTtlConfig::new(TTL).cleanup_incrementally(0));
    s.advance_time(0);
    for k in 0..100u64 {
        s.set(&key(&k), k.to_string());
    }
    s.advance_time(100);
    s.maintain().unwrap();
    assert_eq!(s.len(), 100);
}

fn snapshot_of<S: KeyedStateSet<u64>>(s: &mut S) -> KeyedSnapshotReader {
    let mut frozen = Vec::new();
    s.snapshot(&mut frozen);
    let bytes = encode_keyed_snapshot(&frozen, range()).unwrap();
    KeyedSnapshotReader::decode(&bytes).unwrap()
}

/// Restored with expired values visible: what the snapshot holds.
fn restored_keys(reader: &KeyedSnapshotReader) -> Vec<u64> {
    let mut s = value_state(
        StateTtlConfig::new(TTL)
            .return_expired_if_not_cleaned_up()
            .disable_cleanup_in_background(),
    );
    s.restore(reader).unwrap();
    let mut keys: Vec<u64> = s.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn full_snapshots_leave_expired_keys_out_only_if_asked() {
    let background_off = StateTtlConfig::new(TTL).disable_cleanup_in_background();
    for (config, expected) in [
        (background_off.clone(), (0..10).collect::<Vec<u64>>()),
        (background_off.cleanup_full_snapshot(), (5..10).collect()),
    ] {
        let mut s = value_state(config);
        s.advance_time(0);
        for k in 0..5u64 {
            s.set(&key(&k), "old".into());
        }
        s.advance_time(60);
        for k in 5..10u64 {
            s.set(&key(&k), "new".into());
        }
        s.advance_time(100);
        let reader = snapshot_of(&mut s);
        assert_eq!(restored_keys(&reader), expected);
        // The running state is unchanged.
        assert_eq!(s.len(), 10);
    }
}

#[test]
fn stamps_travel_with_the_values_through_a_snapshot() {
    let mut s = value_state(StateTtlConfig::new(TTL));
    s.advance_time(0);
    s.set(&key(&1), "a".into());
    let reader = snapshot_of(&mut s);
    let mut restored = value_state(StateTtlConfig::new(TTL));
    restored.restore(&reader).unwrap();
    restored.advance_time(99);
    assert!(restored.get(&key(&1)).is_some());
    restored.advance_time(100);
    assert_eq!(restored.get(&key(&1)), None);
}

#[test]
fn a_table_restores_only_as_the_kind_it_was_written_as() {
    let mut plain = ValueState::<u64, String>::new("v");
    plain.init(MP, range());
    plain.set(&key(&1), "a".into());
    let reader = snapshot_of(&mut plain);
    let mut with_ttl = value_state(StateTtlConfig::new(TTL));
    let err = with_ttl.restore(&reader).unwrap_err();
    assert!(matches!(err, StateError::KindMismatch { .. }), "{err}");
    assert!(err.to_string().contains("time-to-live"), "{err}");

    let mut s = value_state(StateTtlConfig::new(TTL));
    s.set(&key(&1), "a".into());
    let reader = snapshot_of(&mut s);
    let mut plain = ValueState::<u64, String>::new("v");
    plain.init(MP, range());
    assert!(matches!(
        plain.restore(&reader),
        Err(StateError::KindMismatch { .. })
    ));
}

#[test]
fn map_entries_expire_one_by_one_and_the_key_goes_with_the_last() {
    let mut s = TtlMapState::<u64, String, u32>::new("m", StateTtlConfig::new(TTL));
    s.init(MP, range());
    let k = key(&7);
    s.advance_time(0);
    assert_eq!(s.put(&k, "a".into(), 1), None);
    s.advance_time(50);
    s.put(&k, "b".into(), 2);
    s.advance_time(100);
    assert_eq!(s.get(&k, &"a".to_string()), None);
    assert_eq!(s.get(&k, &"b".to_string()), Some(&2));
    assert_eq!(s.entries(&k).count(), 1);
    // Putting over an expired value returns nothing: it was not there any more.
    s.advance_time(200);
    assert_eq!(s.put(&k, "b".into(), 3), None);
    assert_eq!(s.remove(&k, &"b".to_string()), Some(3));
    assert_eq!(s.num_keys(), 0);
}

#[test]
fn map_reads_refresh_with_update_on_read() {
    let mut s = TtlMapState::<u64, String, u32>::new(
        "m",
        StateTtlConfig::new(TTL).update_on_read_and_write(),
    );
    s.init(MP, range());
    let k = key(&7);
    s.advance_time(0);
    s.put(&k, "a".into(), 1);
    s.put(&k, "b".into(), 2);
    s.advance_time(90);
    assert!(s.contains(&k, &"a".to_string()));
    s.advance_time(150);
    assert_eq!(s.get(&k, &"a".to_string()), Some(&1));
    assert_eq!(s.get(&k, &"b".to_string()), None);
}

#[test]
fn map_cleanup_trims_maps_and_removes_emptied_keys() {
    let mut s = TtlMapState::<u64, u32, u32>::new(
        "m",
        StateTtlConfig::new(TTL).cleanup_incrementally(1_000),
    );
    s.init(MP, range());
    s.advance_time(0);
    for k in 0..20u64 {
        s.put(&key(&k), 0, 0);
    }
    s.advance_time(50);
    for k in 10..20u64 {
        s.put(&key(&k), 1, 1);
    }
    s.advance_time(100);
    s.maintain().unwrap();
    assert_eq!(s.num_keys(), 10);
    let mut left: Vec<(u64, u32)> = s
        .inner
        .table
        .iter()
        .flat_map(|(k, m)| m.keys().map(move |uk| (*k, *uk)))
        .collect();
    left.sort_unstable();
    assert_eq!(left, (10..20u64).map(|k| (k, 1)).collect::<Vec<_>>());
}

#[test]
fn list_elements_expire_one_by_one() {
    let mut s = TtlListState::<u64, u32>::new("l", StateTtlConfig::new(TTL));
    s.init(MP, range());
    let k = key(&3);
    s.advance_time(0);
    s.add(&k, 1);
    s.advance_time(60);
    s.add(&k, 2);
    s.advance_time(100);
    assert_eq!(s.get(&k).copied().collect::<Vec<_>>(), [2]);
    s.advance_time(160);
    assert_eq!(s.get(&k).count(), 0);
    assert_eq!(s.num_keys(), 0, "reading the emptied list removed the key");
    s.update(&k, vec![4, 5]);
    assert_eq!(s.take(&k), [4, 5]);
}

#[test]
fn list_reads_refresh_with_update_on_read_and_expired_elements_show_if_asked() {
    let mut refreshed =
        TtlListState::<u64, u32>::new("l", StateTtlConfig::new(TTL).update_on_read_and_write());
    let mut returned = TtlListState::<u64, u32>::new(
        "l",
        StateTtlConfig::new(TTL)
            .return_expired_if_not_cleaned_up()
            .disable_cleanup_in_background(),
    );
    for s in [&mut refreshed, &mut returned] {
        s.init(MP, range());
        s.advance_time(0);
        s.add(&key(&3), 1);
        s.advance_time(90);
        assert_eq!(s.get(&key(&3)).count(), 1);
        s.advance_time(150);
    }
    assert_eq!(refreshed.get(&key(&3)).count(), 1, "refreshed at 90");
    assert_eq!(returned.get(&key(&3)).copied().collect::<Vec<_>>(), [1]);
    assert_eq!(returned.iter().count(), 1);
}

#[test]
fn encoded_entries_are_judged_expired_by_their_stamps() {
    let mut bytes = Vec::new();
    TtlValueCodec::<String>::encode(&Stamped::new(1_000, "x".into()), &mut bytes).unwrap();
    assert_eq!(&bytes[..8], &1_000u64.to_le_bytes());
    assert!(!TtlValueCodec::<String>::all_expired(&bytes, 1_000));
    assert!(TtlValueCodec::<String>::all_expired(&bytes, 1_001));
    assert!(!TtlValueCodec::<String>::all_expired(&bytes[..5], u64::MAX));

    let list = vec![Stamped::new(10, 1u32), Stamped::new(20, 2)];
    let mut bytes = Vec::new();
    TtlListCodec::<u32>::encode(&list, &mut bytes).unwrap();
    assert!(!TtlListCodec::<u32>::all_expired(&bytes, 15));
    assert!(TtlListCodec::<u32>::all_expired(&bytes, 21));
    assert!(!TtlListCodec::<u32>::all_expired(&bytes[..3], 21));
    assert_eq!(expiry_limit(50, 100), 0);
    assert_eq!(expiry_limit(1_100, 100), 1_001);
}

#[cfg(feature = "rocksdb")]
mod rocksdb {
    use super::*;
    use crate::lsm::{LsmOptions, LsmStore};

    /// A RocksDB table with a TTL, spilling at every upkeep.
    fn lsm_value_state(
        dir: &tempfile::TempDir,
        config: StateTtlConfig,
    ) -> (TtlValueState<u64, String>, Arc<LsmStore>) {
        let mut s = value_state(config);
        let mut names = Vec::new();
        s.names(&mut names);
        let mut filters = Vec::new();
        s.compaction_filters(&mut filters);
        let options = LsmOptions {
            local_dir: dir.path().to_path_buf(),
            memory_bytes: 0,
        };
        let store = LsmStore::open(&options, "ttl/0", &names, &filters, None).unwrap();
        s.use_lsm(&store).unwrap();
        (s, store)
    }

    fn stored_entries(store: &LsmStore) -> usize {
        let family = store.family("v").unwrap();
        store
            .db()
            .iterator_cf(family, ::rocksdb::IteratorMode::Start)
            .count()
    }

    #[test]
    fn compactions_drop_expired_entries_from_rocksdb() {
        let dir = tempfile::tempdir().unwrap();
        for (config, left) in [
            (StateTtlConfig::new(TTL), 50),
            (
                StateTtlConfig::new(TTL).cleanup_in_rocksdb_compaction(false),
                100,
            ),
        ] {
            let (mut s, store) = lsm_value_state(&dir, config);
            s.advance_time(0);
            for k in 0..50u64 {
                s.set(&key(&k), "old".into());
            }
            s.maintain().unwrap();
            s.advance_time(60);
            for k in 50..100u64 {
                s.set(&key(&k), "new".into());
            }
            s.maintain().unwrap();
            s.advance_time(100);
            let family = store.family("v").unwrap();
            store.db().flush_cf(family).unwrap();
            store
                .db()
                .compact_range_cf(family, None::<&[u8]>, None::<&[u8]>);
            assert_eq!(stored_entries(&store), left);
            // Expired or dropped, reads agree.
            assert_eq!(s.get(&key(&1)), None);
            assert_eq!(s.get(&key(&51)).map(String::as_str), Some("new"));
        }
    }

    #[test]
    fn a_rocksdb_savepoint_leaves_expired_keys_out_if_asked() {
        let dir = tempfile::tempdir().unwrap();
        let config = StateTtlConfig::new(TTL)
            .disable_cleanup_in_background()
            .cleanup_full_snapshot();
        let (mut s, _store) = lsm_value_state(&dir, config);
        s.advance_time(0);
        for k in 0..5u64 {
            s.set(&key(&k), "old".into());
        }
        s.maintain().unwrap();
        s.advance_time(60);
        for k in 5..10u64 {
            s.set(&key(&k), "new".into());
        }
        s.advance_time(100);
        let reader = snapshot_of(&mut s);
        assert_eq!(restored_keys(&reader), (5..10).collect::<Vec<u64>>());
    }
}
