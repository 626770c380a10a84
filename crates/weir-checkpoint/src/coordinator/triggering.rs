//! How checkpoints start: the periodic timer, trigger requests, the queue of triggers that are
//! not allowed yet, id allocation outside the coordinator, and the checks made before and
//! after it.
//!
//! A trigger is checked twice. When it is queued: the job and every source must be running,
//! or it fails at once (a failed trigger, not a failed checkpoint). When its id arrives: the
//! same again, because the status may have changed during the allocation, plus the limits
//! (max-concurrent, min-pause) for checkpoints; a checkpoint no longer allowed goes back to
//! the head of the queue and its id is dropped (ids may have gaps; they never go back).

use super::CheckpointCoordinator;
use crate::events::{AbortReason, Action, JobStatus, RequestId, TaskStatus, PERIODIC_REQUEST_BASE};
use crate::pending::PendingCheckpoint;
use crate::queue::QueuedTrigger;
use weir_core::{CheckpointId, CheckpointKind};

fn kind_name(kind: CheckpointKind) -> &'static str {
    match kind {
        CheckpointKind::Checkpoint => "checkpoint",
        CheckpointKind::Savepoint => "savepoint",
        CheckpointKind::NativeSavepoint => "native savepoint",
    }
}

impl CheckpointCoordinator {
    pub(super) fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.shut_down {
            return;
        }
        let expired: Vec<CheckpointId> = self
            .pending
            .values()
            .filter(|p| now_ms.saturating_sub(p.trigger_timestamp_ms()) >= self.timeout_ms)
            .map(|p| p.id())
            .collect();
        for id in expired {
            self.abort(id, AbortReason::Expired, now_ms, out);
        }
        if let (Some(due), Some(interval)) = (self.next_periodic_ms, self.config.interval) {
            if now_ms >= due {
                self.next_periodic_ms = Some(now_ms.saturating_add(super::duration_ms(interval)));
                self.enqueue_periodic(out);
            }
        }
        self.serve_queue(now_ms, out);
    }

    fn enqueue_periodic(&mut self, out: &mut Vec<Action>) {
        // One periodic trigger waiting is enough: a second would only fire right behind it.
        let allocating_periodic = self.allocating.is_some_and(|t| t.is_periodic());
        if allocating_periodic || self.queue.has_periodic() {
            return;
        }
        let trigger = QueuedTrigger {
            token: self.next_periodic_token,
            request: None,
            kind: CheckpointKind::Checkpoint,
        };
        // Wrapping stays within the reserved upper half: 2^63 periodic triggers never happen.
        self.next_periodic_token = self.next_periodic_token.wrapping_add(1) | PERIODIC_REQUEST_BASE;
        if let Err(reason) = self.check_running(trigger.kind) {
            self.fail_trigger(trigger, reason, out);
            return;
        }
        self.queue.push(trigger);
    }

    pub(super) fn on_trigger_request(
        &mut self,
        request: RequestId,
        kind: CheckpointKind,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if request >= PERIODIC_REQUEST_BASE {
            out.push(Action::RequestFailed {
                request,
                reason: format!("request id {request} is reserved for periodic checkpoints"),
            });
            return;
        }
        let in_use = self.queue.has_request(request)
            || self.allocating.is_some_and(|t| t.request == Some(request))
            || self.pending.values().any(|p| p.request() == Some(request));
        if in_use {
            tracing::warn!(
                request,
                "trigger request id already in use; the repeat is ignored"
            );
            return;
        }
        let trigger = QueuedTrigger {
            token: request,
            request: Some(request),
            kind,
        };
        if self.shut_down {
            return self.fail_trigger(trigger, "coordinator is shut down".into(), out);
        }
        if let Err(reason) = self.check_running(kind) {
            return self.fail_trigger(trigger, reason, out);
        }
        if self.queue.is_full() {
            let reason = format!(
                "too many queued checkpoint requests ({})",
                crate::queue::MAX_QUEUED_TRIGGERS
            );
            return self.fail_trigger(trigger, reason, out);
        }
        self.queue.push(trigger);
        self.serve_queue(now_ms, out);
    }

    pub(super) fn on_id_allocated(
        &mut self,
        request: RequestId,
        id: CheckpointId,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let trigger = match self.allocating {
            Some(t) if t.token == request => t,
            _ => {
                tracing::warn!(request, %id, "checkpoint id for a trigger not waiting for one, ignored");
                return;
            }
        };
        self.allocating = None;
        if let Some(last) = self.last_used_id.filter(|last| id <= *last) {
            let reason = format!(
                "checkpoint id counter went backwards: it returned {id} but {last} was already \
                 used; ids must strictly ascend (a second coordinator, or a counter not seeded \
                 from the checkpoints in storage?)"
            );
            tracing::error!("{reason}");
            out.push(Action::FailJob {
                reason: reason.clone(),
            });
            self.fail_trigger(trigger, reason, out);
            return self.serve_queue(now_ms, out);
        }
        if let Err(reason) = self.check_running(trigger.kind) {
            self.fail_trigger(trigger, reason, out);
            return self.serve_queue(now_ms, out);
        }
        if !trigger.is_savepoint() && !self.limits_allow(now_ms) {
            tracing::debug!(%id, "checkpoint no longer allowed when its id arrived; queued again");
            self.queue.push_front(trigger);
            return self.serve_queue(now_ms, out);
        }
        self.start_checkpoint(trigger, id, now_ms, out);
        self.serve_queue(now_ms, out);
    }

    pub(super) fn on_id_allocation_failed(
        &mut self,
        request: RequestId,
        reason: &str,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        match self.allocating {
            Some(t) if t.token == request => {
                self.allocating = None;
                let reason = format!("could not allocate a checkpoint id: {reason}");
                self.fail_trigger(t, reason, out);
                self.serve_queue(now_ms, out);
            }
            _ => tracing::warn!(
                request,
                "id allocation failure for a trigger not waiting for one"
            ),
        }
    }

    /// Starts the next queued trigger if one is allowed: asks for its id.
    pub(super) fn serve_queue(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.shut_down || self.allocating.is_some() {
            return;
        }
        while let Some(head) = self.queue.front() {
            if let Err(reason) = self.check_running(head.kind) {
                self.queue.pop_front();
                self.fail_trigger(head, reason, out);
                continue;
            }
            // Savepoints are not limited by max-concurrent or min-pause.
            if !head.is_savepoint() && !self.limits_allow(now_ms) {
                return; // served when a checkpoint ends or the pause is over
            }
            self.queue.pop_front();
            self.allocating = Some(head);
            out.push(Action::AllocateId {
                request: head.token,
            });
            return;
        }
    }

    /// Whether another checkpoint (not savepoint) may start now.
    fn limits_allow(&self, now_ms: u64) -> bool {
        let paused = self
            .last_completion_ms
            .is_some_and(|last| now_ms < last.saturating_add(self.min_pause_ms));
        self.pending_checkpoints() < self.max_concurrent && !paused
    }

    /// Whether a checkpoint can start at all: the job and every source must be running.
    fn check_running(&self, kind: CheckpointKind) -> Result<(), String> {
        let what = kind_name(kind);
        if self.job_status != JobStatus::Running {
            return Err(format!(
                "cannot trigger a {what}: the job is not running ({})",
                self.job_status
            ));
        }
        let not_running = self
            .sources
            .iter()
            .find(|s| self.status_of(s) != Some(TaskStatus::Running));
        match not_running {
            Some(source) => Err(format!(
                "cannot trigger a {what}: source subtask {source} is not running"
            )),
            None => Ok(()),
        }
    }

    /// A trigger that never became a checkpoint: a trigger failure in the stats, not a
    /// checkpoint failure, so it does not consume the failure budget.
    pub(super) fn fail_trigger(
        &mut self,
        trigger: QueuedTrigger,
        reason: String,
        out: &mut Vec<Action>,
    ) {
        self.stats.report_failed_trigger();
        match trigger.request {
            Some(request) => {
                tracing::info!(request, "{reason}");
                out.push(Action::RequestFailed { request, reason });
            }
            None => tracing::info!("periodic checkpoint not triggered: {reason}"),
        }
    }

    /// Fails every trigger that is waiting, for the queue or for its id.
    pub(super) fn fail_queued(&mut self, reason: &str, out: &mut Vec<Action>) {
        let waiting: Vec<QueuedTrigger> = self
            .allocating
            .take()
            .into_iter()
            .chain(self.queue.drain())
            .collect();
        for trigger in waiting {
            if trigger.is_periodic() {
                continue; // the timer stopped with the job; nothing to report
            }
            self.fail_trigger(trigger, reason.to_string(), out);
        }
    }

    fn start_checkpoint(
        &mut self,
        trigger: QueuedTrigger,
        id: CheckpointId,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        // Invariant kept: ids strictly ascend (checked by the caller).
        self.last_used_id = Some(id);
        let pending = PendingCheckpoint::new(
            id,
            trigger.kind,
            trigger.request,
            now_ms,
            self.subtasks.len(),
        );
        self.stats.report_pending(&pending, &self.subtasks);
        let fully_acknowledged = pending.is_fully_acknowledged();
        self.pending.insert(id, pending);
        tracing::debug!(checkpoint = %id, kind = kind_name(trigger.kind), "triggering");
        out.push(Action::TriggerSources {
            checkpoint: id,
            timestamp_ms: now_ms,
            kind: trigger.kind,
            sources: self.sources.clone(),
        });
        if fully_acknowledged {
            // A job without subtasks has nothing to wait for.
            self.finalize(id, now_ms, out);
        }
    }
}
