//! Unaligned checkpoints through the REST API, the metrics, Flink's own classes and the
//! dashboard: a checkpoint taken unaligned is an `UNALIGNED_CHECKPOINT` that names the bytes
//! of channel state it persisted — per checkpoint, per vertex and per subtask — while a
//! savepoint of the same job, always aligned, persists none.

use serde_json::Value;

use crate::common::{request, Demo, PATIENCE};
use crate::dashboard::rendered_dom;
use crate::flink_classes::{assert_flink_reads, FLINK};
use crate::flink_schema::*;

fn get(demo: &Demo, path: &str) -> Value {
    demo.client
        .get(path)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

fn int(value: &Value) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("not an integer: {value}"))
}

/// The value of the job metric `name` in the Prometheus text of `/metrics`.
fn job_metric(demo: &Demo, name: &str) -> f64 {
    let metrics = request(demo.port, "GET", "/metrics", &[], b"");
    assert_eq!(metrics.status, 200);
    let prefix = format!("flink_jobmanager_job_{name}{{");
    metrics
        .body
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{}", metrics.body))
}

#[test]
fn an_unaligned_checkpoint_reports_its_channel_state_and_a_savepoint_stays_aligned() {
    let demo = Demo::start(
        "300ms",
        &[
            "-D",
            "execution.checkpointing.unaligned.enabled=true",
            "-D",
            "web.checkpoints.history=1000",
        ],
    );
    demo.wait_completed(2);
    let job = demo.job.clone();

    let stats = get(&demo, &format!("/jobs/{job}/checkpoints"));
    assert_matches(
        "/jobs/:jobid/checkpoints",
        &stats,
        &CHECKPOINTING_STATISTICS,
    );
    let latest = &stats["latest"]["completed"];
    assert_eq!(
        latest["checkpoint_type"], "UNALIGNED_CHECKPOINT",
        "{latest}"
    );
    let persisted = int(&latest["persisted_data"]);
    assert!(persisted > 0, "{latest}");
    assert!(
        int(&latest["checkpointed_size"]) >= persisted,
        "channel state is part of what a checkpoint wrote: {latest}"
    );
    assert!(
        int(&stats["summary"]["persisted_data"]["max"]) > 0,
        "{stats}"
    );
    assert!(job_metric(&demo, "lastCheckpointPersistedData") > 0.0);

    // The source has no input channels to capture, nor has the sink, chained behind the keyed
    // sum (the plan labels that edge); every other subtask took it unaligned, and the numbers
    // add up from subtasks to vertices to the checkpoint.
    let id = int(&latest["id"]);
    let details = get(&demo, &format!("/jobs/{job}/checkpoints/details/{id}"));
    assert_matches("checkpoint details", &details, &CHECKPOINT_STATISTICS);
    assert_eq!(details["checkpoint_type"], "UNALIGNED_CHECKPOINT");
    let job_details = get(&demo, &format!("/jobs/{job}"));
    let vertices = job_details["vertices"].clone();
    let plan = job_details["plan"]["nodes"].as_array().unwrap().clone();
    let reads_channels = |vid: &str| {
        plan.iter().find(|n| n["id"] == vid).is_some_and(|n| {
            n["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| !i["ship_strategy"].as_str().unwrap().ends_with("(chained)"))
        })
    };
    let mut with_channels = Vec::new();
    let mut over_vertices = 0;
    let mut downstream = None;
    for vertex in vertices.as_array().unwrap() {
        let vid = vertex["id"].as_str().unwrap();
        let name = &vertex["name"];
        let channels = reads_channels(vid);
        if channels {
            with_channels.push(name.as_str().unwrap().to_string());
        }
        let sub = get(
            &demo,
            &format!("/jobs/{job}/checkpoints/details/{id}/subtasks/{vid}"),
        );
        assert_matches(
            "subtask details",
            &sub,
            &TASK_CHECKPOINT_STATISTICS_WITH_SUBTASK_DETAILS,
        );
        let mut over_subtasks = 0;
        for s in sub["subtasks"].as_array().unwrap() {
            assert_eq!(s["unaligned_checkpoint"], channels, "{name}: {s}");
            let persisted = int(&s["alignment"]["persisted"]);
            assert_eq!(persisted > 0, channels, "{name}: {s}");
            over_subtasks += persisted;
        }
        assert_eq!(int(&details["tasks"][vid]["persisted_data"]), over_subtasks);
        assert_eq!(int(&sub["persisted_data"]), over_subtasks);
        assert_eq!(
            int(&sub["summary"]["alignment"]["persisted"]["max"]) > 0,
            channels,
            "{sub}"
        );
        over_vertices += over_subtasks;
        if channels {
            downstream = Some((vid.to_string(), sub));
        }
    }
    assert_eq!(with_channels, ["spend-per-user"]);
    assert_eq!(over_vertices, int(&details["persisted_data"]));
    let (downstream_id, downstream) = downstream.expect("a vertex with inputs");

    // A savepoint is aligned, whatever the configuration.
    let trigger = demo
        .client
        .trigger_savepoint(&job, None, weir_core::SavepointFormat::Canonical)
        .unwrap();
    demo.client
        .wait_savepoint(&job, &trigger, PATIENCE)
        .unwrap();
    let stats = get(&demo, &format!("/jobs/{job}/checkpoints"));
    let savepoint = &stats["latest"]["savepoint"];
    assert_eq!(savepoint["checkpoint_type"], "SAVEPOINT", "{savepoint}");
    assert_eq!(savepoint["persisted_data"], 0, "{savepoint}");
    let sid = int(&savepoint["id"]);
    let aligned = get(
        &demo,
        &format!("/jobs/{job}/checkpoints/details/{sid}/subtasks/{downstream_id}"),
    );
    assert!(
        aligned["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["unaligned_checkpoint"] == false && s["alignment"]["persisted"] == 0),
        "{aligned}"
    );

    // Flink's own classes read the unaligned checkpoint's bodies.
    let p = FLINK;
    assert_flink_reads(&[
        (
            format!("{p}.rest.messages.checkpoints.CheckpointingStatistics"),
            stats.to_string(),
        ),
        (
            format!("{p}.rest.messages.checkpoints.CheckpointStatistics"),
            details.to_string(),
        ),
        (
            format!("{p}.rest.messages.checkpoints.TaskCheckpointStatisticsWithSubtaskDetails"),
            downstream.to_string(),
        ),
    ]);

    // The dashboard marks it, in the history and in its per-subtask details.
    let dom = rendered_dom(&format!("{}/#checkpoint={id}", demo.url), 6000);
    let marks = dom.matches("class=\"unaligned\"").count();
    // At least: its history row, its details line, and the two subtasks with input channels.
    assert!(marks >= 4, "{marks} unaligned marks:\n{dom}");
    for column in ["in-flight persisted", "processed in alignment"] {
        assert!(
            dom.contains(&format!("<th>{column}</th>")),
            "{column}:\n{dom}"
        );
    }
}
