//! The REST server as a library: beside a job run in this process with `execute_job`, it
//! answers over HTTP while the job runs, takes a savepoint on request, and goes on answering
//! with the job's final status after it ended.

use std::time::{Duration, Instant};
use weir_api::prelude::*;
use weir_connectors::{Event, EventGenerator};
use weir_rest::{RestClient, RestConfig, RestServer};
use weir_runtime::{execute_job, ExecutionConfig, JobHandle, StopHandle};

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_job_run_in_process_is_served_while_it_runs_and_after_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("in-process");
    env.set_parallelism(1);
    let sink = CollectSink::default();
    env.source("events", EventGenerator::new(7, 100).with_rate(2000))
        .filter("big", |e: &Event| e.amount > 10)
        .sink("out", sink.clone());
    let graph = env.build().unwrap();
    let mut exec = ExecutionConfig::default();
    exec.checkpoint.interval = Some(Duration::from_millis(200));
    exec.checkpoint.dir = dir.path().join("checkpoints");
    exec.savepoint_dir = Some(dir.path().join("savepoints"));

    let stop = StopHandle::new();
    let handle = JobHandle::new(&graph, &exec.checkpoint, stop.clone());
    let config = RestConfig {
        port: 0,
        default_savepoint_dir: exec.savepoint_dir.clone(),
        ..RestConfig::default()
    };
    let server = RestServer::start(config, handle.clone(), graph.max_parallelism).unwrap();
    assert!(server.addr().ip().is_loopback());
    let client = RestClient::new(&server.url(), None).unwrap();
    let running = {
        let (graph, exec, handle) = (graph.clone(), exec.clone(), handle.clone());
        std::thread::spawn(move || execute_job(&graph, &exec, &handle, &mut |_| {}))
    };

    let job = handle.id().to_string();
    wait_for("the job to run", || {
        client.jobs().unwrap()[0].state == "RUNNING"
    });
    let details = client.get(&format!("/jobs/{job}")).unwrap();
    assert_eq!(details["name"], "in-process");
    assert_eq!(details["vertices"].as_array().unwrap().len(), 3);

    let trigger = client
        .trigger_savepoint(&job, None, weir_core::SavepointFormat::Canonical)
        .unwrap();
    let location = client
        .wait_savepoint(&job, &trigger, Duration::from_secs(60))
        .unwrap();
    assert!(location.starts_with(dir.path().join("savepoints").to_str().unwrap()));
    assert!(std::path::Path::new(&location).join("_metadata").is_file());

    stop.stop();
    running.join().unwrap().unwrap();
    let details = client.get(&format!("/jobs/{job}")).unwrap();
    assert_eq!(details["state"], "FINISHED");
    assert!(details["end-time"].as_i64().unwrap() >= details["start-time"].as_i64().unwrap());
    let refused = client.trigger_checkpoint(&job).unwrap_err();
    assert!(refused.to_string().contains("409"), "{refused}");
    assert!(!sink.records().is_empty());
    server.shutdown();
}
