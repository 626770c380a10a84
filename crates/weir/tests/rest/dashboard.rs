//! The dashboard in a real headless Chromium: loaded against a running job, its polling must
//! render the job graph and the completed checkpoints; a linked checkpoint shows its
//! per-subtask details.

use std::process::Command;
use std::time::Duration;

use crate::common::{chromium, request, run_with_limit, Demo};

/// The DOM of `url` after the page's scripts ran for `budget_ms` of virtual time.
pub fn rendered_dom(url: &str, budget_ms: u32) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut command = Command::new(chromium());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        &format!("--user-data-dir={}", profile.path().display()),
        &format!("--virtual-time-budget={budget_ms}"),
        "--dump-dom",
        url,
    ]);
    let (status, output) = run_with_limit(command, Duration::from_secs(120));
    assert!(status.success(), "chromium failed:\n{output}");
    output
}

/// The number in `<… id="ID">N</…>`.
fn number_in(dom: &str, id: &str) -> i64 {
    let start = dom
        .find(&format!("id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"))
        + id.len()
        + 6;
    dom[start..]
        .split('<')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("#{id} holds no number"))
}

#[test]
fn the_dashboard_shows_the_job_graph_and_completed_checkpoints_in_a_real_browser() {
    // A long history, so the checkpoint linked below is still remembered when the page loads.
    let demo = Demo::start("300ms", &["-D", "web.checkpoints.history=1000"]);
    demo.wait_completed(2);

    let page = request(demo.port, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "the page loads nothing from elsewhere"
    );

    let dom = rendered_dom(&format!("{}/", demo.url), 6000);
    assert!(
        dom.contains("class=\"state RUNNING\""),
        "job state not rendered:\n{dom}"
    );
    assert!(number_in(&dom, "completed-count") >= 2, "{dom}");
    let completed_rows = dom.matches("<tr class=\"status-COMPLETED").count();
    assert!(
        completed_rows >= 2,
        "history shows {completed_rows} completed checkpoints:\n{dom}"
    );
    for name in ["events", "spend-per-user", "milestones"] {
        assert!(
            dom.contains(&format!(">{name}</text>")),
            "graph node {name} missing:\n{dom}"
        );
    }
    assert!(dom.contains("parallelism 2"), "{dom}");
    assert!(dom.contains("records/s"), "{dom}");
    assert!(
        dom.contains("class=\"bar-duration"),
        "duration chart not drawn:\n{dom}"
    );
    assert!(
        dom.contains("class=\"line-full\""),
        "size chart not drawn:\n{dom}"
    );

    // A checkpoint's per-subtask details (what a click on its row shows).
    let stats = demo
        .client
        .get(&format!("/jobs/{}/checkpoints", demo.job))
        .unwrap();
    let id = stats["latest"]["completed"]["id"].as_i64().unwrap();
    let dom = rendered_dom(&format!("{}/#checkpoint={id}", demo.url), 6000);
    let subtasks = dom.matches("<tr class=\"subtask\">").count();
    assert_eq!(subtasks, 6, "per-subtask details missing:\n{dom}");
    for column in ["sync", "async", "alignment", "start delay"] {
        assert!(
            dom.contains(&format!("<th>{column}</th>")),
            "{column}:\n{dom}"
        );
    }
}
