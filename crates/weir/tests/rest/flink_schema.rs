//! Flink's response schemas, written out from the `components/schemas` of Flink's published
//! REST specification (`docs/static/generated/rest_v1_dispatcher.yml`, version v1/2.3), and a
//! checker: every field the schema lists must be present with its JSON type. `int64`/`int32`
//! fields must be integers (in range), `double` fields numbers, and nothing may be `null`
//! unless Flink itself writes `null` there (a latest checkpoint that does not exist yet, a
//! checkpoint's `savepointFormat`, an operation still in progress).

use serde_json::Value;

/// A JSON type from the specification.
pub enum T {
    /// `integer, format: int64`.
    Long,
    /// `integer, format: int32`.
    Int,
    /// `number, format: double`.
    Double,
    Str,
    /// A string with one of these values (an `enum`).
    Enum(&'static [&'static str]),
    /// A 32-hex-digit id (`JobID`, `JobVertexID`, `TriggerId`).
    Hex32,
    Bool,
    /// An object with (at least) these fields.
    Obj(&'static [(&'static str, T)]),
    /// An object with any keys, each value of this type (`additionalProperties`).
    Map(&'static T),
    Array(&'static T),
    /// A type Flink may also write as `null`.
    Nullable(&'static T),
    /// An object discriminated by `className`: the common fields, then each class's own.
    Tagged(
        &'static [(&'static str, T)],
        &'static [(&'static str, &'static [(&'static str, T)])],
    ),
}

/// The problems of `value` against `schema`, each with its JSON path.
pub fn problems(value: &Value, schema: &T) -> Vec<String> {
    let mut out = Vec::new();
    check(value, schema, "$", &mut out);
    out
}

/// Panics with every problem of `value` against `schema` (named `what`).
pub fn assert_matches(what: &str, value: &Value, schema: &T) {
    let found = problems(value, schema);
    assert!(
        found.is_empty(),
        "{what} does not match Flink's schema:\n  {}\nin {value:#}",
        found.join("\n  ")
    );
}

fn fields(value: &Value, list: &[(&str, T)], path: &str, out: &mut Vec<String>) {
    let Some(object) = value.as_object() else {
        out.push(format!("{path}: expected an object, got {value}"));
        return;
    };
    for (name, schema) in list {
        match object.get(*name) {
            None => out.push(format!("{path}.{name}: missing")),
            Some(v) => check(v, schema, &format!("{path}.{name}"), out),
        }
    }
}

fn check(value: &Value, schema: &T, path: &str, out: &mut Vec<String>) {
    let mut wrong = |expected: &str| out.push(format!("{path}: expected {expected}, got {value}"));
    match schema {
        T::Long => {
            if !(value.is_i64()
                || value.is_u64() && value.as_u64().unwrap_or(u64::MAX) <= i64::MAX as u64)
            {
                wrong("an int64");
            }
        }
        T::Int => {
            let in_range = value.as_i64().is_some_and(|v| i32::try_from(v).is_ok());
            if !in_range {
                wrong("an int32");
            }
        }
        T::Double => {
            if !value.is_number() {
                wrong("a number");
            }
        }
        T::Str => {
            if !value.is_string() {
                wrong("a string");
            }
        }
        T::Enum(values) => {
            if !value.as_str().is_some_and(|s| values.contains(&s)) {
                wrong(&format!("one of {values:?}"));
            }
        }
        T::Hex32 => {
            if !value
                .as_str()
                .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                wrong("32 hex digits");
            }
        }
        T::Bool => {
            if !value.is_boolean() {
                wrong("a boolean");
            }
        }
        T::Obj(list) => fields(value, list, path, out),
        T::Map(inner) => match value.as_object() {
            Some(map) => {
                for (k, v) in map {
                    check(v, inner, &format!("{path}.{k}"), out);
                }
            }
            None => wrong("an object"),
        },
        T::Array(inner) => match value.as_array() {
            Some(items) => {
                for (i, v) in items.iter().enumerate() {
                    check(v, inner, &format!("{path}[{i}]"), out);
                }
            }
            None => wrong("an array"),
        },
        T::Nullable(inner) => {
            if !value.is_null() {
                check(value, inner, path, out);
            }
        }
        T::Tagged(common, classes) => {
            fields(value, common, path, out);
            let class = value.get("className").and_then(Value::as_str).unwrap_or("");
            match classes.iter().find(|(name, _)| *name == class) {
                Some((_, own)) => fields(value, own, path, out),
                None => out.push(format!("{path}.className: unknown class '{class}'")),
            }
        }
    }
}

pub const JOB_STATUS: T = T::Enum(&[
    "INITIALIZING",
    "CREATED",
    "RUNNING",
    "FAILING",
    "FAILED",
    "CANCELLING",
    "CANCELED",
    "FINISHED",
    "RESTARTING",
    "SUSPENDED",
    "RECONCILING",
]);
pub const EXECUTION_STATE: T = T::Enum(&[
    "CREATED",
    "SCHEDULED",
    "DEPLOYING",
    "RUNNING",
    "FINISHED",
    "CANCELING",
    "CANCELED",
    "FAILED",
    "RECONCILING",
    "INITIALIZING",
]);
pub const CHECKPOINT_STATS_STATUS: T = T::Enum(&["IN_PROGRESS", "COMPLETED", "FAILED"]);

/// `DashboardConfiguration` (`GET /config`).
pub const DASHBOARD_CONFIGURATION: T = T::Obj(&[
    ("refresh-interval", T::Long),
    ("timezone-name", T::Str),
    ("timezone-offset", T::Int),
    ("flink-version", T::Str),
    ("flink-revision", T::Str),
    (
        "features",
        T::Obj(&[
            ("web-submit", T::Bool),
            ("web-cancel", T::Bool),
            ("web-rescale", T::Bool),
            ("web-history", T::Bool),
        ]),
    ),
]);

/// `ClusterOverviewWithVersion` (`GET /overview`).
pub const CLUSTER_OVERVIEW_WITH_VERSION: T = T::Obj(&[
    ("taskmanagers", T::Int),
    ("taskmanagers-blocked", T::Int),
    ("slots-total", T::Int),
    ("slots-available", T::Int),
    ("slots-free-and-blocked", T::Int),
    ("jobs-running", T::Int),
    ("jobs-finished", T::Int),
    ("jobs-cancelled", T::Int),
    ("jobs-failed", T::Int),
    ("flink-version", T::Str),
    ("flink-commit", T::Str),
]);

/// `JobIdsWithStatusOverview` (`GET /jobs`).
pub const JOB_IDS_WITH_STATUS_OVERVIEW: T = T::Obj(&[(
    "jobs",
    T::Array(&T::Obj(&[("id", T::Hex32), ("status", JOB_STATUS)])),
)]);

/// `MultipleJobsDetails` (`GET /jobs/overview`).
pub const MULTIPLE_JOBS_DETAILS: T = T::Obj(&[(
    "jobs",
    T::Array(&T::Obj(&[
        ("jid", T::Hex32),
        ("name", T::Str),
        ("start-time", T::Long),
        ("end-time", T::Long),
        ("duration", T::Long),
        ("state", JOB_STATUS),
        ("last-modification", T::Long),
        ("tasks", T::Map(&T::Int)),
        ("jobType", T::Enum(&["BATCH", "STREAMING"])),
        (
            "schedulerType",
            T::Enum(&["Default", "Adaptive", "AdaptiveBatch"]),
        ),
        ("pending-operators", T::Int),
    ])),
)]);

const IO_METRICS_INFO: T = T::Obj(&[
    ("read-bytes", T::Long),
    ("read-bytes-complete", T::Bool),
    ("write-bytes", T::Long),
    ("write-bytes-complete", T::Bool),
    ("read-records", T::Long),
    ("read-records-complete", T::Bool),
    ("write-records", T::Long),
    ("write-records-complete", T::Bool),
    ("accumulated-backpressured-time", T::Long),
    ("accumulated-idle-time", T::Long),
    ("accumulated-busy-time", T::Double),
]);

/// `JobDetailsInfo` (`GET /jobs/:jobid`). `application-id` and `slotSharingGroupId` are ids
/// that Flink's serialisers write as hex strings (the generated specification shows their Java
/// fields instead); `stream-graph` is left out by Flink for streaming jobs.
pub const JOB_DETAILS_INFO: T = T::Obj(&[
    ("jid", T::Hex32),
    ("name", T::Str),
    ("isStoppable", T::Bool),
    ("state", JOB_STATUS),
    ("job-type", T::Enum(&["BATCH", "STREAMING"])),
    (
        "schedulerType",
        T::Enum(&["Default", "Adaptive", "AdaptiveBatch"]),
    ),
    ("start-time", T::Long),
    ("end-time", T::Long),
    ("duration", T::Long),
    ("maxParallelism", T::Long),
    ("application-id", T::Hex32),
    ("now", T::Long),
    ("timestamps", T::Map(&T::Long)),
    (
        "vertices",
        T::Array(&T::Obj(&[
            ("id", T::Hex32),
            ("slotSharingGroupId", T::Hex32),
            ("name", T::Str),
            ("maxParallelism", T::Int),
            ("parallelism", T::Int),
            ("status", EXECUTION_STATE),
            ("start-time", T::Long),
            ("end-time", T::Long),
            ("duration", T::Long),
            ("tasks", T::Map(&T::Int)),
            ("metrics", IO_METRICS_INFO),
        ])),
    ),
    ("status-counts", T::Map(&T::Int)),
    (
        "plan",
        T::Obj(&[
            ("jid", T::Str),
            ("name", T::Str),
            ("type", T::Str),
            (
                "nodes",
                T::Array(&T::Obj(&[
                    ("id", T::Str),
                    ("parallelism", T::Long),
                    ("operator", T::Str),
                    ("operator_strategy", T::Str),
                    ("description", T::Str),
                    (
                        "inputs",
                        T::Array(&T::Obj(&[
                            ("num", T::Long),
                            ("id", T::Str),
                            ("ship_strategy", T::Str),
                            ("exchange", T::Str),
                        ])),
                    ),
                    ("optimizer_properties", T::Map(&T::Str)),
                ])),
            ),
        ]),
    ),
    ("pending-operators", T::Int),
]);

/// `StatsSummaryDto`.
const STATS_SUMMARY: T = T::Obj(&[
    ("min", T::Long),
    ("max", T::Long),
    ("avg", T::Long),
    ("p50", T::Double),
    ("p90", T::Double),
    ("p95", T::Double),
    ("p99", T::Double),
    ("p999", T::Double),
]);

/// `TaskCheckpointStatistics`.
const TASK_CHECKPOINT_STATISTICS_FIELDS: &[(&str, T)] = &[
    ("id", T::Long),
    ("status", CHECKPOINT_STATS_STATUS),
    ("latest_ack_timestamp", T::Long),
    ("checkpointed_size", T::Long),
    ("state_size", T::Long),
    ("end_to_end_duration", T::Long),
    ("alignment_buffered", T::Long),
    ("processed_data", T::Long),
    ("persisted_data", T::Long),
    ("num_subtasks", T::Int),
    ("num_acknowledged_subtasks", T::Int),
];

/// `CheckpointStatistics` with its subclasses `CompletedCheckpointStatistics`,
/// `FailedCheckpointStatistics` and `PendingCheckpointStatistics`.
pub const CHECKPOINT_STATISTICS: T = T::Tagged(
    &[
        ("className", T::Str),
        ("id", T::Long),
        ("status", CHECKPOINT_STATS_STATUS),
        ("is_savepoint", T::Bool),
        ("savepointFormat", T::Nullable(&T::Str)),
        ("trigger_timestamp", T::Long),
        ("latest_ack_timestamp", T::Long),
        ("checkpointed_size", T::Long),
        ("state_size", T::Long),
        ("end_to_end_duration", T::Long),
        ("alignment_buffered", T::Long),
        ("processed_data", T::Long),
        ("persisted_data", T::Long),
        ("num_subtasks", T::Int),
        ("num_acknowledged_subtasks", T::Int),
        (
            "checkpoint_type",
            T::Enum(&[
                "CHECKPOINT",
                "UNALIGNED_CHECKPOINT",
                "SAVEPOINT",
                "SYNC_SAVEPOINT",
            ]),
        ),
        ("tasks", T::Map(&T::Obj(TASK_CHECKPOINT_STATISTICS_FIELDS))),
    ],
    &[
        (
            "completed",
            &[("external_path", T::Str), ("discarded", T::Bool)],
        ),
        (
            "failed",
            &[("failure_timestamp", T::Long), ("failure_message", T::Str)],
        ),
        ("in_progress", &[]),
    ],
);

/// `CheckpointingStatistics` (`GET /jobs/:jobid/checkpoints`).
pub const CHECKPOINTING_STATISTICS: T = T::Obj(&[
    (
        "counts",
        T::Obj(&[
            ("restored", T::Long),
            ("total", T::Long),
            ("in_progress", T::Int),
            ("completed", T::Long),
            ("failed", T::Long),
        ]),
    ),
    (
        "summary",
        T::Obj(&[
            ("checkpointed_size", STATS_SUMMARY),
            ("state_size", STATS_SUMMARY),
            ("end_to_end_duration", STATS_SUMMARY),
            ("alignment_buffered", STATS_SUMMARY),
            ("processed_data", STATS_SUMMARY),
            ("persisted_data", STATS_SUMMARY),
        ]),
    ),
    (
        "latest",
        T::Obj(&[
            ("completed", T::Nullable(&CHECKPOINT_STATISTICS)),
            ("savepoint", T::Nullable(&CHECKPOINT_STATISTICS)),
            ("failed", T::Nullable(&CHECKPOINT_STATISTICS)),
            (
                "restored",
                T::Nullable(&T::Obj(&[
                    ("id", T::Long),
                    ("restore_timestamp", T::Long),
                    ("is_savepoint", T::Bool),
                    ("external_path", T::Str),
                ])),
            ),
        ]),
    ),
    ("history", T::Array(&CHECKPOINT_STATISTICS)),
]);

/// `TaskCheckpointStatisticsWithSubtaskDetails`
/// (`GET /jobs/:jobid/checkpoints/details/:checkpointid/subtasks/:vertexid`).
pub const TASK_CHECKPOINT_STATISTICS_WITH_SUBTASK_DETAILS: T = T::Obj(&[
    ("id", T::Long),
    ("status", CHECKPOINT_STATS_STATUS),
    ("latest_ack_timestamp", T::Long),
    ("checkpointed_size", T::Long),
    ("state_size", T::Long),
    ("end_to_end_duration", T::Long),
    ("alignment_buffered", T::Long),
    ("processed_data", T::Long),
    ("persisted_data", T::Long),
    ("num_subtasks", T::Int),
    ("num_acknowledged_subtasks", T::Int),
    (
        "summary",
        T::Obj(&[
            ("checkpointed_size", STATS_SUMMARY),
            ("state_size", STATS_SUMMARY),
            ("end_to_end_duration", STATS_SUMMARY),
            (
                "checkpoint_duration",
                T::Obj(&[("sync", STATS_SUMMARY), ("async", STATS_SUMMARY)]),
            ),
            (
                "alignment",
                T::Obj(&[
                    ("buffered", STATS_SUMMARY),
                    ("processed", STATS_SUMMARY),
                    ("persisted", STATS_SUMMARY),
                    ("duration", STATS_SUMMARY),
                ]),
            ),
            ("start_delay", STATS_SUMMARY),
        ]),
    ),
    (
        "subtasks",
        T::Array(&T::Tagged(
            &[("className", T::Str), ("index", T::Int), ("status", T::Str)],
            &[
                (
                    "completed",
                    &[
                        ("ack_timestamp", T::Long),
                        ("end_to_end_duration", T::Long),
                        ("state_size", T::Long),
                        ("checkpointed_size", T::Long),
                        (
                            "checkpoint",
                            T::Obj(&[("sync", T::Long), ("async", T::Long)]),
                        ),
                        (
                            "alignment",
                            T::Obj(&[
                                ("buffered", T::Long),
                                ("processed", T::Long),
                                ("persisted", T::Long),
                                ("duration", T::Long),
                            ]),
                        ),
                        ("start_delay", T::Long),
                        ("unaligned_checkpoint", T::Bool),
                        ("aborted", T::Bool),
                    ],
                ),
                ("pending", &[]),
            ],
        )),
    ),
]);

/// `CheckpointConfigInfo` (`GET /jobs/:jobid/checkpoints/config`).
pub const CHECKPOINT_CONFIG_INFO: T = T::Obj(&[
    ("mode", T::Enum(&["AT_LEAST_ONCE", "EXACTLY_ONCE"])),
    ("interval", T::Long),
    ("timeout", T::Long),
    ("min_pause", T::Long),
    ("max_concurrent", T::Long),
    (
        "externalization",
        T::Obj(&[("enabled", T::Bool), ("delete_on_cancellation", T::Bool)]),
    ),
    ("state_backend", T::Str),
    ("checkpoint_storage", T::Str),
    ("unaligned_checkpoints", T::Bool),
    ("tolerable_failed_checkpoints", T::Int),
    ("aligned_checkpoint_timeout", T::Long),
    ("checkpoints_after_tasks_finish", T::Bool),
    ("state_changelog_enabled", T::Bool),
    ("changelog_periodic_materialization_interval", T::Long),
    ("changelog_storage", T::Str),
]);

/// `TriggerResponse`.
pub const TRIGGER_RESPONSE: T = T::Obj(&[("request-id", T::Hex32)]);

/// `AsynchronousOperationResult` of a completed `CheckpointInfo`.
pub const CHECKPOINT_DONE: T = T::Obj(&[
    (
        "status",
        T::Obj(&[("id", T::Enum(&["IN_PROGRESS", "COMPLETED"]))]),
    ),
    ("operation", T::Obj(&[("checkpointId", T::Long)])),
]);

/// `AsynchronousOperationResult` of a completed `SavepointInfo`.
pub const SAVEPOINT_DONE: T = T::Obj(&[
    (
        "status",
        T::Obj(&[("id", T::Enum(&["IN_PROGRESS", "COMPLETED"]))]),
    ),
    ("operation", T::Obj(&[("location", T::Str)])),
]);

/// `ErrorResponseBody`.
pub const ERROR_RESPONSE: T = T::Obj(&[("errors", T::Array(&T::Str))]);

#[test]
fn the_checker_finds_missing_fields_wrong_types_and_nulls() {
    let schema = T::Obj(&[("a", T::Long), ("b", T::Str), ("c", T::Nullable(&T::Int))]);
    assert!(problems(&serde_json::json!({"a": 1, "b": "x", "c": null}), &schema).is_empty());
    let bad = problems(&serde_json::json!({"a": null, "c": 1.5}), &schema);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().any(|p| p.contains("$.b: missing")));
    assert!(bad.iter().any(|p| p.contains("$.a: expected an int64")));
}
