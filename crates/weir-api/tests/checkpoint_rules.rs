//! The coordinator's rules on a real running job: expiry and the failure budget, min-pause.

use std::time::Duration;
use weir_api::prelude::*;
use weir_checkpoint::CheckpointStatus;
use weir_connectors::{Event, EventGenerator};
use weir_core::config::CheckpointConfig;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::{execute, ExecutionConfig, JobError, StartMode, StopHandle};

fn config(dir: &std::path::Path, checkpoint: CheckpointConfig) -> ExecutionConfig {
    ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.to_path_buf(),
            ..checkpoint
        },
        start: StartMode::Fresh,
        restart: RestartStrategy::None,
        ..ExecutionConfig::default()
    }
}

fn stop_after(duration: Duration) -> StopHandle {
    let stop = StopHandle::new();
    let timer = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(duration);
        timer.stop();
    });
    stop
}

#[test]
fn checkpoints_expire_behind_a_slow_operator_and_past_the_budget_the_job_fails_naming_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("slow");
    env.source("events", EventGenerator::new(1, 100).with_rate(2000))
        .map("slow", |e: Event| {
            std::thread::sleep(Duration::from_millis(2));
            e.user
        })
        .sink("out", CollectSink::default());
    let exec = config(
        dir.path(),
        CheckpointConfig {
            interval: Some(Duration::from_millis(50)),
            timeout: Duration::from_millis(30),
            tolerable_failed: 2,
            ..CheckpointConfig::default()
        },
    );
    let result = execute(
        &env.build().unwrap(),
        &exec,
        &stop_after(Duration::from_secs(20)),
        &mut |_| {},
    );
    match result {
        Err(JobError::Failed(reason)) => {
            assert!(
                reason.contains("tolerable failure threshold (2)"),
                "{reason}"
            );
            assert!(reason.contains("expired"), "{reason}");
        }
        other => panic!("expected the job to fail on the checkpoint failure budget, got {other:?}"),
    }
}

#[test]
fn with_min_pause_every_trigger_starts_at_least_that_long_after_the_previous_completion() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("paused");
    env.set_parallelism(2);
    env.source("events", EventGenerator::new(1, 1000).with_rate(50_000))
        .key_by(|e: &Event| e.user)
        .count("counts")
        .sink("out", CollectSink::default());
    let exec = config(
        dir.path(),
        CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            min_pause: Duration::from_millis(500),
            ..CheckpointConfig::default()
        },
    );
    let summary = execute(
        &env.build().unwrap(),
        &exec,
        &stop_after(Duration::from_millis(2600)),
        &mut |_| {},
    )
    .expect("job runs");
    let completed: Vec<_> = summary
        .stats
        .history()
        .filter(|e| e.status == CheckpointStatus::Completed)
        .collect();
    assert!(
        completed.len() >= 3,
        "only {} checkpoints completed",
        completed.len()
    );
    for pair in completed.windows(2) {
        let previous_completion = pair[0].completion_timestamp_ms.expect("completed");
        let gap = pair[1].trigger_timestamp_ms - previous_completion;
        assert!(
            gap >= 500,
            "checkpoint {} triggered {gap} ms after checkpoint {} completed",
            pair[1].id,
            pair[0].id
        );
    }
}

#[test]
fn a_failure_after_the_checkpoints_were_deleted_fails_the_job_instead_of_starting_over() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ck");
    let fail = Arc::new(AtomicBool::new(false));
    let trigger = Arc::clone(&fail);
    let env = StreamEnv::new("gone");
    env.source("events", EventGenerator::new(1, 100).with_rate(2000))
        .map("fails-once", move |e: Event| {
            assert!(!trigger.swap(false, Ordering::SeqCst), "told to fail");
            e.user
        })
        .sink("out", CollectSink::default());
    let mut exec = config(
        &checkpoints,
        CheckpointConfig {
            interval: Some(Duration::from_millis(300)),
            ..CheckpointConfig::default()
        },
    );
    exec.restart = RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::from_millis(10),
    };
    // Right after the second checkpoint completed (the next one is 300 ms away), the
    // checkpoints' directory disappears and an operator fails.
    let watched = checkpoints.clone();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < until {
            let completed = weir_storage::CheckpointStorage::open(&watched, "gone")
                .and_then(|s| s.list_completed())
                .map(|c| c.len())
                .unwrap_or(0);
            if completed >= 2 {
                std::fs::remove_dir_all(&watched).unwrap();
                fail.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let result = execute(
        &env.build().unwrap(),
        &exec,
        &stop_after(Duration::from_secs(30)),
        &mut |_| {},
    );
    match result {
        Err(JobError::Restore(reason)) => {
            assert!(reason.contains("does not start over"), "{reason}")
        }
        other => panic!("expected the restart to refuse starting over, got {other:?}"),
    }
}
