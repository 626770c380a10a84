//! Local recovery (`state.backend.local-recovery`) with checkpoints on a real S3-compatible
//! server (started by `scripts/test.sh`): the process keeps a copy of the state files it
//! writes, restarts after injected failures read them from there instead of from S3, and the
//! output stays exactly-once.

use std::path::Path;
use std::process::Output;

use crate::common::{assert_exactly_once, restarts, text, weir, write_text_input};

/// Runs wordcount over `input` with checkpoints on S3 under `prefix`, failures injected, and
/// local recovery in `local` if given.
fn wordcount_on_s3(dir: &Path, input: &Path, prefix: &str, local: Option<&Path>) -> Output {
    let endpoint = std::env::var("WEIR_TEST_S3_ENDPOINT").expect(
        "WEIR_TEST_S3_ENDPOINT is not set: this test needs an S3-compatible server; run scripts/test.sh",
    );
    let bucket = std::env::var("WEIR_TEST_S3_BUCKET").expect("WEIR_TEST_S3_BUCKET");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut cmd = weir();
    cmd.current_dir(dir)
        .args(["run", "wordcount", "--input"])
        .arg(input)
        .args(["--output", "output", "--parallelism", "2", "--no-rest"])
        .args(["--checkpoint-interval", "50ms", "--checkpoint-dir"])
        .arg(format!("s3://{bucket}/{prefix}-{nanos}"))
        .args(["-D", &format!("s3.endpoint={endpoint}")])
        .args([
            "-D",
            "s3.access-key=weir-test",
            "-D",
            "s3.secret-key=weir-test",
        ])
        .args([
            "-D",
            "s3.region=us-east-1",
            "-D",
            "s3.path.style.access=true",
        ])
        // Every piece of state in a file of its own, none inline in the metadata.
        .args(["-D", "execution.checkpointing.data-inline-threshold=0"])
        .args(["-D", "restart-strategy.type=fixed-delay"])
        .args(["-D", "restart-strategy.fixed-delay.attempts=1000"])
        .args(["-D", "restart-strategy.fixed-delay.delay=0ms"])
        .env("WEIR_INJECT_FAILURES", "words,counts,output:0.005")
        .env("RUST_LOG", "weir_runtime::deploy=info");
    if let Some(local) = local {
        cmd.args(["-D", "state.backend.local-recovery=true", "-D"])
            .arg(format!(
                "taskmanager.state.local.root-dirs={}",
                local.display()
            ));
    }
    cmd.output().expect("run wordcount")
}

/// The `local_bytes` of every restore the log reports.
fn local_bytes_per_restore(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.contains("restored") && l.contains("local_bytes="))
        .map(|l| {
            let field = l.split("local_bytes=").nth(1).unwrap();
            let digits: String = field.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap()
        })
        .collect()
}

#[test]
fn restarts_read_their_state_from_the_local_copy_not_s3_and_stay_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 31, 10, 10_000);
    let local = dir.path().join("local-state");
    let out = wordcount_on_s3(dir.path(), &input, "local-recovery", Some(&local));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(restarts(&stdout) >= 1, "no failure struck: {stdout}");
    assert_exactly_once(&input, &dir.path().join("output"));
    let restores = local_bytes_per_restore(&stderr);
    assert!(
        restores.iter().any(|b| *b > 0),
        "no restore read the local copy: {restores:?}\n{stderr}"
    );
    // The copy lasts as long as the process.
    let left: Vec<_> = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "local copies left behind: {left:?}");

    // Without the option, every restore reads S3.
    let dir = tempfile::tempdir().unwrap();
    let input = write_text_input(dir.path(), 32, 10, 10_000);
    let out = wordcount_on_s3(dir.path(), &input, "no-local-recovery", None);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_exactly_once(&input, &dir.path().join("output"));
    assert!(local_bytes_per_restore(&stderr).iter().all(|b| *b == 0));
}
