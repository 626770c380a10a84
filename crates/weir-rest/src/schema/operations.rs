//! The bodies of triggered operations: the requests (`CheckpointTriggerRequestBody`,
//! `SavepointTriggerRequestBody`, `StopWithSavepointRequestBody`), the answer to a trigger
//! (`TriggerResponse`) and the polled status (`AsynchronousOperationResult` of `CheckpointInfo`
//! or `SavepointInfo`).
//!
//! Requests are parsed strictly: an unknown field or a value of the wrong type is a 400 that
//! names it, as Flink's strict object mapper does.

use serde::{Deserialize, Serialize};

use crate::java_throwable::SerializedThrowable;

/// Flink's `CheckpointTriggerRequestBody`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointTriggerRequest {
    /// `CONFIGURED`, `FULL` or `INCREMENTAL`. Weir writes what its configuration says
    /// (`execution.checkpointing.incremental`); the value is checked but not acted on.
    #[serde(rename = "checkpointType")]
    pub checkpoint_type: Option<String>,
    #[serde(rename = "triggerId")]
    pub trigger_id: Option<String>,
}

/// Flink's `SavepointTriggerRequestBody`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavepointTriggerRequest {
    #[serde(rename = "target-directory")]
    pub target_directory: Option<String>,
    /// Stop the job once the savepoint completed.
    #[serde(rename = "cancel-job")]
    pub cancel_job: Option<bool>,
    /// `CANONICAL` or `NATIVE`: Weir's savepoints are self-contained either way.
    #[serde(rename = "formatType")]
    pub format_type: Option<String>,
    #[serde(rename = "triggerId")]
    pub trigger_id: Option<String>,
}

/// Flink's `StopWithSavepointRequestBody`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopWithSavepointRequest {
    #[serde(rename = "targetDirectory")]
    pub target_directory: Option<String>,
    /// Flink's MAX_WATERMARK before the savepoint; Weir has no event-time timers to flush,
    /// so `true` is refused rather than silently ignored.
    pub drain: Option<bool>,
    #[serde(rename = "formatType")]
    pub format_type: Option<String>,
    #[serde(rename = "triggerId")]
    pub trigger_id: Option<String>,
}

/// Flink's `TriggerResponse`.
#[derive(Clone, Debug, Serialize)]
pub struct TriggerResponse {
    #[serde(rename = "request-id")]
    pub request_id: String,
}

/// Flink's `QueueStatus`.
#[derive(Clone, Debug, Serialize)]
pub struct QueueStatus {
    pub id: &'static str,
}

/// Flink's `CheckpointInfo`: the outcome of a triggered checkpoint.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointInfo {
    #[serde(rename = "checkpointId", skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<i64>,
    #[serde(rename = "failureCause", skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<SerializedThrowable>,
}

/// Flink's `SavepointInfo`: the outcome of a savepoint (exactly one field is set).
#[derive(Clone, Debug, Serialize)]
pub struct SavepointInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(rename = "failure-cause", skip_serializing_if = "Option::is_none")]
    pub failure_cause: Option<SerializedThrowable>,
}

/// Flink's `AsynchronousOperationResult`: `operation` is `null` while in progress.
#[derive(Clone, Debug, Serialize)]
pub struct AsynchronousOperationResult<T: Serialize> {
    pub status: QueueStatus,
    pub operation: Option<T>,
}

impl<T: Serialize> AsynchronousOperationResult<T> {
    pub fn in_progress() -> Self {
        AsynchronousOperationResult {
            status: QueueStatus { id: "IN_PROGRESS" },
            operation: None,
        }
    }

    pub fn completed(operation: T) -> Self {
        AsynchronousOperationResult {
            status: QueueStatus { id: "COMPLETED" },
            operation: Some(operation),
        }
    }
}

/// The allowed values of a string enum field, checked with a message naming the field.
pub fn check_enum(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<(), String> {
    match value {
        None => Ok(()),
        Some(v) if allowed.contains(&v) => Ok(()),
        Some(v) => Err(format!(
            "{field} must be one of {}, not '{}'",
            allowed.join(", "),
            crate::ids::shorten(v)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_in_progress_has_a_null_operation() {
        let r = AsynchronousOperationResult::<SavepointInfo>::in_progress();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["status"]["id"], "IN_PROGRESS");
        assert!(json["operation"].is_null());
    }

    #[test]
    fn a_savepoint_outcome_has_either_a_location_or_a_cause() {
        let ok = SavepointInfo {
            location: Some("/sp/savepoint-1".into()),
            failure_cause: None,
        };
        let json = serde_json::to_value(AsynchronousOperationResult::completed(ok)).unwrap();
        assert_eq!(json["operation"]["location"], "/sp/savepoint-1");
        assert!(json["operation"].get("failure-cause").is_none());
    }

    #[test]
    fn unknown_request_fields_are_refused() {
        let e = serde_json::from_str::<SavepointTriggerRequest>(r#"{"target":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let ok: SavepointTriggerRequest = serde_json::from_str(
            r#"{"target-directory":"/sp","cancel-job":false,"triggerId":null}"#,
        )
        .unwrap();
        assert_eq!(ok.target_directory.as_deref(), Some("/sp"));
    }

    #[test]
    fn enum_values_are_checked_with_the_field_name() {
        assert!(check_enum("formatType", Some("CANONICAL"), &["CANONICAL", "NATIVE"]).is_ok());
        let e = check_enum("formatType", Some("ZIP"), &["CANONICAL", "NATIVE"]).unwrap_err();
        assert!(e.contains("formatType"), "{e}");
    }
}
