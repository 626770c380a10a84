//! Shared helpers: running the binary, reading a job's checkpoints and final keyed state.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use weir_core::{CheckpointId, HandleKind, KeyGroupRange, OperatorId};
use weir_state::{KeyedSnapshotReader, KeyedStateSet, ValueState, DEFAULT_MAX_PARALLELISM};
use weir_storage::CheckpointStorage;

pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("RUST_LOG");
    c
}

/// Runs `weir` with `args` in `dir` and waits for it.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    weir()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run weir")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Ids of the completed checkpoints (those with `_metadata`) of job `job`, ascending.
pub fn completed_checkpoints(checkpoint_dir: &Path, job: &str) -> Vec<CheckpointId> {
    CheckpointStorage::open(checkpoint_dir, job)
        .expect("open storage")
        .list_completed()
        .expect("list")
}

/// The demo's keyed state (`spend` per user) in the job's latest intact checkpoint.
pub fn final_spend(checkpoint_dir: &Path) -> BTreeMap<u64, u64> {
    let storage = CheckpointStorage::open(checkpoint_dir, "demo").expect("open storage");
    let latest = storage
        .find_latest()
        .expect("find")
        .metadata
        .expect("a checkpoint");
    let operator = OperatorId::from_uid("spend-per-user");
    let mut readers = Vec::new();
    for (subtask, state) in &latest.checkpoint.subtask_states {
        if subtask.operator != operator {
            continue;
        }
        for handle in &state.handles {
            if let HandleKind::Keyed { .. } = handle.kind {
                let bytes = storage.read_state_file(handle).expect("read state");
                readers.push(KeyedSnapshotReader::decode(&bytes).expect("decode"));
            }
        }
    }
    let reader = KeyedSnapshotReader::merge(readers).expect("merge");
    let mut spend = ValueState::<u64, u64>::new("spend");
    spend.init(
        DEFAULT_MAX_PARALLELISM,
        KeyGroupRange::new(0, DEFAULT_MAX_PARALLELISM),
    );
    spend.restore(&reader).expect("restore");
    spend.iter().map(|(k, v)| (*k, *v)).collect()
}

/// Parses the demo's output lines (`user<TAB>total`) from every part file.
pub fn milestones(output_dir: &Path) -> Vec<(u64, u64)> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(output_dir).expect("output dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read part");
        for line in text.lines() {
            let (user, total) = line.split_once('\t').expect("user<TAB>total");
            lines.push((user.parse().expect("user"), total.parse().expect("total")));
        }
    }
    lines
}

/// A pseudo-random number from the clock: test runs differ, no extra dependency.
pub fn random_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos() as u64;
    (nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % n.max(1)
}
