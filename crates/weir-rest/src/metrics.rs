//! `/metrics`: the job's metrics in Prometheus' text format, under the names Flink's
//! Prometheus reporter gives them, so dashboards and alerts written for Flink read Weir.
//!
//! Job scope (`flink_jobmanager_job_*`, labels `job_id`, `job_name`): `lastCheckpointDuration`
//! (ms), `lastCheckpointSize` (bytes this checkpoint wrote: its incremental size),
//! `lastCheckpointFullSize` (bytes of all state it references), `lastCheckpointPersistedData`
//! (bytes of channel state it wrote), `lastCheckpointProcessedData` (records processed during
//! its alignment: records, where Flink counts bytes), `lastCompletedCheckpointId`,
//! `lastCheckpointRestoreTimestamp`, `numberOfCompletedCheckpoints`,
//! `numberOfFailedCheckpoints`, `numberOfInProgressCheckpoints`, `totalNumberOfCheckpoints`,
//! `numRestarts`, `uptime` (ms).
//!
//! Task scope (`flink_taskmanager_job_task_*`, plus `task_id`, `task_name`, `subtask_index`,
//! `task_attempt_num`), one series per subtask: `numRecordsIn`, `numRecordsOut`,
//! `numRecordsInPerSecond`, `numRecordsOutPerSecond`, and of the last completed checkpoint
//! `checkpointAlignmentTime` and `checkpointStartDelayNanos` (both in nanoseconds, as Flink).
//! The record counts are repeated at operator scope (`flink_taskmanager_job_task_operator_*`
//! with `operator_id`, `operator_name`): every Weir operator is its own task.
//!
//! Back-pressure: `backPressuredTimeMsPerSecond` at task scope.
//!
//! Subtasks keeping keyed state in RocksDB (`state.backend.type: rocksdb`) add, at operator
//! scope and in bytes, what their database uses, refreshed about once a second:
//! `rocksdb_memory_budget` (the option), `rocksdb_block_cache_usage`,
//! `rocksdb_cur_size_all_mem_tables`, `rocksdb_estimate_table_readers_mem` and
//! `rocksdb_total_sst_files_size` (Flink's RocksDB native metrics of the same names).

use std::collections::HashMap;
use std::fmt::Write;
use weir_checkpoint::{CheckpointStats, JobStatus};
use weir_core::OperatorId;
use weir_runtime::JobHandle;

use crate::ids::vertex_id;
use crate::rates::Rates;

/// Escapes a label value: backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Label names and values of one series.
type Labels = Vec<(&'static str, String)>;

/// One subtask's series: its task-scope and operator-scope labels, and the values of
/// `numRecordsIn`, `numRecordsOut`, their per-second rates, alignment and start delay.
struct SubtaskSeries {
    task: Labels,
    operator: Labels,
    values: [f64; 7],
    rocksdb: Option<weir_runtime::metrics::LsmUsage>,
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} gauge");
    }

    fn sample(&mut self, name: &str, labels: &[(&'static str, String)], value: f64) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(self.out, "{name}{{{}}} {value}", labels.join(","));
    }
}

/// The metrics text of `job`.
pub fn render(job: &JobHandle, stats: &CheckpointStats, rates: &Rates) -> String {
    let mut out = String::with_capacity(4096);
    let mut f = Family { out: &mut out };
    let job_labels: Labels = vec![
        ("job_id", job.id().to_string()),
        ("job_name", job.name().to_string()),
    ];
    let last = stats.latest.completed.as_ref();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let uptime = if job.status() == JobStatus::Running {
        now_ms.saturating_sub(job.start_time_ms())
    } else {
        0
    };
    let job_metrics: [(&str, &str, f64); 13] = [
        (
            "lastCheckpointDuration",
            "The time it took to complete the last checkpoint, in milliseconds.",
            last.map_or(0.0, |e| e.end_to_end_duration_ms as f64),
        ),
        (
            "lastCheckpointSize",
            "The checkpointed (incremental) size of the last checkpoint, in bytes.",
            last.map_or(0.0, |e| e.persisted_size as f64),
        ),
        (
            "lastCheckpointFullSize",
            "The full size of the state of the last checkpoint, in bytes.",
            last.map_or(0.0, |e| e.state_size as f64),
        ),
        (
            "lastCheckpointPersistedData",
            "Bytes of in-flight data (channel state) the last checkpoint wrote; 0 if it was aligned.",
            last.map_or(0.0, |e| e.persisted_data as f64),
        ),
        (
            "lastCheckpointProcessedData",
            "Records processed while the last checkpoint's barriers were aligned (records, not bytes).",
            last.map_or(0.0, |e| e.processed_records as f64),
        ),
        (
            "lastCompletedCheckpointId",
            "The id of the last completed checkpoint.",
            last.map_or(-1.0, |e| e.id.0 as f64),
        ),
        (
            "lastCheckpointRestoreTimestamp",
            "When the job was last restored from a checkpoint, in ms since the epoch (-1: never).",
            stats
                .latest
                .restored
                .map_or(-1.0, |r| r.restore_timestamp_ms as f64),
        ),
        (
            "numberOfCompletedCheckpoints",
            "The number of successfully completed checkpoints.",
            stats.counts.completed as f64,
        ),
        (
            "numberOfFailedCheckpoints",
            "The number of failed checkpoints.",
            stats.counts.failed as f64,
        ),
        (
            "numberOfInProgressCheckpoints",
            "The number of checkpoints in progress.",
            stats.counts.in_progress as f64,
        ),
        (
            "totalNumberOfCheckpoints",
            "The number of checkpoints started (in progress, completed and failed).",
            stats.counts.total as f64,
        ),
        (
            "numRestarts",
            "How often the job restarted after a failure.",
            job.restarts() as f64,
        ),
        (
            "uptime",
            "How long the job has been running without interruption, in milliseconds.",
            uptime as f64,
        ),
    ];
    for (name, help, value) in job_metrics {
        let full = format!("flink_jobmanager_job_{name}");
        f.header(&full, help);
        f.sample(&full, &job_labels, value);
    }

    // Per subtask: labels, records and the last checkpoint's timings.
    let vertices = job.vertices();
    let attempt = job.attempt().to_string();
    let mut counts = job.subtask_counts();
    counts.sort_by_key(|c| (c.vertex, c.index));
    let mut last_acks: HashMap<(OperatorId, u32), (u64, u64)> = HashMap::new();
    if let Some(e) = last {
        for line in &e.subtasks {
            if let Some(ack) = line.ack {
                last_acks.insert(
                    (line.subtask.operator, line.subtask.index),
                    (ack.alignment_duration_ms, ack.start_delay_ms),
                );
            }
        }
    }
    let series: Vec<SubtaskSeries> = counts
        .iter()
        .filter_map(|c| {
            let v = vertices.get(c.vertex)?;
            let rate = rates.subtask(c.vertex, c.index);
            let (alignment_ms, delay_ms) = last_acks
                .get(&(OperatorId::from_uid(&v.uid), c.index))
                .copied()
                .unwrap_or((0, 0));
            let mut task = job_labels.clone();
            task.push(("task_id", vertex_id(&v.uid)));
            task.push(("task_name", v.name.clone()));
            task.push(("subtask_index", c.index.to_string()));
            task.push(("task_attempt_num", attempt.clone()));
            let mut operator = task.clone();
            operator.push(("operator_id", vertex_id(&v.uid)));
            operator.push(("operator_name", v.name.clone()));
            Some(SubtaskSeries {
                task,
                operator,
                values: [
                    c.records_in as f64,
                    c.records_out as f64,
                    rate.records_in_per_second,
                    rate.records_out_per_second,
                    (alignment_ms as f64) * 1e6,
                    (delay_ms as f64) * 1e6,
                    rate.backpressured_ms_per_second,
                ],
                rocksdb: c.rocksdb,
            })
        })
        .collect();
    let task_metrics: [(&str, &str, usize, bool); 7] = [
        ("numRecordsIn", "Records this subtask has received.", 0, true),
        ("numRecordsOut", "Records this subtask has emitted.", 1, true),
        ("numRecordsInPerSecond", "Records received per second.", 2, true),
        ("numRecordsOutPerSecond", "Records emitted per second.", 3, true),
        (
            "checkpointAlignmentTime",
            "Barrier alignment time of the last completed checkpoint, in nanoseconds.",
            4,
            false,
        ),
        (
            "checkpointStartDelayNanos",
            "Time from the checkpoint's trigger to its barrier reaching this subtask, in nanoseconds.",
            5,
            false,
        ),
        (
            "backPressuredTimeMsPerSecond",
            "Milliseconds per second this subtask was blocked on full output channels.",
            6,
            false,
        ),
    ];
    for (name, help, index, per_operator) in task_metrics {
        let full = format!("flink_taskmanager_job_task_{name}");
        f.header(&full, help);
        for s in &series {
            f.sample(&full, &s.task, s.values[index]);
        }
        if per_operator {
            let full = format!("flink_taskmanager_job_task_operator_{name}");
            f.header(&full, help);
            for s in &series {
                f.sample(&full, &s.operator, s.values[index]);
            }
        }
    }
    // The RocksDB state backend's figures, at operator scope as Flink reports its native
    // RocksDB metrics, for the subtasks keeping keyed state there.
    type Read = fn(&weir_runtime::metrics::LsmUsage) -> u64;
    let rocksdb_metrics: [(&str, &str, Read); 5] = [
        (
            "rocksdb_memory_budget",
            "The memory this subtask's keyed state may use (state.backend.rocksdb.memory.fixed-per-slot), in bytes.",
            |u| u.memory_budget,
        ),
        (
            "rocksdb_block_cache_usage",
            "Bytes in RocksDB's block cache.",
            |u| u.block_cache_usage,
        ),
        (
            "rocksdb_cur_size_all_mem_tables",
            "Bytes in RocksDB's write buffers (memtables).",
            |u| u.mem_tables,
        ),
        (
            "rocksdb_estimate_table_readers_mem",
            "Bytes of RocksDB's index and filter blocks held outside the block cache.",
            |u| u.table_readers,
        ),
        (
            "rocksdb_total_sst_files_size",
            "Bytes of RocksDB's files on local disk.",
            |u| u.sst_files,
        ),
    ];
    if series.iter().any(|s| s.rocksdb.is_some()) {
        for (name, help, read) in rocksdb_metrics {
            let full = format!("flink_taskmanager_job_task_operator_{name}");
            f.header(&full, help);
            for s in &series {
                if let Some(usage) = &s.rocksdb {
                    f.sample(&full, &s.operator, read(usage) as f64);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
