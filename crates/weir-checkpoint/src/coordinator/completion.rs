//! How checkpoints end: acknowledgements and declines, the metadata write, completion into the
//! store with subsumption and notifications, and aborts with their cleanup.
//!
//! File safety rule kept here: a shared file is only ever listed for deletion when neither a
//! retained checkpoint nor a pending one references it; private files of a checkpoint that is
//! retained are never listed.

use super::{CheckpointCoordinator, Finished};
use crate::events::{AbortReason, AckMetrics, Action};
use crate::pending::{AckOutcome, PendingCheckpoint};
use crate::store::StoreError;
use std::collections::{BTreeSet, HashSet};
use weir_core::{CheckpointId, CheckpointKind, JobId, StateHandle, SubtaskId, SubtaskState};

impl CheckpointCoordinator {
    /// The per-acknowledgement hot path: two hash/tree look-ups, a binary search in the stats
    /// history, no scan over subtasks and no allocation beyond keeping `state`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ack(
        &mut self,
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        metrics: &AckMetrics,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if job != self.job {
            // Another job's files are not ours to delete.
            tracing::debug!(%job, %checkpoint, "acknowledgement for another job, ignored");
            return;
        }
        let Some(&index) = self.subtask_index.get(&subtask) else {
            tracing::warn!(%subtask, %checkpoint, "acknowledgement from an unknown subtask; its state is discarded");
            return self.discard_state(state, out);
        };
        let Some(pending) = self.pending.get_mut(&checkpoint) else {
            return self.on_late_ack(subtask, checkpoint, state, out);
        };
        if pending.has_acknowledged(index) {
            // Ignored, not discarded: a repeated report may name the very files recorded.
            tracing::debug!(%subtask, %checkpoint, "duplicate acknowledgement ignored");
            return;
        }
        tracing::debug!(
            %subtask,
            %checkpoint,
            start_delay_ms = metrics.start_delay_ms,
            alignment_ms = metrics.alignment_duration_ms,
            unaligned = metrics.unaligned,
            sync_ms = metrics.sync_duration_ms,
            async_ms = metrics.async_duration_ms,
            "acknowledged"
        );
        self.stats
            .report_ack(checkpoint, index, now_ms, metrics, &state);
        if pending.acknowledge(index, state) == AckOutcome::Recorded
            && pending.is_fully_acknowledged()
        {
            self.finalize(checkpoint, now_ms, out);
        }
    }

    fn on_late_ack(
        &mut self,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        out: &mut Vec<Action>,
    ) {
        if self.has_completed(checkpoint) {
            // Every subtask acknowledged a completed checkpoint, so this is a repeat whose
            // files the completed checkpoint may reference.
            tracing::debug!(%subtask, %checkpoint, "acknowledgement for a completed checkpoint ignored");
            return;
        }
        match self.recently_finished.get(&checkpoint) {
            Some(_) => {
                tracing::debug!(%subtask, %checkpoint, "late acknowledgement for an aborted checkpoint; state discarded")
            }
            None => {
                tracing::warn!(%subtask, %checkpoint, "acknowledgement for an unknown checkpoint; state discarded")
            }
        }
        self.discard_state(state, out);
    }

    /// Whether checkpoint `id` completed (recently, or is retained).
    fn has_completed(&self, id: CheckpointId) -> bool {
        self.recently_finished.get(&id) == Some(&Finished::Completed)
            || self.store.all().binary_search_by_key(&id, |c| c.id).is_ok()
    }

    /// An earlier attempt's acknowledgement: never recorded, whatever the checkpoint's state.
    pub(super) fn on_stale_ack(
        &mut self,
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        state: SubtaskState,
        out: &mut Vec<Action>,
    ) {
        if job != self.job {
            tracing::debug!(%job, %checkpoint, "stale acknowledgement for another job, ignored");
            return;
        }
        if self.has_completed(checkpoint) {
            // A completed checkpoint may record these very files (a repeated report).
            tracing::debug!(%subtask, %checkpoint, "stale acknowledgement for a completed checkpoint ignored");
            return;
        }
        tracing::debug!(%subtask, %checkpoint, "acknowledgement of an earlier attempt; state discarded");
        self.discard_state(state, out);
    }

    pub(super) fn on_decline(
        &mut self,
        job: JobId,
        subtask: SubtaskId,
        checkpoint: CheckpointId,
        reason: &str,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if job != self.job || !self.subtask_index.contains_key(&subtask) {
            tracing::debug!(%job, %subtask, %checkpoint, "decline from another job or unknown subtask, ignored");
            return;
        }
        match self.pending.get(&checkpoint) {
            None => {
                tracing::debug!(%subtask, %checkpoint, "decline for a checkpoint not pending, ignored")
            }
            Some(p) if p.is_awaiting_metadata() => {
                // Every subtask's state is persisted; a decline cannot undo that.
                tracing::debug!(%subtask, %checkpoint, "decline after every acknowledgement, ignored")
            }
            Some(_) => {
                self.abort(
                    checkpoint,
                    AbortReason::Declined(format!("{subtask}: {reason}")),
                    now_ms,
                    out,
                );
                self.serve_queue(now_ms, out);
            }
        }
    }

    /// All acknowledgements are in: have the metadata written. The checkpoint stays pending
    /// until the write is confirmed, since only durable metadata makes it complete.
    pub(super) fn finalize(&mut self, id: CheckpointId, now_ms: u64, out: &mut Vec<Action>) {
        let Some(pending) = self.pending.get_mut(&id) else {
            return;
        };
        let checkpoint = pending.finalize(self.job, &self.subtasks, now_ms).clone();
        out.push(Action::WriteMetadata { checkpoint });
    }

    pub(super) fn on_metadata_written(
        &mut self,
        id: CheckpointId,
        metadata_bytes: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        match self.pending.get(&id) {
            Some(p) if p.is_awaiting_metadata() => {}
            Some(_) => {
                tracing::warn!(checkpoint = %id, "metadata written before every acknowledgement, ignored");
                return;
            }
            None => {
                if self.recently_finished.get(&id) == Some(&Finished::Aborted) {
                    // The write raced with the abort: the directory is to go again, with the
                    // metadata that just landed in it.
                    out.push(Action::DiscardCheckpoint {
                        checkpoint: id,
                        shared_paths: Vec::new(),
                    });
                }
                return;
            }
        }
        if let Some(pending) = self.pending.remove(&id) {
            self.complete(pending, metadata_bytes, now_ms, out);
            self.serve_queue(now_ms, out);
        }
    }

    pub(super) fn on_metadata_write_failed(
        &mut self,
        id: CheckpointId,
        reason: String,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if self
            .pending
            .get(&id)
            .is_some_and(PendingCheckpoint::is_awaiting_metadata)
        {
            self.abort(id, AbortReason::MetadataWriteFailed(reason), now_ms, out);
            self.serve_queue(now_ms, out);
        }
    }

    /// The metadata is durable: store, subsume, notify, count.
    fn complete(
        &mut self,
        pending: PendingCheckpoint,
        metadata_bytes: u64,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let request = pending.request();
        // Invariant: a checkpoint is completed (and its subtasks notified) only once the store
        // recorded it; in HA mode that is a fenced ZooKeeper write a stale leader cannot make.
        let mut evicted = Vec::new();
        if let Some(checkpoint) = pending
            .finalized()
            .filter(|c| c.kind == CheckpointKind::Checkpoint)
        {
            match self.store.add(checkpoint.clone()) {
                Ok(discards) => evicted = discards,
                Err(e) => {
                    if let StoreError::Fenced(_) = e {
                        // Invariant: only `chk-<id>` goes (its metadata and private files, which
                        // nobody else writes: the id came from the shared counter). Shared files
                        // are counted by the leader that fenced this one; a stale view of their
                        // references must not delete them.
                        out.push(Action::DiscardCheckpoint {
                            checkpoint: checkpoint.id,
                            shared_paths: Vec::new(),
                        });
                    }
                    let reason = AbortReason::NotRecorded(e.to_string());
                    self.abort_pending(pending, reason, false, now_ms, out);
                    return;
                }
            }
        }
        let Some(checkpoint) = pending.into_completed() else {
            return;
        };
        let id = checkpoint.id;
        self.last_completion_ms = Some(now_ms);
        self.remember_finished(id, Finished::Completed);
        self.stats
            .report_completed(&checkpoint, metadata_bytes, now_ms);
        tracing::info!(checkpoint = %id, kind = ?checkpoint.kind, "completed");
        if checkpoint.kind == CheckpointKind::Checkpoint {
            self.failures.on_success(id);
            for discard in evicted {
                let shared_paths =
                    self.unreferenced(discard.shared_paths.iter().map(String::as_str));
                out.push(Action::DiscardCheckpoint {
                    checkpoint: discard.checkpoint,
                    shared_paths,
                });
            }
            let older: Vec<CheckpointId> = self
                .pending
                .range(..id)
                .filter(|(_, p)| !p.is_savepoint())
                .map(|(id, _)| *id)
                .collect();
            for older_id in older {
                self.abort(older_id, AbortReason::Subsumed, now_ms, out);
            }
        }
        // Invariant: a checkpoint completes once (it left `pending` above), so each subtask
        // gets at most one completion notice for it.
        out.push(Action::NotifyComplete {
            checkpoint: id,
            subtasks: self.subtasks.clone(),
        });
        if let Some(request) = request {
            out.push(Action::RequestCompleted {
                request,
                checkpoint: id,
            });
        }
    }

    /// Aborts one pending checkpoint: its files go (shared ones only if unreferenced), every
    /// subtask hears of it, a waiting request fails, the failure budget counts it.
    pub(super) fn abort(
        &mut self,
        id: CheckpointId,
        reason: AbortReason,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        self.abort_pending(pending, reason, true, now_ms, out);
    }

    /// Aborts a checkpoint already out of `pending`; with `discard`, its files go too.
    fn abort_pending(
        &mut self,
        pending: PendingCheckpoint,
        reason: AbortReason,
        discard: bool,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let id = pending.id();
        if discard {
            let own_shared: BTreeSet<&str> = pending
                .handles()
                .filter(|h| h.shared)
                .map(|h| h.path.as_str())
                .collect();
            let shared_paths = self.unreferenced(own_shared.into_iter());
            out.push(Action::DiscardCheckpoint {
                checkpoint: id,
                shared_paths,
            });
        }
        out.push(Action::NotifyAborted {
            checkpoint: id,
            reason: reason.clone(),
            subtasks: self.subtasks.clone(),
        });
        let what = if pending.is_savepoint() {
            "savepoint"
        } else {
            "checkpoint"
        };
        if let Some(request) = pending.request() {
            out.push(Action::RequestFailed {
                request,
                reason: format!("{what} {id} aborted: {reason}"),
            });
        }
        tracing::info!(checkpoint = %id, "{what} {id} aborted: {reason}");
        self.stats.report_failed(&pending, &reason, now_ms);
        self.remember_finished(id, Finished::Aborted);
        if let Some(verdict) =
            self.failures
                .on_failure(id, pending.kind(), &reason, self.timeout_ms)
        {
            tracing::error!("{verdict}");
            out.push(Action::FailJob { reason: verdict });
        }
    }

    pub(super) fn abort_all(&mut self, reason: &AbortReason, now_ms: u64, out: &mut Vec<Action>) {
        let ids: Vec<CheckpointId> = self.pending.keys().copied().collect();
        for id in ids {
            self.abort(id, reason.clone(), now_ms, out);
        }
    }

    /// State nobody will use: its private files go, its shared files only if unreferenced
    /// (inline state has no file).
    fn discard_state(&mut self, state: SubtaskState, out: &mut Vec<Action>) {
        let shared: Vec<&str> = state
            .handles
            .iter()
            .filter(|h| h.shared)
            .map(|h| h.path.as_str())
            .collect();
        let free: HashSet<String> = self.unreferenced(shared.into_iter()).into_iter().collect();
        // A private path a pending checkpoint recorded stays too (only a repeated report of
        // the same snapshot can name one): that checkpoint's own discard or retention decides.
        let recorded: HashSet<&str> = self
            .pending
            .values()
            .flat_map(|p| p.handles())
            .filter(|h| !h.shared)
            .map(|h| h.path.as_str())
            .collect();
        let handles: Vec<StateHandle> = state
            .handles
            .into_iter()
            .filter(|h| h.is_file())
            .filter(|h| {
                if h.shared {
                    free.contains(&h.path)
                } else {
                    !recorded.contains(h.path.as_str())
                }
            })
            .collect();
        if !handles.is_empty() {
            out.push(Action::DiscardState { handles });
        }
    }

    /// The given shared paths that no retained and no pending checkpoint references.
    fn unreferenced<'a>(&self, paths: impl Iterator<Item = &'a str>) -> Vec<String> {
        let candidates: Vec<&str> = paths
            .filter(|p| !self.store.is_shared_path_referenced(p))
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let in_pending: HashSet<&str> = self
            .pending
            .values()
            .flat_map(|p| p.handles())
            .filter(|h| h.shared)
            .map(|h| h.path.as_str())
            .collect();
        candidates
            .into_iter()
            .filter(|p| !in_pending.contains(p))
            .map(str::to_string)
            .collect()
    }
}
