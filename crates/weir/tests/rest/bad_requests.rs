//! Bad requests of every kind get the right 4xx in Flink's error form, change nothing, and the
//! job keeps running and checkpointing.

use crate::common::{post_json, raw_request, request, Demo, Raw};
use crate::flink_schema::{assert_matches, ERROR_RESPONSE, TRIGGER_RESPONSE};

struct Case {
    what: &'static str,
    status: u16,
    answer: Raw,
}

#[test]
fn bad_requests_get_the_right_4xx_and_the_job_keeps_running() {
    let demo = Demo::start("300ms", &[]);
    let stats = demo.wait_completed(2);
    let checkpoint = stats["latest"]["completed"]["id"].as_i64().unwrap();
    let (port, job) = (demo.port, demo.job.clone());
    let sp = format!("/jobs/{job}/savepoints");
    let unknown_job = "0123456789abcdef0123456789abcdef";
    let unknown_trigger = "fedcba9876543210fedcba9876543210";
    let escape = demo.path("escaped");
    let get = |path: &str| request(port, "GET", path, &[], b"");

    // A real savepoint, to have a known trigger id in the savepoint namespace.
    let accepted = post_json(port, &sp, "{}");
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    assert_matches("a trigger's answer", &accepted.json(), &TRIGGER_RESPONSE);
    let known = accepted.json()["request-id"].as_str().unwrap().to_string();
    demo.client
        .wait_savepoint(&job, &known, crate::common::PATIENCE)
        .unwrap();

    let mut cases = vec![
        Case {
            what: "an unknown path",
            status: 404,
            answer: get("/no/such/path"),
        },
        Case {
            what: "an unknown path under /v1",
            status: 404,
            answer: get("/v1/jobs/x/y/z/w"),
        },
        Case {
            what: "a malformed job id",
            status: 400,
            answer: get("/jobs/not-a-job-id"),
        },
        Case {
            what: "an unknown job id",
            status: 404,
            answer: get(&format!("/jobs/{unknown_job}")),
        },
        Case {
            what: "an unknown job's checkpoints",
            status: 404,
            answer: get(&format!("/jobs/{unknown_job}/checkpoints")),
        },
        Case {
            what: "a non-numeric checkpoint id",
            status: 400,
            answer: get(&format!("/jobs/{job}/checkpoints/details/latest")),
        },
        Case {
            what: "an unknown checkpoint id",
            status: 404,
            answer: get(&format!("/jobs/{job}/checkpoints/details/987654321")),
        },
        Case {
            what: "a malformed vertex id",
            status: 400,
            answer: get(&format!(
                "/jobs/{job}/checkpoints/details/{checkpoint}/subtasks/events"
            )),
        },
        Case {
            what: "an unknown vertex id",
            status: 404,
            answer: get(&format!(
                "/jobs/{job}/checkpoints/details/{checkpoint}/subtasks/{unknown_job}"
            )),
        },
        Case {
            what: "a malformed trigger id",
            status: 400,
            answer: get(&format!("{sp}/12345")),
        },
        Case {
            what: "an unknown trigger id",
            status: 404,
            answer: get(&format!("{sp}/{unknown_trigger}")),
        },
        Case {
            what: "a savepoint trigger id polled as a checkpoint",
            status: 404,
            answer: get(&format!("/jobs/{job}/checkpoints/{known}")),
        },
        Case {
            what: "DELETE of a job",
            status: 405,
            answer: request(port, "DELETE", &format!("/jobs/{job}"), &[], b""),
        },
        Case {
            what: "GET of the savepoint trigger",
            status: 405,
            answer: get(&sp),
        },
        Case {
            what: "PUT of the stop trigger",
            status: 405,
            answer: request(
                port,
                "PUT",
                &format!("/jobs/{job}/stop"),
                &[("Content-Type", "application/json")],
                b"{}",
            ),
        },
        Case {
            what: "malformed JSON",
            status: 400,
            answer: post_json(port, &sp, r#"{"target-directory": "#),
        },
        Case {
            what: "JSON that is not an object",
            status: 400,
            answer: post_json(port, &sp, "[1, 2, 3]"),
        },
        Case {
            what: "a field of the wrong type",
            status: 400,
            answer: post_json(port, &sp, r#"{"cancel-job": "yes"}"#),
        },
        Case {
            what: "an unknown field",
            status: 400,
            answer: post_json(port, &sp, r#"{"target": "/tmp"}"#),
        },
        Case {
            what: "a body that is not UTF-8",
            status: 400,
            answer: request(
                port,
                "POST",
                &sp,
                &[("Content-Type", "application/json")],
                b"{\"target-directory\": \"\xff\xfe\"}",
            ),
        },
        Case {
            what: "a POST without a content type",
            status: 415,
            answer: request(port, "POST", &sp, &[], b"{}"),
        },
        Case {
            what: "a POST of text/plain",
            status: 415,
            answer: request(port, "POST", &sp, &[("Content-Type", "text/plain")], b"{}"),
        },
        Case {
            what: "a form POST (as another web page could send)",
            status: 415,
            answer: request(
                port,
                "POST",
                &format!("/jobs/{job}/stop"),
                &[("Content-Type", "application/x-www-form-urlencoded")],
                b"drain=false",
            ),
        },
        Case {
            what: "an announced oversized body",
            status: 413,
            answer: post_json(
                port,
                &sp,
                &format!(r#"{{"target-directory": "{}"}}"#, "x".repeat(200_000)),
            ),
        },
        Case {
            what: "a chunked oversized body",
            status: 413,
            answer: raw_request(port, &chunked(port, &sp, 300_000)),
        },
        Case {
            what: "path traversal in a savepoint target",
            status: 400,
            answer: post_json(
                port,
                &sp,
                &format!(
                    r#"{{"target-directory": "{}/savepoints/../escaped"}}"#,
                    demo.dir.path().display()
                ),
            ),
        },
        Case {
            what: "path traversal in a stop's savepoint target",
            status: 400,
            answer: post_json(
                port,
                &format!("/jobs/{job}/stop"),
                r#"{"targetDirectory": "savepoints/../../../../etc/weir"}"#,
            ),
        },
        Case {
            what: "a savepoint target outside the allowed roots",
            status: 403,
            answer: post_json(port, &sp, r#"{"target-directory": "/etc/weir-savepoints"}"#),
        },
        Case {
            what: "a savepoint target beside the root with the root's name as prefix",
            status: 403,
            answer: post_json(
                port,
                &sp,
                &format!(
                    r#"{{"target-directory": "{}/savepoints-evil"}}"#,
                    demo.dir.path().display()
                ),
            ),
        },
        Case {
            what: "a remote savepoint target",
            status: 400,
            answer: post_json(
                port,
                &sp,
                r#"{"target-directory": "s3://bucket/savepoints"}"#,
            ),
        },
        Case {
            what: "an unknown savepoint format",
            status: 400,
            answer: post_json(port, &sp, r#"{"formatType": "ZIP"}"#),
        },
        Case {
            what: "an unknown checkpoint type",
            status: 400,
            answer: post_json(
                port,
                &format!("/jobs/{job}/checkpoints"),
                r#"{"checkpointType": "HUGE"}"#,
            ),
        },
        Case {
            what: "a malformed trigger id in the body",
            status: 400,
            answer: post_json(port, &sp, r#"{"triggerId": "../../x"}"#),
        },
        Case {
            what: "a trigger id reused for another operation",
            status: 409,
            answer: post_json(
                port,
                &format!("/jobs/{job}/stop"),
                &format!(r#"{{"triggerId": "{known}"}}"#),
            ),
        },
        Case {
            what: "stop with a drain that is not a boolean",
            status: 400,
            answer: post_json(port, &format!("/jobs/{job}/stop"), r#"{"drain": "yes"}"#),
        },
        Case {
            what: "an unknown termination mode",
            status: 400,
            answer: request(
                port,
                "PATCH",
                &format!("/jobs/{job}?mode=nuke"),
                &[("Content-Type", "application/json")],
                b"{}",
            ),
        },
        Case {
            what: "termination mode stop",
            status: 400,
            answer: request(
                port,
                "PATCH",
                &format!("/jobs/{job}?mode=stop"),
                &[("Content-Type", "application/json")],
                b"{}",
            ),
        },
        Case {
            what: "a request for another host (DNS rebinding)",
            status: 403,
            answer: raw_request(
                port,
                format!(
                    "GET /jobs HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            ),
        },
        Case {
            what: "a percent-encoded job id that is no id",
            status: 400,
            answer: get("/jobs/%2e%2e%2f%2e%2e%2fetc"),
        },
    ];

    let mut failures = Vec::new();
    for case in &mut cases {
        let a = &case.answer;
        if a.status != case.status {
            failures.push(format!(
                "{}: expected {}, got {} {}",
                case.what, case.status, a.status, a.body
            ));
            continue;
        }
        let json_type = a.header("content-type").unwrap_or_default();
        if !json_type.starts_with("application/json") {
            failures.push(format!("{}: content type {json_type:?}", case.what));
            continue;
        }
        let body = a.json();
        assert_matches(case.what, &body, &ERROR_RESPONSE);
        let message = body["errors"][0].as_str().unwrap_or_default();
        if message.len() < 10 {
            failures.push(format!("{}: unclear message {message:?}", case.what));
        }
    }
    assert!(
        cases.len() >= 20,
        "only {} kinds of bad request",
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A wrong method names the allowed ones.
    let delete = &cases
        .iter()
        .find(|c| c.what == "DELETE of a job")
        .unwrap()
        .answer;
    assert!(
        delete.header("allow").is_some_and(|a| a.contains("PATCH")),
        "{}",
        delete.head
    );

    // Nothing was written where a refused request pointed, and the job runs on.
    assert!(!escape.exists(), "a refused target was created");
    assert!(!std::path::Path::new("/etc/weir-savepoints").exists());
    assert_eq!(demo.state(), "RUNNING");
    let before = demo
        .client
        .get(&format!("/jobs/{job}/checkpoints"))
        .unwrap()["counts"]["completed"]
        .as_i64()
        .unwrap();
    demo.wait_completed(before + 2);
    let trigger = demo
        .client
        .trigger_savepoint(&job, None, weir_core::SavepointFormat::Canonical)
        .unwrap();
    demo.client
        .wait_savepoint(&job, &trigger, crate::common::PATIENCE)
        .unwrap();
}

/// A POST whose body comes in chunks with no announced length.
fn chunked(port: u16, path: &str, size: usize) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    let chunk = vec![b' '; 16 * 1024];
    let mut sent = 0;
    while sent < size {
        r.extend(format!("{:x}\r\n", chunk.len()).into_bytes());
        r.extend(&chunk);
        r.extend(b"\r\n");
        sent += chunk.len();
    }
    r.extend(b"0\r\n\r\n");
    r
}
