//! `weir jobs|checkpoint|savepoint|stop|cancel --rest URL` against a running job, and the
//! safety rules of `--rest-bind` and `--rest-token`.

use std::path::Path;
use std::process::Output;

use crate::common::{request, verify_savepoint, weir, Demo};

fn run(args: &[&str]) -> Output {
    weir().args(args).output().expect("run weir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_command_line_lists_checkpoints_savepoints_and_stops_a_job() {
    // No periodic checkpoint in the way of the stop's savepoint: checkpoints come on request.
    let mut demo = Demo::start("1h", &[]);
    let rest = demo.url.clone();

    let jobs = run(&["jobs", "--rest", &rest]);
    assert!(jobs.status.success(), "{}", text(&jobs.stderr));
    let listed = text(&jobs.stdout);
    assert!(
        listed.contains(&demo.job) && listed.contains("demo") && listed.contains("RUNNING"),
        "{listed}"
    );

    // By name or by id.
    let checkpoint = run(&["checkpoint", "demo", "--rest", &rest]);
    assert!(checkpoint.status.success(), "{}", text(&checkpoint.stderr));
    assert!(
        text(&checkpoint.stdout).contains("completed"),
        "{}",
        text(&checkpoint.stdout)
    );

    let dir = demo.path("savepoints/by-cli");
    let savepoint = run(&[
        "savepoint",
        &demo.job,
        dir.to_str().unwrap(),
        "--rest",
        &rest,
    ]);
    assert!(savepoint.status.success(), "{}", text(&savepoint.stderr));
    let out = text(&savepoint.stdout);
    let location = out
        .trim()
        .strip_prefix("Savepoint completed: ")
        .unwrap_or_else(|| panic!("{out}"));
    assert!(Path::new(location).starts_with(&dir));
    verify_savepoint(Path::new(location));
    // `weir checkpoints verify` takes a savepoint's directory; a damaged one fails it.
    let verified = run(&["checkpoints", "verify", location]);
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    assert!(
        text(&verified.stdout).contains("): ok ("),
        "{}",
        text(&verified.stdout)
    );
    let damaged = demo.path("savepoints/damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    let metadata = std::fs::read(Path::new(location).join("_metadata")).unwrap();
    std::fs::write(damaged.join("_metadata"), &metadata[..metadata.len() / 2]).unwrap();
    let refused = run(&["checkpoints", "verify", damaged.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("is damaged"),
        "{}",
        text(&refused.stderr)
    );

    // A target outside the allowed roots is refused with the server's reason, exit status 2.
    let refused = run(&["savepoint", "demo", "/etc/elsewhere", "--rest", &rest]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("outside the allowed"),
        "{}",
        text(&refused.stderr)
    );

    let final_dir = demo.path("savepoints/final");
    // With --drain: event time ends before the final savepoint (the demo has no windows, so
    // this is the path through REST and the sources, not the windows' side).
    let stop = run(&[
        "stop",
        "demo",
        "--drain",
        "--savepoint",
        final_dir.to_str().unwrap(),
        "--rest",
        &rest,
    ]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    let out = text(&stop.stdout);
    let location = out.trim().rsplit("savepoint: ").next().unwrap();
    verify_savepoint(Path::new(location));
    let (status, _, stderr) = demo.wait_exit();
    assert!(status.success(), "{stderr}");

    // Nobody serves there any more: a clear error, not a hang.
    let gone = run(&["jobs", "--rest", &rest]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        text(&gone.stderr).contains("cannot reach"),
        "{}",
        text(&gone.stderr)
    );
}

#[test]
fn cancel_through_the_command_line_ends_the_job() {
    let mut demo = Demo::start("300ms", &[]);
    demo.wait_completed(1);
    let cancel = run(&["cancel", "demo", "--rest", &demo.url]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let (status, _, stderr) = demo.wait_exit();
    assert!(status.success(), "{stderr}");
    let unknown = run(&["cancel", "nope", "--rest", "http://127.0.0.1:9"]);
    assert_eq!(unknown.status.code(), Some(1));
}

#[test]
fn binding_beyond_loopback_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = weir()
        .args([
            "demo",
            "--rest-bind",
            "0.0.0.0",
            "--rest-port",
            "0",
            "--duration",
            "5s",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("without a token") && stderr.contains("--rest-token"),
        "{stderr}"
    );
}

#[test]
fn a_token_is_required_on_every_api_request_but_not_for_the_page() {
    let demo = Demo::start(
        "1h",
        &["--rest-bind", "0.0.0.0", "--rest-token", "s3cret-token"],
    );
    let port = demo.port;
    let no_token = request(port, "GET", "/jobs", &[], b"");
    assert_eq!(no_token.status, 401, "{}", no_token.body);
    assert!(no_token.header("www-authenticate").is_some());
    let wrong = request(
        port,
        "GET",
        "/jobs",
        &[("Authorization", "Bearer wrong")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let metrics = request(port, "GET", "/metrics", &[], b"");
    assert_eq!(metrics.status, 401);
    let right = request(
        port,
        "GET",
        "/jobs",
        &[("Authorization", "Bearer s3cret-token")],
        b"",
    );
    assert_eq!(right.status, 200, "{}", right.body);
    let page = request(port, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("weir.js"));

    let with_token = run(&["jobs", "--rest", &demo.url, "--token", "s3cret-token"]);
    assert!(with_token.status.success(), "{}", text(&with_token.stderr));
    let without = run(&["jobs", "--rest", &demo.url]);
    assert_eq!(without.status.code(), Some(2));
    assert!(
        text(&without.stderr).contains("token"),
        "{}",
        text(&without.stderr)
    );
}

#[test]
fn no_rest_serves_nothing_and_an_explicit_taken_port_is_an_error() {
    let demo = Demo::start("1h", &[]);
    let dir = tempfile::tempdir().unwrap();
    let taken = weir()
        .args([
            "demo",
            "--rest-port",
            &demo.port.to_string(),
            "--duration",
            "5s",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(taken.status.code(), Some(2));
    assert!(
        text(&taken.stderr).contains("--rest-port"),
        "{}",
        text(&taken.stderr)
    );

    let quiet = weir()
        .args(["demo", "--no-rest", "--duration", "1s", "--rate", "1000"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert!(!text(&quiet.stdout).contains("REST API"));
}
