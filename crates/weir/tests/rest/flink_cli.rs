//! Flink's own command line (from the `apache-flink` package on PyPI) against a Weir job: it must
//! list the job, take a checkpoint and a savepoint, see a failed savepoint's reason, stop the
//! job with a savepoint and cancel another.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{flink_cli, run_with_limit, verify_savepoint, Demo};

/// One `flink` command against the job's REST API; its output (it must succeed unless `fails`).
fn flink(demo: &Demo, args: &[&str], fails: bool) -> String {
    let mut command = Command::new(flink_cli());
    let address = format!("127.0.0.1:{}", demo.port);
    command.arg(args[0]).args(["-m", &address]).args(&args[1..]);
    let (status, output) = run_with_limit(command, Duration::from_secs(180));
    assert_eq!(
        !status.success(),
        fails,
        "flink {args:?} exited with {status}:\n{output}"
    );
    output
}

/// The path after Flink's "Savepoint completed. Path: ".
fn savepoint_path(output: &str) -> String {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Savepoint completed. Path: "))
        .unwrap_or_else(|| panic!("no savepoint path in:\n{output}"))
        .trim()
        .trim_start_matches("file:")
        .to_string()
}

#[test]
fn flinks_command_line_lists_checkpoints_savepoints_and_stops_a_weir_job() {
    // Flink's client takes seconds to start, so its stop cannot be timed between periodic
    // checkpoints: none run here (checkpoints come from `flink checkpoint`).
    let mut demo = Demo::start("1h", &[]);
    let job = demo.job.clone();

    let listed = flink(&demo, &["list"], false);
    assert!(
        listed.contains(&format!("{job} : demo (RUNNING)")),
        "flink list:\n{listed}"
    );

    let checkpointed = flink(&demo, &["checkpoint", &job], false);
    assert!(
        checkpointed.contains(&format!("for job {job} completed")),
        "flink checkpoint:\n{checkpointed}"
    );

    let target = demo.path("savepoints/flink");
    let saved = flink(&demo, &["savepoint", &job, target.to_str().unwrap()], false);
    let location = savepoint_path(&saved);
    assert!(Path::new(&location).starts_with(&target), "{location}");
    verify_savepoint(Path::new(&location));

    // Flink's `--type native` reaches the job as formatType NATIVE (the demo keeps its state on
    // the heap, which a native savepoint writes as a canonical one does).
    let native_target = demo.path("savepoints/native");
    let saved = flink(
        &demo,
        &[
            "savepoint",
            "--type",
            "native",
            &job,
            native_target.to_str().unwrap(),
        ],
        false,
    );
    let location = savepoint_path(&saved);
    assert!(
        Path::new(&location).starts_with(&native_target),
        "{location}"
    );
    verify_savepoint(Path::new(&location));

    // A savepoint that fails in the job: Flink's client rebuilds the cause and shows it.
    std::fs::create_dir_all(demo.path("savepoints")).unwrap();
    let not_a_dir = demo.path("savepoints/a-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let failed = flink(
        &demo,
        &["savepoint", &job, not_a_dir.to_str().unwrap()],
        true,
    );
    assert!(
        failed.contains("Caused by: weir.CheckpointException")
            && failed.contains("not a directory"),
        "flink savepoint (failing):\n{failed}"
    );
    // A target outside the allowed roots: the REST error reaches Flink's client.
    let refused = flink(&demo, &["savepoint", &job, "/etc/weir"], true);
    assert!(
        refused.contains("outside the allowed savepoint directories"),
        "{refused}"
    );

    let final_target = demo.path("savepoints/final");
    let stopped = flink(
        &demo,
        &[
            "stop",
            "--savepointPath",
            final_target.to_str().unwrap(),
            &job,
        ],
        false,
    );
    let location = savepoint_path(&stopped);
    assert!(
        Path::new(&location).starts_with(&final_target),
        "{location}"
    );
    verify_savepoint(Path::new(&location));
    let (status, _, stderr) = demo.wait_exit();
    assert!(status.success(), "{stderr}");
}

#[test]
fn flinks_command_line_cancels_a_weir_job() {
    let mut demo = Demo::start("300ms", &[]);
    demo.wait_completed(1);
    let job = demo.job.clone();
    let cancelled = flink(&demo, &["cancel", &job], false);
    assert!(
        cancelled.contains(&format!("Cancelled job {job}")),
        "{cancelled}"
    );
    let (status, _, stderr) = demo.wait_exit();
    assert!(status.success(), "{stderr}");
}
