//! Flink's own REST message classes read every answer: a small Java program, compiled against
//! the jars of the `apache-flink` package, deserialises each body with Flink's strict REST
//! object mapper (`RestMapperUtils.getStrictObjectMapper()`, what Flink's client uses), which
//! refuses unknown fields, `null` for numbers, missing creator fields and unknown enum values.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{post_json, request, run_with_limit, Demo};

const READER: &str = r#"
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.flink.runtime.rest.util.RestMapperUtils;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JavaType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

/** Reads each (class, JSON file) pair of its arguments with Flink's strict REST mapper. */
public class FlinkReads {
  public static void main(String[] args) throws Exception {
    ObjectMapper mapper = RestMapperUtils.getStrictObjectMapper();
    int failures = 0;
    for (int i = 0; i + 1 < args.length; i += 2) {
      String[] types = args[i].split("<|>");
      JavaType type = types.length == 1
          ? mapper.getTypeFactory().constructType(Class.forName(types[0]))
          : mapper.getTypeFactory().constructParametricType(
              Class.forName(types[0]), Class.forName(types[1]));
      String json = new String(Files.readAllBytes(Paths.get(args[i + 1])), "UTF-8");
      try {
        mapper.readValue(json, type);
        System.out.println("read " + args[i]);
      } catch (Exception e) {
        failures++;
        System.out.println("FAILED " + args[i] + " (" + args[i + 1] + "): " + e);
      }
    }
    System.exit(failures == 0 ? 0 : 1);
  }
}
"#;

/// The `lib` directory of the Flink installation scripts/install-test-tools.sh made.
fn flink_lib() -> PathBuf {
    let dir = std::env::var_os("WEIR_FLINK_HOME")
        .map_or_else(|| PathBuf::from("/opt/weir-flink"), PathBuf::from);
    let home = std::fs::read_to_string(dir.join("home")).unwrap_or_else(|_| {
        panic!(
            "Flink is not installed under {}: run scripts/install-test-tools.sh (scripts/test.sh does)",
            dir.display()
        )
    });
    PathBuf::from(home.trim()).join("lib")
}

fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} is not installed: run scripts/install-test-tools.sh"))
}

/// The package of Flink's REST message classes.
pub const FLINK: &str = "org.apache.flink.runtime";

/// Has Flink's strict REST mapper read every body of `answers` (paired with its class: a
/// class name, or `Generic<Parameter>`), and panics with each one it refuses.
pub fn assert_flink_reads(answers: &[(String, String)]) {
    let lib = flink_lib();
    let classpath = format!("{}/*", lib.display());
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("FlinkReads.java"), READER).unwrap();
    let mut javac = Command::new(tool("javac"));
    javac
        .args(["-cp", &classpath, "-d"])
        .arg(work.path())
        .arg(work.path().join("FlinkReads.java"));
    let (status, output) = run_with_limit(javac, Duration::from_secs(120));
    assert!(status.success(), "javac failed:\n{output}");

    let mut java = Command::new(tool("java"));
    java.arg("-cp")
        .arg(format!("{}:{classpath}", work.path().display()))
        .arg("FlinkReads");
    for (i, (class, body)) in answers.iter().enumerate() {
        let file = work.path().join(format!("answer-{i}.json"));
        std::fs::write(&file, body).unwrap();
        java.arg(class).arg(file);
    }
    let (status, output) = run_with_limit(java, Duration::from_secs(120));
    assert!(
        status.success(),
        "Flink's classes refused an answer:\n{output}"
    );
    let read = output.lines().filter(|l| l.starts_with("read ")).count();
    assert_eq!(read, answers.len(), "{output}");
}

#[test]
fn flinks_own_rest_classes_read_every_answer_of_a_weir_job() {
    // Where Flink is not installed, this fails before a job is started.
    flink_lib();
    let demo = Demo::start("300ms", &[]);
    demo.wait_completed(2);
    let job = demo.job.clone();
    let port = demo.port;
    let get = |path: &str| -> String {
        let answer = request(port, "GET", path, &[], b"");
        assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
        answer.body
    };
    let stats = demo
        .client
        .get(&format!("/jobs/{job}/checkpoints"))
        .unwrap();
    let checkpoint = stats["latest"]["completed"]["id"].as_i64().unwrap();
    let details = demo
        .client
        .get(&format!("/jobs/{job}/checkpoints/details/{checkpoint}"))
        .unwrap();
    let vertex = details["tasks"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();

    // Operations: a completed savepoint and checkpoint, and a failed savepoint.
    let savepoint = post_json(port, &format!("/jobs/{job}/savepoints"), "{}");
    assert_eq!(savepoint.status, 202);
    let savepoint_id = savepoint.json()["request-id"].as_str().unwrap().to_string();
    demo.client
        .wait_savepoint(&job, &savepoint_id, Duration::from_secs(60))
        .unwrap();
    let trigger = demo.client.trigger_checkpoint(&job).unwrap();
    demo.client
        .wait_checkpoint(&job, &trigger, Duration::from_secs(60))
        .unwrap();
    std::fs::create_dir_all(demo.path("savepoints")).unwrap();
    let file = demo.path("savepoints/a-file");
    std::fs::write(&file, b"x").unwrap();
    let failing = demo
        .client
        .trigger_savepoint(
            &job,
            Some(file.to_str().unwrap()),
            weir_core::SavepointFormat::Canonical,
        )
        .unwrap();
    assert!(demo
        .client
        .wait_savepoint(&job, &failing, Duration::from_secs(60))
        .is_err());
    let refused = post_json(port, &format!("/jobs/{job}/savepoints"), "{\"bad\": 1}");
    assert_eq!(refused.status, 400);

    let p = FLINK;
    let savepoint_result = format!(
        "{p}.rest.handler.async.AsynchronousOperationResult<{p}.rest.messages.job.savepoints.SavepointInfo>"
    );
    let answers: Vec<(String, String)> = vec![
        (format!("{p}.rest.messages.DashboardConfiguration"), get("/config")),
        (format!("{p}.rest.handler.legacy.messages.ClusterOverviewWithVersion"), get("/overview")),
        (format!("{p}.messages.webmonitor.JobIdsWithStatusOverview"), get("/jobs")),
        (format!("{p}.messages.webmonitor.MultipleJobsDetails"), get("/jobs/overview")),
        (format!("{p}.rest.messages.job.JobDetailsInfo"), get(&format!("/jobs/{job}"))),
        (format!("{p}.rest.messages.JobExceptionsInfoWithHistory"), get(&format!("/jobs/{job}/exceptions"))),
        (format!("{p}.rest.messages.checkpoints.CheckpointingStatistics"), get(&format!("/jobs/{job}/checkpoints"))),
        (format!("{p}.rest.messages.checkpoints.CheckpointConfigInfo"), get(&format!("/jobs/{job}/checkpoints/config"))),
        (format!("{p}.rest.messages.checkpoints.CheckpointStatistics"), get(&format!("/jobs/{job}/checkpoints/details/{checkpoint}"))),
        (
            format!("{p}.rest.messages.checkpoints.TaskCheckpointStatisticsWithSubtaskDetails"),
            get(&format!("/jobs/{job}/checkpoints/details/{checkpoint}/subtasks/{vertex}")),
        ),
        (format!("{p}.rest.handler.async.TriggerResponse"), savepoint.body.clone()),
        (savepoint_result.clone(), get(&format!("/jobs/{job}/savepoints/{savepoint_id}"))),
        (savepoint_result, get(&format!("/jobs/{job}/savepoints/{failing}"))),
        (
            format!("{p}.rest.handler.async.AsynchronousOperationResult<{p}.rest.messages.checkpoints.CheckpointInfo>"),
            get(&format!("/jobs/{job}/checkpoints/{trigger}")),
        ),
        (format!("{p}.rest.messages.ErrorResponseBody"), refused.body.clone()),
    ];
    assert_flink_reads(&answers);
}
