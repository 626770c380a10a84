//! Savepoints end to end: stop with a savepoint, restore it at other parallelisms, move it,
//! and refuse (or skip, when allowed) state whose operator is gone.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator};
use weir_core::config::CheckpointConfig;
use weir_core::{KeyGroupRange, OperatorId, SavepointFormat};
use weir_runtime::restart::RestartStrategy;
use weir_runtime::{
    execute, execute_job, Drain, ExecutionConfig, JobError, JobHandle, StartMode, StopHandle,
};
use weir_state::{KeyedStateSet, ValueState};
use weir_storage::CheckpointStorage;

const EVENTS_PER_SPLIT: u64 = 40_000;

/// Counts per user over a bounded, rate-limited generator of two splits.
fn job(parallelism: u32, extra_operator: bool) -> weir_runtime::graph::JobGraph {
    let env = StreamEnv::new("counting");
    env.set_parallelism(parallelism);
    let events = env
        .source(
            "events",
            EventGenerator::new(9, 500)
                .with_limit(EVENTS_PER_SPLIT)
                .with_rate(40_000),
        )
        .parallelism(2);
    let counts = events.key_by(|e: &Event| e.user).count("counts");
    if extra_operator {
        counts
            .key_by(|(user, _): &(u64, u64)| *user)
            .count("recounts")
            .sink("out", CollectSink::default());
    } else {
        counts.sink("out", CollectSink::default());
    }
    env.build().unwrap()
}

fn exec(dir: &Path, start: StartMode) -> ExecutionConfig {
    ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.to_path_buf(),
            interval: Some(Duration::from_millis(100)),
            num_retained: 2,
            ..CheckpointConfig::default()
        },
        start,
        restart: RestartStrategy::None,
        ..ExecutionConfig::default()
    }
}

/// The final per-user counts in the job's latest checkpoint.
fn final_counts(checkpoint_dir: &Path) -> BTreeMap<u64, u64> {
    let storage = CheckpointStorage::open(checkpoint_dir, "counting").unwrap();
    let latest = storage
        .find_latest()
        .unwrap()
        .metadata
        .expect("a checkpoint");
    let operator = OperatorId::from_uid("counts");
    let restored = weir_runtime::restore::read_keyed_state(
        &storage,
        &latest,
        operator,
        KeyGroupRange::new(0, 128),
    )
    .expect("readable keyed state")
    .expect("keyed state of 'counts'");
    let mut counts = ValueState::<u64, u64>::new("count");
    counts.init(128, KeyGroupRange::new(0, 128));
    counts.restore(&restored).unwrap();
    counts.iter().map(|(k, v)| (*k, *v)).collect()
}

/// The final counts of the job run to its end without interruption (in `dir/reference`).
fn uninterrupted_counts(dir: &Path) -> BTreeMap<u64, u64> {
    let checkpoints = dir.join("reference");
    execute(
        &job(2, false),
        &exec(&checkpoints, StartMode::New),
        &StopHandle::new(),
        &mut |_| {},
    )
    .unwrap();
    final_counts(&checkpoints)
}

/// Runs the job at parallelism 2 and stops it with a savepoint after `after` (its small state
/// inline in the metadata, the default).
fn take_savepoint(dir: &Path, after: Duration) -> PathBuf {
    take_savepoint_inlining(
        dir,
        after,
        CheckpointConfig::default().data_inline_threshold,
    )
}

/// Like [`take_savepoint`], with every piece of state in a file of its own.
fn take_savepoint_in_files(dir: &Path, after: Duration) -> PathBuf {
    take_savepoint_inlining(dir, after, 0)
}

fn take_savepoint_inlining(dir: &Path, after: Duration, inline_threshold: usize) -> PathBuf {
    take_savepoint_configured(dir, after, |c| {
        c.checkpoint.data_inline_threshold = inline_threshold;
    })
}

fn take_savepoint_configured(
    dir: &Path,
    after: Duration,
    configure: impl FnOnce(&mut ExecutionConfig),
) -> PathBuf {
    take_savepoint_as(dir, after, SavepointFormat::Canonical, configure)
}

fn take_savepoint_as(
    dir: &Path,
    after: Duration,
    format: SavepointFormat,
    configure: impl FnOnce(&mut ExecutionConfig),
) -> PathBuf {
    let graph = job(2, false);
    let mut config = exec(&dir.join("ckpt-a"), StartMode::New);
    configure(&mut config);
    let handle = JobHandle::new(&graph, &config.checkpoint, StopHandle::new());
    let remote = handle.clone();
    let target = dir.join("savepoints");
    let waiter = std::thread::spawn(move || {
        std::thread::sleep(after);
        common::stop_with_savepoint_as(&remote, target, format, Drain::Keep)
    });
    execute_job(&graph, &config, &handle, &mut |_| {}).expect("job stops with its savepoint");
    waiter.join().unwrap()
}

fn run_to_end(
    checkpoint_dir: &Path,
    graph: &weir_runtime::graph::JobGraph,
    from: &Path,
    allow: bool,
) -> Result<(), JobError> {
    run_to_end_configured(checkpoint_dir, graph, from, |c| {
        c.allow_non_restored_state = allow;
    })
}

/// The final counts of the job started from `from` at `parallelism` with `backend`, run to
/// its end with its checkpoints in `checkpoint_dir`.
#[cfg(feature = "rocksdb")]
fn restored_counts(
    checkpoint_dir: &Path,
    parallelism: u32,
    from: &Path,
    backend: weir_core::config::StateBackendKind,
) -> BTreeMap<u64, u64> {
    run_to_end_configured(checkpoint_dir, &job(parallelism, false), from, |c| {
        c.state_backend.kind = backend;
    })
    .unwrap();
    final_counts(checkpoint_dir)
}

fn run_to_end_configured(
    checkpoint_dir: &Path,
    graph: &weir_runtime::graph::JobGraph,
    from: &Path,
    configure: impl FnOnce(&mut ExecutionConfig),
) -> Result<(), JobError> {
    let mut config = exec(checkpoint_dir, StartMode::New);
    config.from_savepoint = Some(from.to_path_buf());
    configure(&mut config);
    execute(graph, &config, &StopHandle::new(), &mut |_| {}).map(|_| ())
}

#[test]
fn a_savepoint_restored_at_parallelism_1_3_and_8_ends_in_the_state_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let expected = uninterrupted_counts(dir.path());
    assert_eq!(expected.values().sum::<u64>(), 2 * EVENTS_PER_SPLIT);

    let savepoint = take_savepoint(dir.path(), Duration::from_millis(700));
    assert!(savepoint.join("_metadata").is_file());
    for parallelism in [1, 3, 8] {
        let ckpt = dir.path().join(format!("restored-{parallelism}"));
        run_to_end(&ckpt, &job(parallelism, false), &savepoint, false).unwrap();
        assert_eq!(
            final_counts(&ckpt),
            expected,
            "restored at parallelism {parallelism}"
        );
    }
}

/// Savepoints have one format whatever the backend: a savepoint of the heap backend restores
/// into RocksDB at parallelism 3, and one of RocksDB into the heap at parallelism 1, each
/// ending in the state of an uninterrupted run.
#[cfg(feature = "rocksdb")]
#[test]
fn a_savepoint_of_either_state_backend_restores_into_the_other_at_another_parallelism() {
    use weir_core::config::StateBackendKind::{HashMap, RocksDb};
    let dir = tempfile::tempdir().unwrap();
    let expected = uninterrupted_counts(dir.path());

    for (from, into, parallelism) in [(HashMap, RocksDb, 3), (RocksDb, HashMap, 1)] {
        let case = dir.path().join(format!("{from:?}-into-{into:?}"));
        let savepoint = take_savepoint_configured(&case, Duration::from_millis(600), |c| {
            c.state_backend.kind = from;
        });
        assert_eq!(
            restored_counts(&case.join("restored"), parallelism, &savepoint, into),
            expected,
            "a savepoint of {from:?} restored into {into:?} at parallelism {parallelism}"
        );
    }
}

/// A native savepoint of RocksDB state (Flink's `--type native`) holds the databases' table
/// files, not a canonical encoding of every key; it leaves no file behind in the job's
/// checkpoint directory, and restores after being moved: into RocksDB at the same parallelism
/// (opened in place) and at another, and into the heap.
#[cfg(feature = "rocksdb")]
#[test]
fn a_native_savepoint_holds_table_files_and_restores_moved_in_place_rescaled_and_into_the_heap() {
    use weir_core::config::StateBackendKind::{HashMap, RocksDb};
    use weir_storage::CheckpointLayout;
    let dir = tempfile::tempdir().unwrap();
    let expected = uninterrupted_counts(dir.path());
    let taken = take_savepoint_as(
        dir.path(),
        Duration::from_millis(600),
        SavepointFormat::Native,
        |c| c.state_backend.kind = RocksDb,
    );
    let names: Vec<String> = std::fs::read_dir(&taken)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let tables = names
        .iter()
        .filter(|n| CheckpointLayout::is_table_file(n))
        .count();
    assert!(
        tables >= 2,
        "a table file per keyed subtask at least: {names:?}"
    );
    // Each keyed subtask's RocksDB manifest (small: inline in the metadata) names its files.
    let (_, metadata) = weir_storage::savepoint::open_savepoint(&taken).unwrap();
    let manifests = metadata
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| &s.handles)
        .filter(|h| h.path.ends_with(".rocksdb"))
        .count();
    assert_eq!(manifests, 2, "a RocksDB manifest per keyed subtask");
    // The savepoint's table files were its own: none stays in the job's shared directory, and
    // its checkpoint's directory is gone.
    let id: u64 = taken.file_name().unwrap().to_string_lossy()["savepoint-".len()..]
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let job_dir = dir.path().join("ckpt-a").join("counting");
    let shared: Vec<String> = std::fs::read_dir(job_dir.join("shared"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !shared.iter().any(|n| n.contains(&format!("-{id}-"))),
        "shared files of savepoint {id}: {shared:?}"
    );
    assert!(!job_dir
        .join(CheckpointLayout::checkpoint_dir_name(
            weir_core::CheckpointId(id)
        ))
        .exists());

    let savepoint = dir.path().join("moved-savepoint");
    std::fs::rename(&taken, &savepoint).unwrap();
    for (into, parallelism) in [(RocksDb, 2), (RocksDb, 3), (HashMap, 1)] {
        let ckpt = dir.path().join(format!("restored-{into:?}-{parallelism}"));
        assert_eq!(
            restored_counts(&ckpt, parallelism, &savepoint, into),
            expected,
            "a native savepoint restored into {into:?} at parallelism {parallelism}"
        );
    }
}

/// A retained checkpoint restores into the other backend at another parallelism too: an
/// incremental RocksDB checkpoint (table files and a RocksDB manifest) into the heap at
/// parallelism 3, and an incremental heap checkpoint into RocksDB at parallelism 1.
#[cfg(feature = "rocksdb")]
#[test]
fn a_retained_checkpoint_of_either_state_backend_restores_into_the_other_at_another_parallelism() {
    use weir_core::config::StateBackendKind::{HashMap, RocksDb};
    use weir_storage::CheckpointLayout;
    let dir = tempfile::tempdir().unwrap();
    let expected = uninterrupted_counts(dir.path());

    for (from, into, parallelism) in [(RocksDb, HashMap, 3), (HashMap, RocksDb, 1)] {
        let case = dir.path().join(format!("{from:?}-into-{into:?}"));
        let first = case.join("first");
        let mut config = exec(&first, StartMode::New);
        config.state_backend.kind = from;
        execute(&job(2, false), &config, &StopHandle::new(), &mut |_| {}).unwrap();
        let latest = CheckpointStorage::open(&first, "counting")
            .unwrap()
            .find_latest()
            .unwrap()
            .metadata
            .expect("a checkpoint")
            .checkpoint;
        let rocksdb_manifests = latest
            .subtask_states
            .values()
            .flat_map(|s| &s.handles)
            .filter(|h| h.path.ends_with(".rocksdb"))
            .count();
        assert_eq!(rocksdb_manifests > 0, from == RocksDb, "{from:?}");
        let latest = latest.id;
        let retained = first
            .join("counting")
            .join(CheckpointLayout::checkpoint_dir_name(latest));
        assert_eq!(
            restored_counts(&case.join("restored"), parallelism, &retained, into),
            expected,
            "a retained checkpoint of {from:?} restored into {into:?} at parallelism {parallelism}"
        );
    }
}

#[test]
fn a_savepoint_copied_elsewhere_restores_after_the_original_is_deleted_and_outlives_checkpoint_rotation(
) {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = take_savepoint_in_files(dir.path(), Duration::from_millis(500));
    let files: Vec<_> = std::fs::read_dir(&savepoint)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(files.len() > 2, "{files:?}");
    // The job's own checkpoints rotated (num-retained 2) while the savepoint stayed whole.
    let checkpoints = CheckpointStorage::open(&dir.path().join("ckpt-a"), "counting")
        .unwrap()
        .list_completed()
        .unwrap();
    assert!(checkpoints.len() <= 2, "{checkpoints:?}");
    let still: Vec<_> = std::fs::read_dir(&savepoint)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(still.len(), files.len());

    let moved = dir.path().join("elsewhere").join("sp");
    std::fs::create_dir_all(&moved).unwrap();
    for f in &files {
        std::fs::copy(savepoint.join(f), moved.join(f)).unwrap();
    }
    std::fs::remove_dir_all(&savepoint).unwrap();
    let ckpt = dir.path().join("from-copy");
    run_to_end(&ckpt, &job(2, false), &moved, false).unwrap();
    assert_eq!(
        final_counts(&ckpt).values().sum::<u64>(),
        2 * EVENTS_PER_SPLIT
    );
}

#[test]
fn a_damaged_savepoint_stops_the_start_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = take_savepoint_in_files(dir.path(), Duration::from_millis(400));
    // The largest state file: keyed state of the counts.
    let (file, len) = std::fs::read_dir(&savepoint)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .filter(|(name, _)| name != "_metadata")
        .max_by_key(|(_, len)| *len)
        .unwrap();
    let path = savepoint.join(&file);
    let original = std::fs::read(&path).unwrap();

    // A flipped bit: found when the restore reads the file.
    let mut flipped = original.clone();
    flipped[len as usize / 2] ^= 0x10;
    std::fs::write(&path, &flipped).unwrap();
    let err = run_to_end(&dir.path().join("b"), &job(2, false), &savepoint, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&file) && err.contains("checksum"), "{err}");

    // Cut short: found before anything starts.
    std::fs::write(&path, &original[..original.len() - 10]).unwrap();
    let err = run_to_end(&dir.path().join("c"), &job(2, false), &savepoint, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&file) && err.contains("truncated"), "{err}");

    // Intact again: it restores.
    std::fs::write(&path, &original).unwrap();
    run_to_end(&dir.path().join("d"), &job(2, false), &savepoint, false).unwrap();
}

#[test]
fn state_of_a_missing_uid_is_refused_with_the_uids_listed_unless_skipping_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    // Take the savepoint from a job that has one more keyed operator than the one restored.
    let graph = job(2, true);
    let config = exec(&dir.path().join("ckpt-a"), StartMode::New);
    let handle = JobHandle::new(&graph, &config.checkpoint, StopHandle::new());
    let remote = handle.clone();
    let target = dir.path().join("savepoints");
    let waiter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        common::stop_with_savepoint(&remote, target, Drain::Keep)
    });
    execute_job(&graph, &config, &handle, &mut |_| {}).unwrap();
    let savepoint = waiter.join().unwrap();

    let refused = run_to_end(&dir.path().join("b"), &job(2, false), &savepoint, false).unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("recounts") && message.contains("--allow-non-restored-state"),
        "{message}"
    );
    assert_eq!(refused.exit_code(), 2);
    run_to_end(&dir.path().join("c"), &job(2, false), &savepoint, true).unwrap();
}

#[test]
fn a_claimed_savepoint_is_deleted_once_a_newer_checkpoint_completed_and_an_unclaimed_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = take_savepoint(dir.path(), Duration::from_millis(400));
    run_to_end(
        &dir.path().join("no-claim"),
        &job(2, false),
        &savepoint,
        false,
    )
    .unwrap();
    assert!(
        savepoint.join("_metadata").is_file(),
        "no-claim must never delete the savepoint"
    );

    let mut config = exec(&dir.path().join("claim"), StartMode::New);
    config.from_savepoint = Some(savepoint.clone());
    config.claim_mode = weir_runtime::ClaimMode::Claim;
    execute(&job(2, false), &config, &StopHandle::new(), &mut |_| {}).unwrap();
    assert!(
        !savepoint.exists(),
        "a claimed savepoint outlived the checkpoints after it"
    );
}

#[test]
fn restoring_with_another_max_parallelism_is_refused_because_it_would_move_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = take_savepoint(dir.path(), Duration::from_millis(300));
    let env = StreamEnv::new("counting");
    env.set_max_parallelism(64);
    env.source("events", EventGenerator::new(9, 500).with_limit(10))
        .key_by(|e: &Event| e.user)
        .count("counts")
        .sink("out", CollectSink::default());
    let err = run_to_end(
        &dir.path().join("b"),
        &env.build().unwrap(),
        &savepoint,
        false,
    )
    .unwrap_err();
    assert!(err.to_string().contains("max-parallelism"), "{err}");
    assert_eq!(err.exit_code(), 2);
}
