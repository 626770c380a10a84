//! Checkpoint storage on a local directory, through the real file system: durable round trips,
//! damage detected by checksum and named by checkpoint and file, fallback past damaged
//! checkpoints, and clean-up of what never completed.

use std::collections::BTreeMap;
use weir_checkpoint::CompletedCheckpoint;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, JobId, OperatorId, StateHandle, SubtaskId,
    SubtaskState,
};
use weir_state::OperatorStateSnapshot;
use weir_storage::{CheckpointLayout, CheckpointMetadata, CheckpointStorage};

fn storage(dir: &tempfile::TempDir) -> CheckpointStorage {
    CheckpointStorage::open(dir.path(), "job").unwrap()
}

/// Writes checkpoint `id` with one operator-state file and, optionally, a shared file.
fn checkpoint(storage: &CheckpointStorage, id: u64, shared: Option<&StateHandle>) -> StateHandle {
    let state = OperatorStateSnapshot {
        list: vec![("position".into(), vec![id.to_le_bytes().to_vec()])],
        union: vec![],
    };
    let path = CheckpointLayout::state_file(CheckpointId(id), "source", 0, "op");
    let handle = storage
        .write_state_file(path, HandleKind::Operator, &state.encode())
        .unwrap();
    let mut handles = vec![handle.clone()];
    handles.extend(shared.cloned());
    storage
        .write_metadata(&source_metadata(CheckpointId(id), handles))
        .unwrap();
    handle
}

/// The metadata of checkpoint `id` whose one subtask, `source` 0, holds `handles`.
fn source_metadata(id: CheckpointId, handles: Vec<StateHandle>) -> CheckpointMetadata {
    let mut states = BTreeMap::new();
    states.insert(
        SubtaskId::new(OperatorId::from_uid("source"), 0),
        SubtaskState::from_handles(handles),
    );
    CheckpointMetadata {
        job_name: "job".into(),
        max_parallelism: 128,
        operators: vec![],
        checkpoint: CompletedCheckpoint {
            job: JobId(1),
            id,
            kind: CheckpointKind::Checkpoint,
            trigger_timestamp_ms: id.0,
            completion_timestamp_ms: id.0,
            subtask_states: states,
        },
    }
}

fn shared_file(storage: &CheckpointStorage, name: &str) -> StateHandle {
    // A valid (empty) keyed data file: magic, version, checksum of both.
    let mut bytes = b"WEIRKDAT".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    let checksum = xxhash_rust::xxh3::xxh3_64(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    storage
        .write_shared_file(
            format!("shared/{name}"),
            HandleKind::Keyed {
                key_groups: weir_core::KeyGroupRange::new(0, 128),
            },
            vec![bytes],
        )
        .unwrap()
}

#[test]
fn a_state_file_round_trips_and_a_bit_flip_or_truncation_is_named_by_checkpoint_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    let handle = checkpoint(&s, 7, None);
    assert!(s.verify(CheckpointId(7)).is_ok());
    let file = dir.path().join("job").join(&handle.path);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[3] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let err = s.verify(CheckpointId(7)).unwrap_err().to_string();
    assert!(err.starts_with("checkpoint 7 in "), "{err}");
    assert!(err.contains("chk-7/source-0.op"), "{err}");
    assert!(err.contains("checksum mismatch"), "{err}");
    std::fs::write(&file, &bytes[..4]).unwrap();
    let err = s.verify(CheckpointId(7)).unwrap_err().to_string();
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn a_torn_metadata_file_is_detected_and_the_previous_checkpoint_is_found_instead() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    checkpoint(&s, 1, None);
    checkpoint(&s, 2, None);
    let meta = dir.path().join("job/chk-2/_metadata");
    let bytes = std::fs::read(&meta).unwrap();
    std::fs::write(&meta, &bytes[..bytes.len() - 3]).unwrap();
    let latest = s.find_latest().unwrap();
    assert_eq!(latest.metadata.unwrap().checkpoint.id, CheckpointId(1));
    let (id, err) = &latest.skipped[0];
    assert_eq!(*id, CheckpointId(2));
    let err = err.to_string();
    assert!(
        err.contains("checkpoint 2") && err.contains("chk-2/_metadata"),
        "{err}"
    );
}

#[test]
fn starting_up_deletes_incomplete_checkpoints_and_unreferenced_shared_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    let kept = shared_file(&s, "kept.kgs");
    let orphan = shared_file(&s, "orphan.kgs");
    checkpoint(&s, 1, Some(&kept));
    // Checkpoint 2 never completed: a state file, no metadata.
    s.write_state_file(
        CheckpointLayout::state_file(CheckpointId(2), "source", 0, "op"),
        HandleKind::Operator,
        b"x",
    )
    .unwrap();
    assert_eq!(s.list_checkpoint_dirs().unwrap().len(), 2);
    assert_eq!(s.discard_incomplete().unwrap(), vec![CheckpointId(2)]);
    assert_eq!(s.list_checkpoint_dirs().unwrap(), vec![CheckpointId(1)]);
    let shared: Vec<String> = s
        .shared_files()
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(shared, vec![kept.path.clone()]);
    assert!(!dir.path().join("job").join(&orphan.path).exists());
    assert!(s.verify(CheckpointId(1)).is_ok());
    assert_eq!(s.max_checkpoint_id().unwrap(), Some(CheckpointId(1)));
}

#[test]
fn discarding_everything_leaves_an_empty_job_directory() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    let shared = shared_file(&s, "a.kgs");
    checkpoint(&s, 1, Some(&shared));
    checkpoint(&s, 2, Some(&shared));
    s.discard_all().unwrap();
    assert!(s.list_checkpoint_dirs().unwrap().is_empty());
    assert!(s.shared_files().unwrap().is_empty());
    let left: Vec<_> = std::fs::read_dir(dir.path().join("job")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_path_that_is_a_file_is_refused_as_a_checkpoint_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = CheckpointStorage::open(&file, "job")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn private_state_up_to_the_threshold_is_kept_inline_and_round_trips_through_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    let state = OperatorStateSnapshot {
        list: vec![("position".into(), vec![42u64.to_le_bytes().to_vec()])],
        union: vec![],
    };
    let bytes = state.encode();
    let id = CheckpointId(9);
    let name = |what: &str| CheckpointLayout::state_file(id, "source", 0, what);
    let at_threshold = bytes.len();
    let inline = s
        .write_or_inline_state(
            name("op"),
            HandleKind::Operator,
            bytes.clone(),
            at_threshold,
        )
        .unwrap();
    assert_eq!(inline.inline.as_deref(), Some(&bytes[..]));
    assert!(!inline.shared);
    let file = s
        .write_or_inline_state(
            name("op2"),
            HandleKind::Operator,
            bytes.clone(),
            at_threshold - 1,
        )
        .unwrap();
    assert!(file.is_file());
    let chk = dir.path().join(format!("job/chk-{id}"));
    let on_disk = |d: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        on_disk(&chk),
        vec!["source-0.op2"],
        "no file for inline state"
    );

    let metadata = source_metadata(id, vec![inline.clone(), file]);
    s.write_metadata(&metadata).unwrap();
    let read = s.verify(id).unwrap();
    assert_eq!(read, metadata);
    let handle = &read
        .checkpoint
        .subtask_states
        .values()
        .next()
        .unwrap()
        .handles[0];
    assert_eq!(s.read_state_file(handle).unwrap(), bytes);
    assert!(s.display_state(handle).contains("inline in _metadata"));

    // A savepoint keeps inline state inline: its directory holds the one file and `_metadata`.
    let target = tempfile::tempdir().unwrap();
    let written = weir_storage::savepoint::write_savepoint(&s, &read, target.path()).unwrap();
    assert_eq!(
        on_disk(&written.path),
        vec!["_metadata", "chk-9__source-0.op2"]
    );
    let (savepoint, restored) = weir_storage::savepoint::verify_savepoint(&written.path).unwrap();
    let handles = &restored
        .checkpoint
        .subtask_states
        .values()
        .next()
        .unwrap()
        .handles;
    assert_eq!(savepoint.read_state_file(&handles[0]).unwrap(), bytes);
    assert_eq!(handles[0].path, "chk-9__source-0.op");
}

#[test]
fn a_claimed_checkpoint_is_deleted_without_the_shared_files_its_neighbours_still_reference() {
    // ck1 holds retained checkpoints 4 and 5 of a killed run; both reference `shared/a`, only
    // 5 references `shared/b`. A new job claims chk-5.
    let ck1 = tempfile::tempdir().unwrap();
    let old = storage(&ck1);
    let a = shared_file(&old, "source-0-4-1.kgs");
    let b = shared_file(&old, "source-0-5-2.kgs");
    checkpoint(&old, 4, Some(&a));
    let state = checkpoint(&old, 5, Some(&a));
    let mut five = old.read_metadata(CheckpointId(5)).unwrap();
    five.checkpoint
        .subtask_states
        .values_mut()
        .for_each(|s| *s = SubtaskState::from_handles(vec![state.clone(), a.clone(), b.clone()]));
    old.write_metadata(&five).unwrap();

    let ck2 = tempfile::tempdir().unwrap();
    let new = storage(&ck2);
    let claimed = ck1.path().join("job").join("chk-5");
    weir_storage::claim::record(
        &new,
        &weir_storage::claim::Claim {
            snapshot: claimed.clone(),
            first_checkpoint: CheckpointId(6),
        },
    )
    .unwrap();
    // A checkpoint below the claiming run's first one settles nothing.
    assert_eq!(
        weir_storage::claim::settle(&new, CheckpointId(5)).unwrap(),
        None
    );
    assert!(claimed.exists());
    assert!(weir_storage::claim::pending(&new).unwrap().is_some());

    // The claiming run's first completed checkpoint (in this run or, after a kill, seen by
    // the next run's start) settles it: chk-5 and `shared/b` go, chk-4 still verifies.
    assert_eq!(
        weir_storage::claim::settle(&new, CheckpointId(6)).unwrap(),
        Some(claimed.clone())
    );
    assert!(!claimed.exists());
    assert!(!ck1.path().join("job").join(&b.path).exists());
    assert!(ck1.path().join("job").join(&a.path).exists());
    old.verify(CheckpointId(4)).unwrap();
    assert_eq!(weir_storage::claim::pending(&new).unwrap(), None);
    // A deletion cut short after `_metadata` went: the rest of the directory goes too.
    let torn = ck1.path().join("job").join("chk-4");
    std::fs::remove_file(torn.join("_metadata")).unwrap();
    weir_storage::claim::record(
        &new,
        &weir_storage::claim::Claim {
            snapshot: torn.clone(),
            first_checkpoint: CheckpointId(6),
        },
    )
    .unwrap();
    assert_eq!(
        weir_storage::claim::settle(&new, CheckpointId(6)).unwrap(),
        Some(torn.clone())
    );
    assert!(!torn.exists());
    // Settled once: a later checkpoint finds nothing to do.
    assert_eq!(
        weir_storage::claim::settle(&new, CheckpointId(7)).unwrap(),
        None
    );
}

#[test]
fn a_damaged_claim_is_an_error_naming_it_and_starting_over_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    std::fs::write(dir.path().join("job").join("_claimed"), b"garbage").unwrap();
    let e = weir_storage::claim::settle(&s, CheckpointId(9)).unwrap_err();
    assert!(e.to_string().contains("_claimed"), "{e}");
    // Starting over (--fresh) drops it.
    s.discard_all().unwrap();
    assert_eq!(weir_storage::claim::pending(&s).unwrap(), None);
}

/// `len` bytes that differ from part to part (so that a part written twice or out of order
/// shows).
fn varied_bytes(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_large_file_is_written_and_fetched_a_part_at_a_time_and_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir);
    let local = tempfile::tempdir().unwrap();
    let kind = HandleKind::Keyed {
        key_groups: weir_core::KeyGroupRange::new(0, 128),
    };
    // Several parts and a short last one; and a file small enough for one put.
    for (name, len) in [("big.sst", (8 << 20) * 2 + 12_345), ("small.sst", 1000)] {
        let bytes = varied_bytes(len);
        let source = local.path().join(name);
        std::fs::write(&source, &bytes).unwrap();
        let handle = s
            .write_shared_file_from(format!("shared/{name}"), kind, &source)
            .unwrap();
        assert_eq!(handle.size, len as u64);
        assert_eq!(handle.checksum, crc32c::crc32c(&bytes));
        assert!(handle.shared);
        let stored = dir.path().join("job").join(&handle.path);
        assert_eq!(std::fs::read(&stored).unwrap(), bytes, "{name} as stored");

        let dest = local.path().join(format!("fetched-{name}"));
        s.fetch_state_file(&handle, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), bytes, "{name} as fetched");

        let mut damaged = bytes.clone();
        damaged[len / 2] ^= 1;
        std::fs::write(&stored, &damaged).unwrap();
        let err = s.fetch_state_file(&handle, &dest).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        assert!(err.contains(&handle.path), "{err}");
        assert!(!dest.exists(), "a damaged file is not left behind");
        std::fs::write(&stored, &bytes[..len - 1]).unwrap();
        let err = s.fetch_state_file(&handle, &dest).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        std::fs::remove_file(&stored).unwrap();
        let err = s.fetch_state_file(&handle, &dest).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }
    let err = s
        .write_shared_file_from("shared/none.sst".into(), kind, &local.path().join("none"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("none"), "{err}");
}
