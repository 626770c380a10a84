//! The REST API end to end, over HTTP only: read the job, wait for checkpoints, check Flink's
//! schemas, trigger a checkpoint and a savepoint, stop with a savepoint, restore from it.

use serde_json::Value;
use std::path::Path;
use std::time::Duration;

use crate::common::{spend_in, verify_savepoint, Demo, PATIENCE};
use crate::flink_schema::*;

fn get(demo: &Demo, path: &str) -> Value {
    demo.client
        .get(path)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[test]
fn a_job_is_read_checkpointed_savepointed_stopped_and_restored_through_http_only() {
    // Periodic checkpoints far enough apart that the stop below (right after one) finishes its
    // savepoint before the next starts.
    let mut demo = Demo::start("2s", &[]);
    let job = demo.job.clone();

    // The cluster and the job, as Flink describes them.
    let overview = get(&demo, "/overview");
    assert_matches("/overview", &overview, &CLUSTER_OVERVIEW_WITH_VERSION);
    assert_eq!(overview["jobs-running"], 1);
    assert_matches("/config", &get(&demo, "/config"), &DASHBOARD_CONFIGURATION);
    assert_matches("/jobs", &get(&demo, "/jobs"), &JOB_IDS_WITH_STATUS_OVERVIEW);
    let jobs = get(&demo, "/jobs/overview");
    assert_matches("/jobs/overview", &jobs, &MULTIPLE_JOBS_DETAILS);
    assert_eq!(jobs["jobs"][0]["name"], "demo");
    assert_eq!(jobs["jobs"][0]["tasks"]["total"], 6);
    let details = get(&demo, &format!("/jobs/{job}"));
    assert_matches("/jobs/:jobid", &details, &JOB_DETAILS_INFO);
    assert_eq!(details["state"], "RUNNING");
    let names: Vec<&str> = details["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["events", "spend-per-user", "milestones"]);
    // The plan says how records travel: hashed into the keyed sum, whose subtasks run the
    // sink chained behind them.
    let strategies: Vec<&str> = details["plan"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["inputs"].as_array().unwrap())
        .map(|i| i["ship_strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["HASH", "FORWARD (chained)"]);
    assert!(details["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["parallelism"] == 2));
    // Every path is served under /v1 too.
    assert_eq!(get(&demo, &format!("/v1/jobs/{job}"))["jid"], job.as_str());

    // Three completed checkpoints, in Flink's exact schema.
    let stats = demo.wait_completed(3);
    assert_matches(
        "/jobs/:jobid/checkpoints",
        &stats,
        &CHECKPOINTING_STATISTICS,
    );
    let latest = &stats["latest"]["completed"];
    assert_eq!(latest["className"], "completed");
    assert_eq!(latest["num_acknowledged_subtasks"], 6);
    assert!(latest["state_size"].as_i64().unwrap() > 0, "{latest}");
    // Aligned: no in-flight data went with it.
    assert_eq!(latest["checkpoint_type"], "CHECKPOINT", "{latest}");
    assert_eq!(latest["persisted_data"], 0, "{latest}");
    assert!(stats["history"].as_array().unwrap().len() >= 3);
    let ids: Vec<i64> = stats["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_i64().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]),
        "history is newest first: {ids:?}"
    );
    let config = get(&demo, &format!("/jobs/{job}/checkpoints/config"));
    assert_matches(
        "/jobs/:jobid/checkpoints/config",
        &config,
        &CHECKPOINT_CONFIG_INFO,
    );
    assert_eq!(config["state_backend"], "HashMapStateBackend");

    // One checkpoint's details, and one vertex's subtasks in it.
    let id = latest["id"].as_i64().unwrap();
    let one = get(&demo, &format!("/jobs/{job}/checkpoints/details/{id}"));
    assert_matches("checkpoint details", &one, &CHECKPOINT_STATISTICS);
    let tasks = one["tasks"].as_object().unwrap();
    assert_eq!(tasks.len(), 3, "{one}");
    for vertex in tasks.keys() {
        let sub = get(
            &demo,
            &format!("/jobs/{job}/checkpoints/details/{id}/subtasks/{vertex}"),
        );
        assert_matches(
            "subtask details",
            &sub,
            &TASK_CHECKPOINT_STATISTICS_WITH_SUBTASK_DETAILS,
        );
        assert_eq!(sub["subtasks"].as_array().unwrap().len(), 2);
        assert!(sub["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["className"] == "completed"
                && s["unaligned_checkpoint"] == false
                && s["alignment"]["persisted"] == 0));
    }

    // A checkpoint now.
    let trigger = demo.client.trigger_checkpoint(&job).unwrap();
    let checkpoint = demo
        .client
        .wait_checkpoint(&job, &trigger, PATIENCE)
        .unwrap();
    assert_matches(
        "checkpoint status",
        &get(&demo, &format!("/jobs/{job}/checkpoints/{trigger}")),
        &CHECKPOINT_DONE,
    );
    let entry = get(
        &demo,
        &format!("/jobs/{job}/checkpoints/details/{checkpoint}"),
    );
    assert_eq!(
        (entry["status"].as_str(), entry["is_savepoint"].as_bool()),
        (Some("COMPLETED"), Some(false))
    );

    // A savepoint into a directory under the savepoint root.
    let target = demo.path("savepoints/manual");
    let trigger = demo
        .client
        .trigger_savepoint(
            &job,
            Some(target.to_str().unwrap()),
            weir_core::SavepointFormat::Canonical,
        )
        .unwrap();
    let location = demo
        .client
        .wait_savepoint(&job, &trigger, PATIENCE)
        .unwrap();
    assert_matches(
        "savepoint status",
        &get(&demo, &format!("/jobs/{job}/savepoints/{trigger}")),
        &SAVEPOINT_DONE,
    );
    assert!(Path::new(&location).starts_with(&target), "{location}");
    verify_savepoint(Path::new(&location));
    let stats = get(&demo, &format!("/jobs/{job}/checkpoints"));
    assert_matches(
        "checkpoints after a savepoint",
        &stats,
        &CHECKPOINTING_STATISTICS,
    );
    assert_eq!(
        stats["latest"]["savepoint"]["external_path"],
        location.as_str()
    );
    assert_eq!(stats["latest"]["savepoint"]["checkpoint_type"], "SAVEPOINT");
    assert_eq!(stats["latest"]["savepoint"]["savepointFormat"], "CANONICAL");

    // A native savepoint (formatType NATIVE) is reported as one.
    let trigger = demo
        .client
        .trigger_savepoint(
            &job,
            Some(target.to_str().unwrap()),
            weir_core::SavepointFormat::Native,
        )
        .unwrap();
    let location = demo
        .client
        .wait_savepoint(&job, &trigger, PATIENCE)
        .unwrap();
    verify_savepoint(Path::new(&location));
    let stats = get(&demo, &format!("/jobs/{job}/checkpoints"));
    assert_eq!(stats["latest"]["savepoint"]["savepointFormat"], "NATIVE");

    // Stop with a savepoint (into the default directory): the job ends cleanly.
    demo.after_a_checkpoint();
    let trigger = demo
        .client
        .stop_with_savepoint(&job, None, weir_core::SavepointFormat::Canonical, false)
        .unwrap();
    let last = demo
        .client
        .wait_savepoint(&job, &trigger, PATIENCE)
        .unwrap();
    let (status, stdout, stderr) = demo.wait_exit();
    assert!(status.success(), "{stdout}\n{stderr}");
    let last = Path::new(&last);
    assert!(
        last.starts_with(demo.path("savepoints")),
        "{}",
        last.display()
    );
    verify_savepoint(last);

    // The final savepoint restores: a new run starts from it, with its state and its sources'
    // positions, and goes on checkpointing with higher ids.
    let saved = spend_in(last);
    assert!(!saved.is_empty());
    let saved_id = last
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').nth(1))
        .and_then(|id| id.parse::<i64>().ok())
        .expect("savepoint-<id>-<ms>");
    let mut restored = Demo::start("300ms", &["--from-savepoint", last.to_str().unwrap()]);
    let stats = restored.wait_completed(1);
    let first = stats["latest"]["completed"].clone();
    assert!(
        first["id"].as_i64().unwrap() > saved_id,
        "checkpoint ids continue after the savepoint: {stats}"
    );
    let checkpoint = Path::new(first["external_path"].as_str().unwrap()).to_path_buf();
    let now = spend_in(&checkpoint);
    for (user, total) in &saved {
        assert!(
            now.get(user).is_some_and(|t| t >= total),
            "user {user} had {total} in the savepoint but {:?} after restoring",
            now.get(user)
        );
    }
    restored.client.cancel(&restored.job).unwrap();
    let (status, _, stderr) = restored.wait_exit();
    assert!(status.success(), "{stderr}");
}

#[test]
fn cancelling_ends_the_job_without_a_final_checkpoint() {
    let mut demo = Demo::start("300ms", &[]);
    demo.wait_completed(1);
    let raw = crate::common::request(
        demo.port,
        "PATCH",
        &format!("/jobs/{}?mode=cancel", demo.job),
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(raw.status, 202, "{}", raw.body);
    let (status, stdout, stderr) = demo.wait_exit();
    assert!(status.success(), "{stdout}\n{stderr}");
}

#[test]
fn metrics_use_flinks_names_for_checkpoints_and_records() {
    let demo = Demo::start("300ms", &[]);
    demo.wait_completed(2);
    // Rates need two samples a second apart.
    std::thread::sleep(Duration::from_millis(2200));
    let (status, text) = demo.client.raw("GET", "/metrics", None).unwrap();
    assert_eq!(status, 200);
    let value = |name: &str, filter: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    for name in [
        "lastCheckpointDuration",
        "lastCheckpointSize",
        "lastCheckpointFullSize",
        "numberOfCompletedCheckpoints",
        "numberOfFailedCheckpoints",
        "numberOfInProgressCheckpoints",
    ] {
        assert!(
            text.contains(&format!("# TYPE flink_jobmanager_job_{name} gauge")),
            "{name} missing:\n{text}"
        );
    }
    assert!(value("flink_jobmanager_job_numberOfCompletedCheckpoints{", "") >= 2.0);
    assert!(value("flink_jobmanager_job_lastCheckpointFullSize{", "") > 0.0);
    for name in [
        "checkpointAlignmentTime",
        "checkpointStartDelayNanos",
        "numRecordsIn",
        "numRecordsOut",
    ] {
        assert!(
            text.contains(&format!("flink_taskmanager_job_task_{name}{{")),
            "{name}:\n{text}"
        );
    }
    // Per operator and subtask: the sources emit, the keyed operator receives.
    assert!(
        value(
            "flink_taskmanager_job_task_operator_numRecordsOut{",
            "operator_name=\"events\"}"
        ) > 0.0
    );
    assert!(
        value(
            "flink_taskmanager_job_task_operator_numRecordsIn{",
            "operator_name=\"spend-per-user\""
        ) > 0.0
    );
    assert!(
        value(
            "flink_taskmanager_job_task_numRecordsOutPerSecond{",
            "task_name=\"events\""
        ) > 0.0,
        "{text}"
    );
}

/// The job's state backend, under Flink's name for it.
#[cfg(feature = "rocksdb")]
#[test]
fn the_checkpoint_configuration_names_the_rocksdb_backend_when_the_job_uses_it() {
    let demo = Demo::start("1s", &["-D", "state.backend.type=rocksdb"]);
    demo.wait_completed(1);
    let config = get(&demo, &format!("/jobs/{}/checkpoints/config", demo.job));
    assert_matches(
        "/jobs/:jobid/checkpoints/config",
        &config,
        &CHECKPOINT_CONFIG_INFO,
    );
    assert_eq!(config["state_backend"], "EmbeddedRocksDBStateBackend");

    // Each subtask of the keyed operator reports its database in /metrics; after a checkpoint
    // (which flushes the write buffers) it has files on disk.
    let series = |text: &str, name: &str| -> Vec<f64> {
        let metric = format!("flink_taskmanager_job_task_operator_rocksdb_{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&metric) && l.contains("operator_name=\"spend-per-user\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .collect()
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    let text = loop {
        let (status, text) = demo.client.raw("GET", "/metrics", None).unwrap();
        assert_eq!(status, 200);
        let files = series(&text, "total_sst_files_size");
        if files.len() == 2 && files.iter().all(|&b| b > 0.0) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no RocksDB files reported for both subtasks:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let budget = series(&text, "memory_budget");
    assert_eq!(budget, [268435456.0, 268435456.0], "the default 256 mb");
    for name in ["block_cache_usage", "cur_size_all_mem_tables"] {
        let values = series(&text, name);
        assert_eq!(values.len(), 2, "{name}:\n{text}");
        assert!(
            values.iter().all(|&v| v <= 268435456.0),
            "{name}: {values:?}"
        );
    }
    assert_eq!(series(&text, "estimate_table_readers_mem").len(), 2);
}
