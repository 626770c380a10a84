//! Checkpoints on a real S3-compatible server (moto, started by `scripts/test.sh`): a job
//! checkpoints to it and restores from it, and the storage API verifies what it reads there.

use crate::common::*;
use weir_core::{CheckpointId, HandleKind};
use weir_storage::{CheckpointLayout, CheckpointStorage};

#[test]
fn a_job_checkpoints_to_s3_and_resumes_from_it() {
    let (endpoint, bucket) = s3_server();
    let dir = tempfile::tempdir().unwrap();
    let location = format!("s3://{bucket}/{}", unique("demo"));
    let config = [
        "-D",
        &format!("execution.checkpointing.dir={location}"),
        "-D",
        &format!("s3.endpoint={endpoint}"),
        "-D",
        "s3.access-key=weir-test",
        "-D",
        "s3.secret-key=weir-test",
        "-D",
        "s3.region=us-east-1",
        "-D",
        "s3.path.style.access=true",
        "-D",
        "execution.checkpointing.num-retained=2",
    ]
    .map(str::to_string);
    let config: Vec<&str> = config.iter().map(String::as_str).collect();
    let out = run_in(dir.path(), &demo_args("2s", &config));
    assert!(out.status.success(), "{}", both(&out));
    let (completed, _) = checkpoint_counts(&text(&out.stdout));
    assert!(completed >= 3, "{}", both(&out));
    assert!(
        !dir.path().join("weir-data/checkpoints").exists(),
        "nothing went to local disk"
    );

    let storage = CheckpointStorage::open_location(&location, "demo", &s3_options(&endpoint))
        .expect("open S3 storage");
    let ids = storage.list_completed().unwrap();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let before = final_spend(&storage);
    assert!(!before.is_empty());
    let shared: std::collections::BTreeSet<String> = storage
        .shared_files()
        .unwrap()
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        shared,
        referenced_shared(&storage),
        "no leaked or missing shared objects"
    );

    let mut args = demo_args("2s", &config);
    args.push("--resume");
    let out = run_in(dir.path(), &args);
    assert!(out.status.success(), "{}", both(&out));
    assert!(text(&out.stdout).contains("Resumed"), "{}", both(&out));
    let after = final_spend(&storage);
    assert!(
        before
            .iter()
            .all(|(user, spend)| after.get(user).is_some_and(|a| a >= spend)),
        "the resumed job continued from the checkpointed sums"
    );
    assert!(
        storage.list_completed().unwrap()[0] > ids[1],
        "ids ascend across the resume"
    );

    // The tools read S3 too (settings from WEIR_S3_* variables).
    let env = [
        ("WEIR_S3_ENDPOINT", endpoint.as_str()),
        ("WEIR_S3_ACCESS_KEY", "weir-test"),
        ("WEIR_S3_SECRET_KEY", "weir-test"),
        ("WEIR_S3_PATH_STYLE_ACCESS", "true"),
    ];
    let verify = run_with(dir.path(), &["checkpoints", "verify", &location], &env);
    assert!(verify.status.success(), "{}", both(&verify));
    assert!(
        text(&verify.stdout).contains("2 checkpoint(s) intact, 0 damaged"),
        "{}",
        both(&verify)
    );
    let list = run_with(
        dir.path(),
        &["checkpoints", "list", &format!("{location}/demo")],
        &env,
    );
    assert!(list.status.success(), "{}", both(&list));
    assert!(text(&list.stdout).contains(" ok"), "{}", both(&list));
}

#[test]
fn state_files_on_s3_round_trip_and_damage_is_detected() {
    let (endpoint, bucket) = s3_server();
    let location = format!("s3://{bucket}/{}", unique("files"));
    let storage = CheckpointStorage::open_location(&location, "job", &s3_options(&endpoint))
        .expect("open S3 storage");
    let kind = HandleKind::Operator;
    let path = CheckpointLayout::state_file(CheckpointId(1), "op", 0, "op");
    let handle = storage
        .write_state_file(path, kind, b"position 42")
        .unwrap();
    assert_eq!(storage.read_state_file(&handle).unwrap(), b"position 42");
    assert_eq!(
        storage.list_checkpoint_dirs().unwrap(),
        vec![CheckpointId(1)]
    );
    assert!(storage.list_completed().unwrap().is_empty());

    // A file replaced behind our back (same name, other bytes) fails its checksum.
    storage
        .write_state_file(handle.path.clone(), kind, b"position 43")
        .unwrap();
    let err = storage.read_state_file(&handle).unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(err.contains(&handle.path), "{err}");

    storage.discard_checkpoint(CheckpointId(1)).unwrap();
    let err = storage.read_state_file(&handle).unwrap_err().to_string();
    assert!(err.contains("missing"), "{err}");
    assert!(storage.list_checkpoint_dirs().unwrap().is_empty());
}

#[test]
fn a_large_table_file_goes_to_s3_in_parts_and_comes_back_verified() {
    let (endpoint, bucket) = s3_server();
    let location = format!("s3://{bucket}/{}", unique("parts"));
    let storage = CheckpointStorage::open_location(&location, "job", &s3_options(&endpoint))
        .expect("open S3 storage");
    let local = tempfile::tempdir().unwrap();
    // Three parts of a multipart upload, the last one short.
    let mut x = 7u64;
    let bytes: Vec<u8> = (0..(8 << 20) * 2 + 4321)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect();
    let source = local.path().join("000042.sst");
    std::fs::write(&source, &bytes).unwrap();
    let kind = HandleKind::Keyed {
        key_groups: weir_core::KeyGroupRange::new(0, 128),
    };
    let handle = storage
        .write_shared_file_from("shared/1-table.sst".into(), kind, &source)
        .unwrap();
    assert_eq!(handle.size, bytes.len() as u64);
    let dest = local.path().join("fetched.sst");
    storage.fetch_state_file(&handle, &dest).unwrap();
    assert!(
        std::fs::read(&dest).unwrap() == bytes,
        "the fetched file differs"
    );

    // The same name with other bytes (a damaged copy) fails its checksum and leaves nothing.
    let mut other = bytes.clone();
    other[5 << 20] ^= 0xff;
    std::fs::write(&source, &other).unwrap();
    storage
        .write_shared_file_from(handle.path.clone(), kind, &source)
        .unwrap();
    let err = storage
        .fetch_state_file(&handle, &dest)
        .unwrap_err()
        .to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(!dest.exists());
}
