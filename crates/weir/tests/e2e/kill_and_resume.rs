//! A job killed with SIGKILL at a random moment and resumed with `--resume` reaches the same
//! final keyed state as an uninterrupted run, and its output holds every milestone once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::{
    completed_checkpoints, final_spend, milestones, random_below, run_in, text, weir,
};

const BOUNDED: [&str; 12] = [
    "demo",
    "--users",
    "500",
    "--events",
    "60000",
    "--rate",
    "40000",
    "--checkpoint-interval",
    "100ms",
    "--duration",
    "10min",
    "--parallelism=2",
];

/// Every user's milestones must be exactly the multiples of 10,000 its final total passed,
/// each once: nothing lost, nothing duplicated.
fn assert_milestones_exactly_once(output: &Path, spend: &BTreeMap<u64, u64>) {
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (user, total) in milestones(output) {
        seen.entry(user).or_default().push(total / 10_000);
    }
    for (user, total) in spend {
        let mut got = seen.remove(user).unwrap_or_default();
        got.sort();
        let want: Vec<u64> = (1..=total / 10_000).collect();
        assert_eq!(got, want, "milestones of user {user} (final spend {total})");
    }
    assert!(
        seen.is_empty(),
        "milestones for users without state: {seen:?}"
    );
}

#[test]
fn a_job_killed_at_a_random_moment_and_resumed_ends_in_the_same_state_as_an_uninterrupted_run() {
    let reference = tempfile::tempdir().unwrap();
    let out = run_in(reference.path(), &BOUNDED);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let expected = final_spend(&reference.path().join("weir-data/checkpoints"));
    assert_eq!(expected.len(), 500);
    assert_milestones_exactly_once(&reference.path().join("weir-data/output/demo"), &expected);

    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("weir-data/checkpoints");
    let mut last_seen = None;
    let mut kills = 0;
    let mut args: Vec<&str> = BOUNDED.to_vec();
    loop {
        let mut child = weir().args(&args).current_dir(dir.path()).spawn().unwrap();
        if kills < 2 {
            std::thread::sleep(Duration::from_millis(300 + random_below(900)));
        }
        let finished = if kills < 2 {
            match child.try_wait().unwrap() {
                Some(status) => Some(status),
                None => {
                    child.kill().unwrap(); // SIGKILL
                    child.wait().unwrap();
                    kills += 1;
                    None
                }
            }
        } else {
            Some(child.wait().unwrap())
        };
        // Ids keep ascending across kills and resumes.
        let ids = completed_checkpoints(&ckpt, "demo");
        if let (Some(before), Some(now)) = (last_seen, ids.last().copied()) {
            assert!(
                now >= before,
                "checkpoint ids went back: {before} then {now}"
            );
        }
        last_seen = ids.last().copied().or(last_seen);
        if let Some(status) = finished {
            assert!(status.success(), "resumed run failed");
            break;
        }
        args = BOUNDED.to_vec();
        args.push("--resume");
    }
    assert!(kills >= 1, "the job was never killed");
    let actual = final_spend(&ckpt);
    assert_eq!(
        actual, expected,
        "final keyed state differs from the uninterrupted run"
    );
    assert_milestones_exactly_once(&dir.path().join("weir-data/output/demo"), &actual);
}
