//! A job whose sources end at different times keeps checkpointing after the first ends: a
//! source that read all its input stays in the job, answering triggers with its final position,
//! until every source has ended.

use std::time::Duration;
use weir_api::prelude::*;
use weir_checkpoint::CheckpointStatus;
use weir_connectors::{Event, EventGenerator};
use weir_core::config::CheckpointConfig;
use weir_runtime::restart::RestartStrategy;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

#[test]
fn checkpoints_keep_completing_after_a_short_source_ends() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("two-sources");
    env.set_parallelism(2);
    let short: Vec<u64> = (0..100).collect();
    let long = env
        .source("long", EventGenerator::new(1, 1000).with_rate(5000))
        .map("user", |e: Event| e.user);
    env.source("short", VecSource::new(short))
        .union(long)
        .key_by(|u: &u64| *u)
        .count("counts")
        .sink("out", CollectSink::default());
    let exec = ExecutionConfig {
        checkpoint: CheckpointConfig {
            dir: dir.path().to_path_buf(),
            interval: Some(Duration::from_millis(100)),
            ..CheckpointConfig::default()
        },
        start: StartMode::Fresh,
        restart: RestartStrategy::None,
        ..ExecutionConfig::default()
    };
    let stop = StopHandle::new();
    let timer = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        timer.stop();
    });
    let summary = execute(&env.build().unwrap(), &exec, &stop, &mut |_| {}).expect("job runs");
    // The short source ended within its first milliseconds; the job ran for 3 s.
    let counts = &summary.stats.counts;
    assert!(
        counts.completed >= 20,
        "only {} checkpoints completed",
        counts.completed
    );
    assert_eq!(counts.failed, 0, "{:?}", summary.stats.latest.failed);
    assert!(summary
        .stats
        .history()
        .all(|e| e.status == CheckpointStatus::Completed));
}
