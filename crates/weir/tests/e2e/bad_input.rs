//! Bad input gets one clear line on stderr and exit status 2 — never a panic.

use crate::common::{run_in, text};

fn assert_refused(args: &[&str], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "not a directory").unwrap();
    let out = run_in(dir.path(), args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?} → {stderr}");
    assert!(
        stderr.contains(expect),
        "{args:?}: expected '{expect}' in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(
        !dir.path().join("weir-data/checkpoints/demo").exists()
            || std::fs::read_dir(dir.path().join("weir-data/checkpoints/demo"))
                .unwrap()
                .count()
                == 0,
        "{args:?} wrote checkpoints"
    );
}

#[test]
fn an_unknown_flag_is_refused_with_exit_status_2() {
    assert_refused(&["demo", "--bogus"], "--bogus");
}

#[test]
fn a_malformed_duration_is_refused_with_exit_status_2() {
    assert_refused(&["demo", "--duration", "10 parsecs"], "duration");
    assert_refused(&["demo", "--checkpoint-interval=-1s"], "negative");
    assert_refused(&["demo", "--duration", "0s"], "greater than zero");
}

#[test]
fn a_checkpoint_path_that_is_a_file_is_refused_with_exit_status_2() {
    assert_refused(
        &["demo", "--duration", "1s", "--checkpoint-dir", "a-file"],
        "not a directory",
    );
}

#[test]
fn an_unwritable_checkpoint_path_is_refused_with_exit_status_2() {
    assert_refused(
        &[
            "demo",
            "--duration",
            "1s",
            "--checkpoint-dir",
            "a-file/below",
        ],
        "not writable",
    );
    assert_refused(
        &["demo", "--duration", "1s", "--checkpoint-dir", "/proc/weir"],
        "not writable",
    );
}

#[test]
fn unknown_options_and_invalid_values_are_refused_with_exit_status_2() {
    assert_refused(
        &["demo", "-D", "execution.checkpointing.intervall=1s"],
        "unknown option",
    );
    assert_refused(
        &["demo", "-D", "execution.checkpointing.interval=0ms"],
        "execution.checkpointing.interval",
    );
    assert_refused(
        &["demo", "-D", "execution.checkpointing.num-retained=none"],
        "num-retained",
    );
    assert_refused(&["demo", "--parallelism", "0"], "parallelism");
}

#[test]
fn a_bad_state_backend_is_refused_with_exit_status_2() {
    assert_refused(
        &["demo", "-D", "state.backend.type=forst"],
        "expected hashmap or rocksdb",
    );
    assert_refused(
        &[
            "demo",
            "-D",
            "state.backend.type=rocksdb",
            "-D",
            "state.backend.rocksdb.memory.fixed-per-slot=1mb",
        ],
        "at least 16 mb",
    );
    // A build with the backend refuses a directory it cannot make; one without refuses the
    // backend itself.
    let expect = if cfg!(feature = "rocksdb") {
        "state.backend.rocksdb.localdir"
    } else {
        "--features rocksdb"
    };
    assert_refused(
        &[
            "demo",
            "-D",
            "state.backend.type=rocksdb",
            "-D",
            "state.backend.rocksdb.localdir=a-file/rocksdb",
        ],
        expect,
    );
}

#[test]
fn a_watermark_drift_below_a_millisecond_is_refused_with_exit_status_2() {
    for drift in ["500us", "0s"] {
        assert_refused(
            &[
                "bench",
                "nexmark",
                "--query",
                "q4",
                "--max-watermark-drift",
                drift,
            ],
            "--max-watermark-drift",
        );
    }
}

#[test]
fn alternating_phases_that_cannot_measure_are_refused_with_exit_status_2() {
    fn bench<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["bench", "keyed-count"][..], extra].concat()
    }
    assert_refused(
        &bench(&["--alternate", "5s", "--checkpoint-interval", "1s"]),
        "--alternate needs --duration",
    );
    assert_refused(
        &bench(&["--alternate", "5s", "--duration", "60s"]),
        "--alternate needs --checkpoint-interval",
    );
    assert_refused(
        &bench(&[
            "--alternate",
            "5s",
            "--duration",
            "60s",
            "--checkpoint-interval",
            "2s",
        ]),
        "must be a whole multiple, at least twice, of --checkpoint-interval (2s)",
    );
    assert_refused(
        &bench(&[
            "--alternate",
            "5s",
            "--duration",
            "40s",
            "--checkpoint-interval",
            "1s",
        ]),
        "--duration (40s) holds fewer than 2 pairs",
    );
    assert_refused(&bench(&["--alternate-control"]), "--alternate");
    assert_refused(
        &[
            "bench",
            "nexmark",
            "--query",
            "q4",
            "--alternate",
            "1s",
            "--duration",
            "20s",
        ],
        "--alternate needs --checkpoint-interval",
    );
}

#[test]
fn a_duplicate_operator_uid_is_refused_with_exit_status_2() {
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("duplicate_uid");
    if !example.exists() {
        // `cargo test` builds examples, but not when only this test target was selected.
        let built = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "weir",
                "--example",
                "duplicate_uid",
            ])
            .status()
            .unwrap();
        assert!(built.success());
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&example)
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", example.display()));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("duplicate operator uid 'totals'"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

#[test]
fn cluster_commands_refuse_bad_flags_with_exit_status_2() {
    assert_refused(&["jobmanager", "--rpc-port", "0"], "JOB");
    assert_refused(
        &["jobmanager", "--rpc-port", "0", "--", "demo"],
        "a cluster runs `run wordcount …`, `run spend-windows …` or `bench keyed-count …`",
    );
    assert_refused(
        &[
            "jobmanager",
            "--rpc-port",
            "0",
            "-D",
            "heartbeat.timeout=100ms",
            "--",
            "bench",
            "keyed-count",
        ],
        "heartbeat.timeout (100 ms) must be longer than heartbeat.interval",
    );
    assert_refused(
        &[
            "jobmanager",
            "--rpc-port",
            "0",
            "--",
            "run",
            "wordcount",
            "--input",
            "missing",
            "--output",
            "out",
            "--checkpoint-dir",
            "ckpt",
        ],
        "missing",
    );
    assert_refused(
        &[
            "jobmanager",
            "--rpc-port",
            "0",
            "--",
            "bench",
            "keyed-count",
        ],
        "needs --checkpoint-dir DIR (the same for every process)",
    );
    assert_refused(
        &["taskmanager", "--jobmanager", "127.0.0.1:1", "--slots", "0"],
        "at least one slot",
    );
    assert_refused(
        &[
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:1",
            "-D",
            "s3.endpont=x",
        ],
        "unknown option 's3.endpont'",
    );
    assert_refused(
        &[
            "run",
            "wordcount",
            "--input",
            "a-file",
            "--output",
            "out",
            "--checkpoint-dir",
            "ckpt",
            "-D",
            "high-availability.type=zookeeper",
            "-D",
            "high-availability.zookeeper.quorum=127.0.0.1:1",
            "-D",
            "high-availability.storageDir=ha",
        ],
        "ZooKeeper needs cluster mode",
    );
}

#[test]
fn a_port_beyond_loopback_without_the_cluster_secret_is_refused_with_exit_status_2() {
    assert_refused(
        &[
            "jobmanager",
            "--bind",
            "0.0.0.0",
            "--rpc-port",
            "0",
            "--",
            "run",
            "wordcount",
            "--input",
            "a-file",
            "--output",
            "out",
            "--checkpoint-dir",
            "ckpt",
        ],
        "refusing to listen for task managers on 0.0.0.0:0 without security.ssl.internal.enabled or security.internal.secret: anyone who reaches the port could register a task manager and receive the job's records",
    );
    assert_refused(
        &[
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:1",
            "--host",
            "0.0.0.0",
        ],
        "refusing to listen for data on 0.0.0.0:0 without security.ssl.internal.enabled or security.internal.secret",
    );
    assert_refused(
        &[
            "jobmanager",
            "--rpc-port",
            "0",
            "-D",
            "security.internal.secret=hunter2",
            "--",
            "bench",
            "keyed-count",
        ],
        "security.internal.secret: the cluster's secret is 7 bytes long; use at least 16",
    );
    assert_refused(
        &[
            "jobmanager",
            "--rpc-port",
            "0",
            "--",
            "bench",
            "keyed-count",
            "-D",
            "security.internal.secret=sixteen-bytes-at-least",
        ],
        "the cluster's secret and TLS options go before --, not among the job's flags",
    );
}

#[test]
fn tls_options_that_cannot_work_are_refused_with_exit_status_2_naming_the_option_and_the_file() {
    let tls = |cert: &'static str, key: &'static str, ca: &'static str| {
        [
            "-D",
            "security.ssl.internal.enabled=true",
            "-D",
            cert,
            "-D",
            key,
            "-D",
            ca,
        ]
    };
    let wordcount = [
        "--",
        "run",
        "wordcount",
        "--input",
        "a-file",
        "--output",
        "out",
        "--checkpoint-dir",
        "ckpt",
    ];
    // `a-file` holds "not a directory": not a certificate.
    let garbage = tls(
        "security.ssl.internal.cert=a-file",
        "security.ssl.internal.key=a-file",
        "security.ssl.internal.trust-certificates=a-file",
    );
    let mut jm = vec!["jobmanager", "--rpc-port", "0"];
    jm.extend(garbage);
    jm.extend(wordcount);
    assert_refused(
        &jm,
        "security.ssl.internal.cert a-file: no certificate in it (a PEM block -----BEGIN CERTIFICATE-----)",
    );
    let missing = tls(
        "security.ssl.internal.cert=nowhere/tm.crt",
        "security.ssl.internal.key=nowhere/tm.key",
        "security.ssl.internal.trust-certificates=nowhere/ca.crt",
    );
    let mut tm = vec!["taskmanager", "--jobmanager", "127.0.0.1:1"];
    tm.extend(missing);
    assert_refused(&tm, "cannot read security.ssl.internal.cert nowhere/tm.crt");
    assert_refused(
        &[
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:1",
            "-D",
            "security.ssl.internal.enabled=true",
            "-D",
            "security.ssl.internal.cert=a-file",
        ],
        "security.ssl.internal.enabled is true but security.ssl.internal.key is not set",
    );
    assert_refused(
        &[
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:1",
            "-D",
            "security.ssl.internal.cert=a-file",
        ],
        "security.ssl.internal.cert is set but security.ssl.internal.enabled is not true",
    );
    let mut among_the_jobs = vec!["jobmanager", "--rpc-port", "0"];
    among_the_jobs.extend(wordcount);
    among_the_jobs.extend(["-D", "security.ssl.internal.enabled=true"]);
    assert_refused(
        &among_the_jobs,
        "the cluster's secret and TLS options go before --",
    );
}

#[test]
fn a_task_manager_that_cannot_reach_its_job_manager_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &[
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:1",
            "--connect-timeout",
            "1s",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the job manager at 127.0.0.1:1 within 1 s"),
        "{stderr}"
    );
}

#[test]
fn a_listing_whose_reader_went_away_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // The pipe's reading end is closed before `weir` writes: its first line finds no reader.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = crate::common::weir()
        .args(["checkpoints", "list"])
        .arg(dir.path())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}
