//! Unaligned checkpoints on a cluster of two task managers: barriers overtake the batches queued
//! between them (announced in priority frames of the data plane), the batches they overtake are
//! stored with each checkpoint and replayed after a restart, on whichever task manager each
//! subtask then runs. Wordcount runs back-pressured (its source reads far faster than the
//! counts and the sink keep up), so channels are full whenever a checkpoint starts.

use std::path::Path;
use std::time::Duration;

use super::{
    all_exited_ok, completed_ids, finished, free_port, task_manager_of, wait_for_checkpoints,
    Process,
};
use crate::common::{assert_exactly_once, restarts, weir, write_text_input};

/// A job manager that waits for two task managers and runs wordcount over `input` at
/// `parallelism` with unaligned checkpoints every 100 ms, all of them retained (to be read
/// afterwards), and `extra` arguments; its log is `name`.log.
fn job_manager_with(
    dir: &Path,
    port: u16,
    input: &Path,
    parallelism: u32,
    extra: &[&str],
    name: &str,
) -> Process {
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args(["jobmanager", "--bind", "127.0.0.1", "--rpc-port"])
        .arg(port.to_string())
        .args(["--wait-for-task-managers", "2"])
        .args([
            "-D",
            "heartbeat.interval=200ms",
            "-D",
            "heartbeat.timeout=3s",
        ])
        .args(["--", "run", "wordcount", "--no-rest", "--input"])
        .arg(input)
        .args(["--output"])
        .arg(dir.join("output"))
        .args(["--checkpoint-dir"])
        .arg(dir.join("checkpoints"))
        .args(["--parallelism", &parallelism.to_string()])
        .args(["--checkpoint-interval", "100ms"])
        .args(["-D", "execution.checkpointing.unaligned.enabled=true"])
        .args(["-D", "execution.checkpointing.num-retained=100000"])
        .args(["-D", "restart-strategy.type=fixed-delay"])
        .args(["-D", "restart-strategy.fixed-delay.attempts=100"])
        .args(["-D", "restart-strategy.fixed-delay.delay=0ms"])
        .args(extra);
    Process::start(cmd, dir.join(format!("{name}.log")))
}

fn job_manager(dir: &Path, port: u16, input: &Path) -> Process {
    job_manager_with(dir, port, input, 2, &[], "jobmanager")
}

/// Task manager `n` of one slot, failing the subtasks `inject` names
/// (`WEIR_INJECT_FAILURES`).
pub(super) fn task_manager(
    dir: &Path,
    job_manager: &str,
    n: usize,
    inject: Option<&str>,
) -> Process {
    let Some(spec) = inject else {
        return task_manager_of(dir, job_manager, 1, n);
    };
    let mut cmd = weir();
    cmd.env("WEIR_INJECT_FAILURES", spec)
        .current_dir(dir)
        .args(["taskmanager", "--jobmanager", job_manager])
        .args(["--slots", "1", "--id", &format!("tm-{n}")])
        .args(["--connect-timeout", "60s"]);
    Process::start(cmd, dir.join(format!("taskmanager-{n}.log")))
}

/// Bytes of in-flight data (channel state) of operator `uid`'s subtasks in completed
/// checkpoint `id` of wordcount.
fn channel_state_bytes(dir: &Path, id: u64, uid: &str) -> u64 {
    channel_state_bytes_of(dir, "wordcount", id, uid)
}

/// Bytes of in-flight data (channel state) of operator `uid`'s subtasks in completed
/// checkpoint `id` of job `job`.
fn channel_state_bytes_of(dir: &Path, job: &str, id: u64, uid: &str) -> u64 {
    let storage = weir_storage::CheckpointStorage::open(&dir.join("checkpoints"), job).unwrap();
    let operator = weir_core::OperatorId::from_uid(uid);
    storage
        .read_metadata(weir_core::CheckpointId(id))
        .unwrap()
        .checkpoint
        .subtask_states
        .iter()
        .filter(|(subtask, _)| subtask.operator == operator)
        .flat_map(|(_, s)| &s.handles)
        .filter(|h| h.kind == weir_core::HandleKind::Channels)
        .map(|h| h.size)
        .sum()
}

/// What two channels' state weighs with nothing in them: its header and two empty lists.
const EMPTY_CHANNELS: u64 = 64;

/// Checks what every run here must show: the checkpoints overtook records on the channels
/// that cross between the task managers (those into the counts, keyed by word: some
/// checkpoint held more there than empty lists), and each restart restored a checkpoint that
/// holds channel state.
fn assert_channel_state_was_taken_and_restored(dir: &Path, log: &str) {
    let ids = completed_ids(log);
    assert!(
        ids.iter()
            .any(|id| channel_state_bytes(dir, *id, "counts") > EMPTY_CHANNELS),
        "no checkpoint of {ids:?} captured a record in flight into the counts: was the job back-pressured?"
    );
    let restored: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("restarting the job from its latest checkpoint"))
        .filter_map(|l| {
            l.split(" checkpoint=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|id| id.parse().ok())
        })
        .collect();
    for id in restored {
        assert!(
            channel_state_bytes(dir, id, "counts") > 0,
            "the restart restored checkpoint {id}, which holds no channel state"
        );
    }
}

#[test]
fn with_unaligned_checkpoints_a_task_manager_killed_with_sigkill_is_replaced_and_every_count_is_committed_once(
) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 37, 40, 20_000);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut jm = job_manager(dir.path(), port, &input);
    let mut tms: Vec<Process> = (0..2)
        .map(|n| task_manager(dir.path(), &address, n, None))
        .collect();
    wait_for_checkpoints(&jm, 3);
    tms[1].kill();
    // The job needs two slots again: the next attempt runs on the survivor and a newcomer, and
    // each subtask restores its old subtask's channel state wherever it now runs.
    tms.push(task_manager(dir.path(), &address, 2, None));
    let log = finished(&mut jm);
    assert!(log.contains("task manager lost"), "{log}");
    assert_eq!(restarts(&log), 1, "the job did not restart once:\n{log}");
    for n in [0, 2] {
        assert!(
            tms[n].log().contains("deployed attempt=1"),
            "{}",
            tms[n].log()
        );
    }
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
    assert_channel_state_was_taken_and_restored(dir.path(), &log);
}

#[test]
fn with_unaligned_checkpoints_injected_failures_on_two_task_managers_commit_every_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 41, 30, 20_000);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut jm = job_manager(dir.path(), port, &input);
    // Each attempt loses a counting subtask about 1.5 s after it started, while the job lasts.
    let mut tms: Vec<Process> = (0..2)
        .map(|n| task_manager(dir.path(), &address, n, Some("counts:1500ms")))
        .collect();
    let log = finished(&mut jm);
    assert!(
        restarts(&log) >= 1,
        "no injected failure struck: the job ended within 1.2 s\n{log}"
    );
    all_exited_ok(&mut tms);
    assert_exactly_once(&input, &dir.path().join("output"));
    assert_channel_state_was_taken_and_restored(dir.path(), &log);
}

#[test]
fn an_unaligned_checkpoint_of_a_cluster_is_refused_at_another_parallelism_before_any_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 43, 30, 20_000);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut jm = job_manager(dir.path(), port, &input);
    let mut tms: Vec<Process> = (0..2)
        .map(|n| task_manager(dir.path(), &address, n, None))
        .collect();
    wait_for_checkpoints(&jm, 3);
    // The whole cluster dies mid-run: its latest checkpoint holds in-flight data.
    jm.kill();
    tms.iter_mut().for_each(Process::kill);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut resumed = job_manager_with(dir.path(), port, &input, 3, &["--resume"], "resumed");
    let _tms: Vec<Process> = (2..4)
        .map(|n| task_manager(dir.path(), &address, n, None))
        .collect();
    let status = resumed.wait(Duration::from_secs(60));
    let log = resumed.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("restores only at that parallelism, not 3") && log.contains("savepoint"),
        "{log}"
    );
    assert!(!log.contains("deployed the attempt"), "{log}");
}

/// Keyed event-time windows under back-pressure (each result held 300 µs before the sink) on
/// two task managers with unaligned checkpoints, failing a window subtask about 1.5 s into
/// each attempt: every window's result is committed exactly once, and it is the generator's.
#[test]
fn with_unaligned_checkpoints_back_pressured_windows_on_two_task_managers_commit_every_result_once()
{
    const PER_SPLIT: u64 = 200_000;
    const WINDOW_MS: u64 = 2_000;
    const SEED: u64 = 11;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut cmd = weir();
    cmd.current_dir(dir.path())
        .args(["jobmanager", "--bind", "127.0.0.1", "--rpc-port"])
        .arg(port.to_string())
        .args(["--wait-for-task-managers", "2"])
        .args([
            "-D",
            "heartbeat.interval=200ms",
            "-D",
            "heartbeat.timeout=3s",
        ])
        .args(["--", "run", "spend-windows", "--no-rest", "--output"])
        .arg(dir.path().join("output"))
        .args(["--checkpoint-dir"])
        .arg(dir.path().join("checkpoints"))
        .args(["--parallelism", "2", "--checkpoint-interval", "100ms"])
        .args(["--events", &PER_SPLIT.to_string(), "--users", "300"])
        .args([
            "--window",
            &WINDOW_MS.to_string(),
            "--seed",
            &SEED.to_string(),
        ])
        .args(["--rate", "100000", "--slow-sink", "300us"])
        .args(["-D", "execution.checkpointing.unaligned.enabled=true"])
        .args(["-D", "execution.checkpointing.num-retained=100000"])
        .args(["-D", "restart-strategy.type=fixed-delay"])
        .args(["-D", "restart-strategy.fixed-delay.attempts=100"])
        .args(["-D", "restart-strategy.fixed-delay.delay=0ms"])
        // Unchained, `slow-sink` reads a channel of its own, which the back-pressure keeps
        // full: the channel state this test looks for.
        .args(["-D", "pipeline.operator-chaining.enabled=false"]);
    let mut jm = Process::start(cmd, dir.path().join("jobmanager.log"));
    let mut tms: Vec<Process> = (0..2)
        .map(|n| task_manager(dir.path(), &address, n, Some("spend-per-window:1500ms")))
        .collect();
    let log = finished(&mut jm);
    assert!(restarts(&log) >= 1, "no injected failure struck\n{log}");
    all_exited_ok(&mut tms);
    crate::common::assert_windows_exactly_once(
        &dir.path().join("output"),
        &weir_connectors::EventGenerator::new(SEED, 300),
        WINDOW_MS,
        2,
        PER_SPLIT,
    );
    let ids = completed_ids(&log);
    let captured = ids.iter().any(|id| {
        channel_state_bytes_of(dir.path(), "spend-windows", *id, "slow-sink") > EMPTY_CHANNELS
    });
    assert!(
        captured,
        "no checkpoint of {ids:?} captured a window result in flight: was the job back-pressured?"
    );
}
