//! Incremental checkpoints through the runtime: shared files, reference counting across
//! retention, subsumption and restart (listing the directory), and full checkpoints still
//! available.

use crate::common::*;
use std::collections::BTreeSet;

/// Lists the job's shared directory and checks it holds exactly the files the retained
/// checkpoints reference: nothing leaked, nothing referenced deleted.
fn assert_shared_files_are_exactly_the_referenced_ones(dir: &std::path::Path) -> BTreeSet<String> {
    let root = checkpoint_root(dir);
    let storage = local_storage(&root);
    let on_disk: BTreeSet<String> = files_under(&root.join("demo/shared"))
        .into_iter()
        .map(|f| format!("shared/{f}"))
        .collect();
    let referenced = referenced_shared(&storage);
    assert!(
        !referenced.is_empty(),
        "incremental checkpoints reference shared files"
    );
    assert_eq!(
        on_disk, referenced,
        "shared files on disk vs referenced by retained checkpoints"
    );
    for id in storage.list_completed().unwrap() {
        storage
            .verify(id)
            .unwrap_or_else(|e| panic!("checkpoint {id}: {e}"));
    }
    referenced
}

#[test]
fn shared_files_are_reference_counted_across_retention_subsumption_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let retained = ["-D", "execution.checkpointing.num-retained=2"];
    let out = run_in(dir.path(), &demo_args("3s", &retained));
    assert!(out.status.success(), "{}", both(&out));
    let (completed, _) = checkpoint_counts(&text(&out.stdout));
    assert!(completed >= 5, "{}", both(&out));
    let before = assert_shared_files_are_exactly_the_referenced_ones(dir.path());
    // Only two checkpoints are retained, so files of evicted ones went.
    let root = checkpoint_root(dir.path());
    assert_eq!(local_storage(&root).list_completed().unwrap().len(), 2);

    // Resume with few events: most key groups stay unchanged, so the new checkpoints keep
    // referencing (and counting) files written before the restart.
    let args = [
        "demo",
        "--duration",
        "1500ms",
        "--checkpoint-interval",
        "200ms",
        "--users",
        "2000",
        "--rate",
        "5",
        "--resume",
        retained[0],
        retained[1],
    ];
    let out = run_in(dir.path(), &args);
    assert!(out.status.success(), "{}", both(&out));
    assert!(text(&out.stdout).contains("Resumed"), "{}", both(&out));
    let after = assert_shared_files_are_exactly_the_referenced_ones(dir.path());
    assert!(
        !before.is_disjoint(&after),
        "checkpoints after the restart still reference files written before it: {before:?} / {after:?}"
    );
}

#[test]
fn an_unchanged_state_is_checkpointed_without_rewriting_it() {
    // A bounded run: after the last event, the final checkpoints reference earlier files.
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &demo_args(
            "20s",
            &[
                "--events",
                "3000",
                "-D",
                "execution.checkpointing.num-retained=3",
            ],
        ),
    );
    assert!(out.status.success(), "{}", both(&out));
    let storage = local_storage(&checkpoint_root(dir.path()));
    let id = newest(&storage);
    let m = storage.read_metadata(id).unwrap();
    let keyed = m
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| s.handles.iter())
        .filter(|h| h.shared)
        .count();
    assert!(
        keyed > 0,
        "the keyed operator's state lives in shared files"
    );
    assert!(m.checkpoint.persisted_size() <= m.checkpoint.state_size());
}

#[test]
fn full_checkpoints_stay_available_and_restore() {
    let dir = tempfile::tempdir().unwrap();
    let full = ["-D", "execution.checkpointing.incremental=false"];
    let out = run_in(dir.path(), &demo_args("2s", &full));
    assert!(out.status.success(), "{}", both(&out));
    let root = checkpoint_root(dir.path());
    assert!(
        !root.join("demo/shared").exists(),
        "full checkpoints write no shared files"
    );
    let spend = final_spend(&local_storage(&root));
    assert!(!spend.is_empty());
    let mut args = demo_args("1s", &full);
    args.push("--resume");
    let out = run_in(dir.path(), &args);
    assert!(out.status.success(), "{}", both(&out));
    assert!(text(&out.stdout).contains("Resumed"), "{}", both(&out));
    // And an incremental run can resume from full checkpoints.
    let out = run_in(dir.path(), &demo_args("1s", &["--resume"]));
    assert!(out.status.success(), "{}", both(&out));
    assert!(root.join("demo/shared").exists());
}

#[test]
fn resuming_at_another_parallelism_splits_incremental_state_by_key_group() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &demo_args("2s", &["-p", "2"]));
    assert!(out.status.success(), "{}", both(&out));
    let out = run_in(dir.path(), &demo_args("2s", &["-p", "3", "--resume"]));
    assert!(out.status.success(), "{}", both(&out));
    let storage = local_storage(&checkpoint_root(dir.path()));
    assert!(!final_spend(&storage).is_empty());
}

#[test]
fn one_percent_of_keys_changed_writes_at_most_five_percent_of_a_full_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("bench");
    let out = run_in(
        dir.path(),
        &[
            "bench",
            "checkpoint",
            "--keys",
            "50000",
            "--changed",
            "0.01",
            "--dir",
            target.to_str().unwrap(),
            "--json",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", both(&out));
    let field = |name: &str| -> f64 {
        stdout
            .split(&format!("\"{name}\":"))
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in {stdout}"))
    };
    for name in [
        "sync_phase_p99_ms",
        "write_mb_per_s",
        "restore_mb_per_s",
        "checkpoint_duration_p50_ms",
    ] {
        field(name);
    }
    let full = field("full_checkpoint_bytes");
    let incremental = field("incremental_checkpoint_bytes");
    assert!(full > 0.0);
    assert!(incremental <= 0.05 * full, "{stdout}");
}
