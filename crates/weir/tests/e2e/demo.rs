//! `weir demo` end to end: checkpoints, retention, refusal to overwrite, resume.

use crate::common::{completed_checkpoints, run_in, text};

#[test]
fn the_demo_completes_checkpoints_and_keeps_the_newest_three_each_with_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &[
            "demo",
            "--duration",
            "3s",
            "--checkpoint-interval",
            "200ms",
            "--users",
            "1000",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let completed: u64 = stdout
        .split("Checkpoints: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    assert!(completed >= 5, "{stdout}");
    let root = dir.path().join("weir-data/checkpoints/demo");
    let mut dirs: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("chk-"))
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    for d in &dirs {
        assert!(
            root.join(d).join("_metadata").is_file(),
            "{d} lacks _metadata"
        );
    }
}

#[test]
fn starting_over_existing_checkpoints_needs_resume_or_fresh_and_ids_ascend_across_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("weir-data/checkpoints");
    let args = [
        "demo",
        "--duration",
        "1500ms",
        "--checkpoint-interval",
        "200ms",
        "--users",
        "1000",
    ];
    assert!(run_in(dir.path(), &args).status.success());
    let first = completed_checkpoints(&ckpt, "demo");
    assert!(!first.is_empty());

    let refused = run_in(dir.path(), &args);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--resume") && stderr.contains("--fresh"),
        "{stderr}"
    );
    assert_eq!(
        completed_checkpoints(&ckpt, "demo"),
        first,
        "a refused start touched checkpoints"
    );

    let resumed = run_in(dir.path(), &[&args[..], &["--resume"]].concat());
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stdout).contains(&format!(
        "Resumed from checkpoint {}",
        first.last().unwrap()
    )));
    let second = completed_checkpoints(&ckpt, "demo");
    assert!(
        second.first().unwrap() > first.last().unwrap(),
        "{first:?} then {second:?}"
    );

    let fresh = run_in(dir.path(), &[&args[..], &["--fresh"]].concat());
    assert!(fresh.status.success(), "{}", text(&fresh.stderr));
    assert!(!text(&fresh.stdout).contains("Resumed"));
}

#[test]
fn bench_prints_one_json_object_with_the_throughput() {
    let dir = tempfile::tempdir().unwrap();
    for interval in ["off", "200ms"] {
        let out = run_in(
            dir.path(),
            &[
                "bench",
                "pipeline",
                "--duration",
                "1s",
                "--checkpoint-interval",
                interval,
                "--json",
            ],
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        let line = stdout.trim();
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        for field in [
            "\"records_per_second\":",
            "\"checkpoints_completed\":",
            "\"checkpoint_duration_p99_ms\":",
        ] {
            assert!(line.contains(field), "{field} missing in {line}");
        }
    }
}
