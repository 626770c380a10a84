//! Storage failures: a full disk or a denied permission in the asynchronous phase declines the
//! checkpoint and the job goes on; truncated, bit-flipped and missing files are detected on
//! restore, `--resume` falls back and says so, and with nothing usable it stops touching nothing.

use crate::common::*;
use std::path::Path;

/// Private state in files of their own, not inline in the metadata.
const NO_INLINE: [&str; 2] = ["-D", "execution.checkpointing.data-inline-threshold=0"];

fn injected_fault_declines_and_the_job_continues(fault: &str, expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = vec![
        "-D",
        "execution.checkpointing.tolerable-failed-checkpoints=100",
    ];
    extra.extend(NO_INLINE);
    let out = run_with(
        dir.path(),
        &demo_args("3s", &extra),
        &[(weir_storage::FAULTS_ENV, fault)],
    );
    let all = both(&out);
    assert!(out.status.success(), "{all}");
    let (completed, failed) = checkpoint_counts(&text(&out.stdout));
    assert!(failed >= 1, "the faulty writes declined checkpoints: {all}");
    assert!(completed >= 1, "later checkpoints completed: {all}");
    assert!(all.to_lowercase().contains(expect), "{all}");
    // No file of a declined checkpoint is left behind, and what is retained is intact.
    let root = checkpoint_root(dir.path());
    let storage = local_storage(&root);
    assert_eq!(
        storage.list_checkpoint_dirs().unwrap(),
        storage.list_completed().unwrap()
    );
    for id in storage.list_completed().unwrap() {
        storage.verify(id).unwrap_or_else(|e| panic!("{e}"));
    }
    let on_disk: std::collections::BTreeSet<String> = files_under(&root.join("demo/shared"))
        .into_iter()
        .map(|f| format!("shared/{f}"))
        .collect();
    assert_eq!(on_disk, referenced_shared(&storage));
}

#[test]
fn a_full_disk_during_the_async_phase_declines_the_checkpoint_and_the_job_continues() {
    injected_fault_declines_and_the_job_continues("put:shared/:no-space:3", "declin");
}

#[test]
fn a_denied_permission_during_the_async_phase_declines_the_checkpoint_and_the_job_continues() {
    injected_fault_declines_and_the_job_continues(
        "put:.op:permission-denied:2",
        "permission denied",
    );
}

/// A finished demo run with three retained checkpoints; returns the job's root.
fn three_checkpoints(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let out = run_in(dir, &demo_args("2s", extra));
    assert!(out.status.success(), "{}", both(&out));
    let root = checkpoint_root(dir);
    assert_eq!(local_storage(&root).list_completed().unwrap().len(), 3);
    root
}

fn private_keyed_file(root: &Path, id: weir_core::CheckpointId) -> std::path::PathBuf {
    root.join(format!("demo/chk-{id}/spend-per-user-0.keyed"))
}

#[test]
fn a_truncated_file_is_detected_and_resume_falls_back_to_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let root = three_checkpoints(dir.path(), &NO_INLINE);
    let storage = local_storage(&root);
    let newest = newest(&storage);
    let victim = private_keyed_file(&root, newest);
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();

    let verify = run_in(
        dir.path(),
        &["checkpoints", "verify", root.to_str().unwrap()],
    );
    assert_eq!(verify.status.code(), Some(1), "{}", both(&verify));
    let report = text(&verify.stdout);
    assert!(report.contains(&format!("checkpoint {newest}")), "{report}");
    assert!(report.contains("spend-per-user-0.keyed"), "{report}");
    assert!(report.contains("truncated"), "{report}");

    let mut args = demo_args("1s", &["--resume"]);
    args.push("-v");
    let out = run_in(dir.path(), &args);
    let all = both(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains(&format!("checkpoint {newest} is unusable")),
        "{all}"
    );
    assert!(all.contains("spend-per-user-0.keyed"), "{all}");
    assert!(all.contains("falling back"), "{all}");
}

#[test]
fn a_bit_flip_in_a_file_every_checkpoint_shares_leaves_nothing_usable_and_resume_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = three_checkpoints(dir.path(), &[]);
    let storage = local_storage(&root);
    // The oldest shared file still referenced is the base every retained checkpoint chains.
    let shared = referenced_shared(&storage);
    let in_all: Vec<String> = shared
        .iter()
        .filter(|path| {
            storage.list_completed().unwrap().iter().all(|id| {
                let m = storage.read_metadata(*id).unwrap();
                m.checkpoint
                    .subtask_states
                    .values()
                    .any(|s| s.handles.iter().any(|h| &h.path == *path))
            })
        })
        .cloned()
        .collect();
    let victim = root
        .join("demo")
        .join(in_all.first().expect("a file all checkpoints share"));
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&victim, &bytes).unwrap();
    let before = files_under(&root);

    let out = run_in(dir.path(), &demo_args("1s", &["--resume"]));
    let all = both(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("no usable checkpoint"), "{all}");
    assert!(all.contains("nothing was changed"), "{all}");
    assert!(all.contains("checksum mismatch"), "{all}");
    assert_eq!(
        files_under(&root),
        before,
        "a failed resume touched the checkpoints"
    );
}

#[test]
fn a_missing_shared_file_is_detected_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = three_checkpoints(dir.path(), &[]);
    let storage = local_storage(&root);
    let newest = newest(&storage);
    let m = storage.read_metadata(newest).unwrap();
    let lost = m
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| s.handles.iter())
        .find(|h| h.shared)
        .expect("a shared file")
        .path
        .clone();
    std::fs::remove_file(root.join("demo").join(&lost)).unwrap();
    let err = storage.verify(newest).unwrap_err().to_string();
    assert!(err.contains(&format!("checkpoint {newest}")), "{err}");
    assert!(err.contains(&lost), "{err}");
    assert!(err.contains("missing"), "{err}");
}
