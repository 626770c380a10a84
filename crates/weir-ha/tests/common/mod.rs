//! Shared helpers of the ZooKeeper tests: the real server `scripts/test.sh` starts, a fresh
//! znode root per test, leaders, and checkpoints whose metadata is in real checkpoint storage.
#![allow(dead_code)]

pub mod partition;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use weir_checkpoint::CompletedCheckpoint;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, JobId, OperatorId, StateHandle, SubtaskId,
    SubtaskState,
};
use weir_ha::{FencingToken, JobZnodes, LeaderElection, ZooKeeper};
use weir_storage::{CheckpointMetadata, CheckpointStorage};

/// How long one ZooKeeper call may take in the tests.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// Long enough for anything that should happen "at once" on a loaded machine.
pub const PROMPTLY: Duration = Duration::from_secs(10);

const HOW_TO_START: &str = "run scripts/test.sh, or start one yourself: \
     export WEIR_ZK_DIR=$(mktemp -d); export WEIR_TEST_ZK=$(scripts/zookeeper.sh start)";

/// The address of the ZooKeeper the tests run against. Fails (never skips) without one.
pub fn zookeeper_address() -> String {
    match std::env::var("WEIR_TEST_ZK") {
        Ok(address) if !address.is_empty() => address,
        _ => panic!("WEIR_TEST_ZK is not set: these tests need a real ZooKeeper; {HOW_TO_START}"),
    }
}

/// A new session (one "job manager") with the given session timeout.
pub fn connect(session_timeout: Duration) -> ZooKeeper {
    connect_via(&zookeeper_address(), session_timeout)
}

/// A new session through `address` (a [`partition::Partition`]'s relay, for instance).
pub fn connect_via(address: &str, session_timeout: Duration) -> ZooKeeper {
    ZooKeeper::connect(address, session_timeout, OPERATION_TIMEOUT)
        .unwrap_or_else(|e| panic!("cannot reach the test ZooKeeper at {address}: {e}"))
}

/// The znodes of a job under a root no other test uses.
pub fn job_znodes(test: &str) -> JobZnodes {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let root = format!("/weir-test/{test}-{}-{n}-{nanos}", std::process::id());
    JobZnodes::new(&root, JobId::from_name(test))
}

/// Starts contending as `name` and waits until leading.
pub fn leader(zk: &ZooKeeper, znodes: &JobZnodes, name: &str) -> (LeaderElection, FencingToken) {
    let election = LeaderElection::start(zk, znodes, name);
    let token = election
        .await_leadership(PROMPTLY)
        .unwrap_or_else(|| panic!("{name} did not become leader"));
    (election, token)
}

/// A checkpoint of one subtask referencing `shared` files and one private file.
pub fn checkpoint(job: &str, id: u64, shared: &[&str]) -> CompletedCheckpoint {
    let handle = |path: String, shared: bool| StateHandle {
        path,
        size: 1,
        checksum: 0,
        kind: HandleKind::Operator,
        shared,
        inline: None,
    };
    let mut handles: Vec<StateHandle> = shared
        .iter()
        .map(|p| handle(format!("shared/{p}"), true))
        .collect();
    handles.push(handle(format!("chk-{id}/op-0.op"), false));
    let mut states = BTreeMap::new();
    states.insert(
        SubtaskId::new(OperatorId(1), 0),
        SubtaskState::from_handles(handles),
    );
    CompletedCheckpoint {
        job: JobId::from_name(job),
        id: CheckpointId(id),
        kind: CheckpointKind::Checkpoint,
        trigger_timestamp_ms: id * 1000,
        completion_timestamp_ms: id * 1000 + 10,
        subtask_states: states,
    }
}

/// Checkpoint storage of `job` in `dir`.
pub fn storage(dir: &Path, job: &str) -> CheckpointStorage {
    CheckpointStorage::open(dir, job).expect("open checkpoint storage")
}

/// Writes `checkpoint`'s metadata durably, as the coordinator's driver does before adding it.
pub fn write_metadata(storage: &CheckpointStorage, checkpoint: &CompletedCheckpoint) {
    let metadata = CheckpointMetadata {
        job_name: "test".into(),
        max_parallelism: 128,
        operators: Vec::new(),
        checkpoint: checkpoint.clone(),
    };
    storage.write_metadata(&metadata).expect("write metadata");
}

/// Runs `scripts/zookeeper.sh <command>` on the test server (its data directory kept).
pub fn zookeeper_script(command: &str) {
    if std::env::var_os("WEIR_ZK_DIR").is_none() {
        panic!(
            "WEIR_ZK_DIR is not set: this test stops and starts the test ZooKeeper; {HOW_TO_START}"
        );
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zookeeper.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(command)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        status.success(),
        "scripts/zookeeper.sh {command} failed: {status}"
    );
}
