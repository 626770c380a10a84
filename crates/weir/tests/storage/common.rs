//! Shared helpers: running the binary, the demo's arguments, and reading a job's checkpoints.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use weir_core::{CheckpointId, KeyGroupRange, OperatorId, S3Options};
use weir_state::{KeyedStateSet, ValueState, DEFAULT_MAX_PARALLELISM};
use weir_storage::CheckpointStorage;

pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("RUST_LOG");
    c.env_remove(weir_storage::FAULTS_ENV);
    c
}

/// Runs `weir` with `args` in `dir` (and extra environment) and waits for it.
pub fn run_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = weir();
    c.args(args).current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run weir")
}

pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    run_with(dir, args, &[])
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Both streams, for assertion messages.
pub fn both(out: &Output) -> String {
    format!("{}\n{}", text(&out.stdout), text(&out.stderr))
}

/// `weir demo` for `duration`, 2,000 users at 3,000 events/s per source, checkpoints every
/// 200 ms, plus `extra`.
pub fn demo_args<'a>(duration: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "demo",
        "--duration",
        duration,
        "--checkpoint-interval",
        "200ms",
        "--users",
        "2000",
        "--rate",
        "3000",
    ];
    args.extend_from_slice(extra);
    args
}

/// The number of completed and failed checkpoints from the demo's summary line.
pub fn checkpoint_counts(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Checkpoints: "))
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

pub fn local_storage(checkpoint_dir: &Path) -> CheckpointStorage {
    CheckpointStorage::open(checkpoint_dir, "demo").expect("open storage")
}

/// Every file under `root`, relative, sorted.
pub fn files_under(root: &Path) -> BTreeSet<String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// The shared files the completed checkpoints of `storage` reference.
pub fn referenced_shared(storage: &CheckpointStorage) -> BTreeSet<String> {
    let mut referenced = BTreeSet::new();
    for id in storage.list_completed().expect("list") {
        let m = storage.read_metadata(id).expect("metadata");
        for state in m.checkpoint.subtask_states.values() {
            for h in state.handles.iter().filter(|h| h.shared) {
                referenced.insert(h.path.clone());
            }
        }
    }
    referenced
}

/// The newest completed checkpoint.
pub fn newest(storage: &CheckpointStorage) -> CheckpointId {
    *storage
        .list_completed()
        .expect("list")
        .last()
        .expect("a checkpoint")
}

/// The demo's keyed state (`spend` per user) in the latest intact checkpoint.
pub fn final_spend(storage: &CheckpointStorage) -> std::collections::BTreeMap<u64, u64> {
    let latest = storage
        .find_latest()
        .expect("find")
        .metadata
        .expect("a checkpoint");
    let all = KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM);
    let reader = weir_runtime::restore::read_keyed_state(
        storage,
        &latest,
        OperatorId::from_uid("spend-per-user"),
        all,
    )
    .expect("read keyed state")
    .expect("keyed state");
    let mut spend = ValueState::<u64, u64>::new("spend");
    spend.init(DEFAULT_MAX_PARALLELISM, all);
    spend.restore(&reader).expect("restore");
    spend.iter().map(|(k, v)| (*k, *v)).collect()
}

/// The S3-compatible server `scripts/test.sh` started: endpoint and bucket. Fails (never
/// skips) without one, so a plain `cargo test` cannot pass silently without the server.
pub fn s3_server() -> (String, String) {
    match (
        std::env::var("WEIR_TEST_S3_ENDPOINT"),
        std::env::var("WEIR_TEST_S3_BUCKET"),
    ) {
        (Ok(endpoint), Ok(bucket)) => (endpoint, bucket),
        _ => panic!(
            "WEIR_TEST_S3_ENDPOINT and WEIR_TEST_S3_BUCKET are not set: the object-storage tests need the S3-compatible server that scripts/test.sh starts; run the tests with scripts/test.sh"
        ),
    }
}

pub fn s3_options(endpoint: &str) -> S3Options {
    S3Options {
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        access_key: Some("weir-test".into()),
        secret_key: Some("weir-test".into()),
        path_style_access: true,
        allow_http: Some(true),
    }
}

/// A prefix no other test uses.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

pub fn checkpoint_root(dir: &Path) -> PathBuf {
    dir.join("weir-data/checkpoints")
}
