//! The failure budget (Flink's `CheckpointFailureManager`): how many checkpoints in a row may
//! fail before the job is failed.
//!
//! Only failures that say checkpointing is unhealthy count (see
//! [`AbortReason::counts_toward_failure_budget`]); savepoints never count, being user requests
//! whose failure is reported to the user. A success resets the count, one checkpoint counts at
//! most once however many reports arrive for it, and a failure of a checkpoint older than the
//! last successful one says nothing about the present and is ignored.

use crate::events::AbortReason;
use std::collections::BTreeSet;
use weir_core::{CheckpointId, CheckpointKind};

#[derive(Debug)]
pub(crate) struct FailureBudget {
    tolerable: u32,
    // Invariant: `consecutive == counted.len()`; both are emptied by a success or a verdict.
    consecutive: u32,
    counted: BTreeSet<CheckpointId>,
    last_success: Option<CheckpointId>,
    /// Set after the job was told to fail; later failures of the same episode are not counted
    /// (they would only repeat the verdict) until the job runs again.
    verdict_given: bool,
}

impl FailureBudget {
    pub(crate) fn new(tolerable: u32) -> FailureBudget {
        FailureBudget {
            tolerable,
            consecutive: 0,
            counted: BTreeSet::new(),
            last_success: None,
            verdict_given: false,
        }
    }

    pub(crate) fn on_success(&mut self, id: CheckpointId) {
        self.consecutive = 0;
        self.counted.clear();
        self.last_success = self.last_success.max(Some(id));
    }

    /// The job runs (again). The count carries over a restart that had other causes (as in
    /// Flink); only a verdict starts a fresh budget, and that happened when it was given.
    pub(crate) fn on_job_running(&mut self) {
        self.verdict_given = false;
    }

    /// Counts a failure; returns the reason to fail the job with when the budget is exceeded.
    pub(crate) fn on_failure(
        &mut self,
        id: CheckpointId,
        kind: CheckpointKind,
        reason: &AbortReason,
        timeout_ms: u64,
    ) -> Option<String> {
        if !reason.counts_toward_failure_budget()
            || kind.is_savepoint()
            || self.verdict_given
            || self.last_success.is_some_and(|last| id <= last)
            || !self.counted.insert(id)
        {
            return None;
        }
        self.consecutive += 1;
        if self.consecutive <= self.tolerable {
            return None;
        }
        self.verdict_given = true;
        self.consecutive = 0;
        self.counted.clear();
        let what = match reason {
            AbortReason::Expired => format!("expired after {timeout_ms} ms"),
            AbortReason::Declined(why) => format!("was declined by subtask {why}"),
            other => format!("failed: {other}"),
        };
        Some(format!(
            "exceeded checkpoint tolerable failure threshold ({}): checkpoint {id} {what}",
            self.tolerable
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CP: CheckpointKind = CheckpointKind::Checkpoint;

    #[test]
    fn failures_beyond_the_tolerable_number_fail_the_job_with_the_reason() {
        let mut b = FailureBudget::new(1);
        assert_eq!(
            b.on_failure(CheckpointId(1), CP, &AbortReason::Expired, 100),
            None
        );
        let verdict = b.on_failure(CheckpointId(2), CP, &AbortReason::Expired, 100);
        assert_eq!(
            verdict.as_deref(),
            Some("exceeded checkpoint tolerable failure threshold (1): checkpoint 2 expired after 100 ms")
        );
    }

    #[test]
    fn failures_of_checkpoints_older_than_the_last_success_are_ignored() {
        let mut b = FailureBudget::new(0);
        b.on_success(CheckpointId(5));
        assert_eq!(
            b.on_failure(CheckpointId(4), CP, &AbortReason::Expired, 1),
            None
        );
        assert_eq!(
            b.on_failure(CheckpointId(5), CP, &AbortReason::Expired, 1),
            None
        );
        assert!(b
            .on_failure(CheckpointId(6), CP, &AbortReason::Expired, 1)
            .is_some());
    }

    #[test]
    fn repeated_reports_for_one_checkpoint_count_once() {
        let mut b = FailureBudget::new(1);
        let declined = AbortReason::Declined("a#0: no".into());
        assert_eq!(b.on_failure(CheckpointId(3), CP, &declined, 1), None);
        assert_eq!(
            b.on_failure(CheckpointId(3), CP, &AbortReason::Expired, 1),
            None
        );
        assert!(b.on_failure(CheckpointId(4), CP, &declined, 1).is_some());
    }

    #[test]
    fn after_a_verdict_nothing_counts_until_the_job_runs_again() {
        let mut b = FailureBudget::new(0);
        assert!(b
            .on_failure(CheckpointId(1), CP, &AbortReason::Expired, 1)
            .is_some());
        assert_eq!(
            b.on_failure(CheckpointId(2), CP, &AbortReason::Expired, 1),
            None
        );
        b.on_job_running();
        assert!(b
            .on_failure(CheckpointId(3), CP, &AbortReason::Expired, 1)
            .is_some());
    }

    #[test]
    fn the_count_carries_over_a_restart_with_other_causes() {
        let mut b = FailureBudget::new(1);
        assert_eq!(
            b.on_failure(CheckpointId(1), CP, &AbortReason::Expired, 1),
            None
        );
        b.on_job_running();
        assert!(b
            .on_failure(CheckpointId(2), CP, &AbortReason::Expired, 1)
            .is_some());
    }
}
