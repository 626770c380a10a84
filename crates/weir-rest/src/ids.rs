//! The ids the REST API speaks: job, vertex and trigger ids as Flink's 32 hex digits, and
//! checkpoint ids as numbers. Parsing never panics; a malformed id is a 400 with the reason.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use weir_core::{CheckpointId, JobId, OperatorId};

use crate::error::ApiError;

/// Parses 32 hex digits (Flink's `JobID`, `JobVertexID` and `TriggerId` form).
pub fn parse_hex128(text: &str) -> Option<u128> {
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

/// A job id from a path segment.
pub fn parse_job_id(text: &str) -> Result<JobId, ApiError> {
    parse_hex128(text).map(JobId).ok_or_else(|| {
        ApiError::bad_request(format!(
            "invalid job id '{}': expected 32 hexadecimal digits",
            shorten(text)
        ))
    })
}

/// A checkpoint id from a path segment.
pub fn parse_checkpoint_id(text: &str) -> Result<CheckpointId, ApiError> {
    text.parse::<u64>().map(CheckpointId).map_err(|_| {
        ApiError::bad_request(format!(
            "invalid checkpoint id '{}': expected a non-negative integer",
            shorten(text)
        ))
    })
}

/// The 32-hex vertex id of the operator with `uid`: stable across runs, as the uid is.
pub fn vertex_id(uid: &str) -> String {
    let hi = OperatorId::from_uid(uid).0;
    let lo = OperatorId::from_uid(&format!("{uid}\u{0}vertex")).0;
    format!("{hi:016x}{lo:016x}")
}

/// Cuts an echoed, user-supplied value short so error messages stay readable.
pub fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}…")
    }
}

/// The id of an asynchronous operation (a triggered checkpoint, savepoint or stop).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TriggerId(pub u128);

static TRIGGERS: AtomicU64 = AtomicU64::new(0);

impl TriggerId {
    /// A fresh, unguessable trigger id.
    pub fn random() -> TriggerId {
        // RandomState is seeded from the OS; mixing in a counter and the clock makes every id
        // distinct even within one process.
        let n = TRIGGERS.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let hi = RandomState::new().hash_one((n, nanos));
        let lo = RandomState::new().hash_one((nanos, n, hi));
        TriggerId((hi as u128) << 64 | lo as u128)
    }

    pub fn parse(text: &str) -> Result<TriggerId, ApiError> {
        parse_hex128(text).map(TriggerId).ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid trigger id '{}': expected 32 hexadecimal digits",
                shorten(text)
            ))
        })
    }
}

impl fmt::Display for TriggerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_anything_else_is_refused() {
        let id = JobId(0xabc);
        assert_eq!(parse_job_id(&id.to_string()).unwrap(), id);
        for bad in [
            "",
            "abc",
            "../../etc/passwd",
            &"g".repeat(32),
            &"a".repeat(33),
        ] {
            assert_eq!(parse_job_id(bad).unwrap_err().status.as_u16(), 400, "{bad}");
        }
    }

    #[test]
    fn vertex_ids_are_stable_and_distinct() {
        assert_eq!(vertex_id("a"), vertex_id("a"));
        assert_ne!(vertex_id("a"), vertex_id("b"));
        assert!(parse_hex128(&vertex_id("events")).is_some());
    }

    #[test]
    fn trigger_ids_differ_and_round_trip() {
        let a = TriggerId::random();
        let b = TriggerId::random();
        assert_ne!(a, b);
        assert_eq!(TriggerId::parse(&a.to_string()).unwrap(), a);
    }

    #[test]
    fn checkpoint_ids_must_be_numbers() {
        assert_eq!(parse_checkpoint_id("12").unwrap(), CheckpointId(12));
        assert!(parse_checkpoint_id("-1").is_err());
        assert!(parse_checkpoint_id("1e3").is_err());
    }

    #[test]
    fn long_values_are_shortened_in_messages() {
        assert!(shorten(&"x".repeat(1000)).chars().count() <= 81);
    }
}
