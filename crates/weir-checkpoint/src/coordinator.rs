//! The checkpoint coordinator: a pure state machine that decides when checkpoints start,
//! tracks them while subtasks acknowledge, completes or aborts them, and reports what the
//! driver must do.
//!
//! It owns no thread, timer, file or clock. The driver feeds it [`Event`]s with the current
//! time and carries out the returned [`Action`]s in order; it calls [`Tick`](Event::Tick) at
//! [`CheckpointCoordinator::next_deadline`]. How checkpoints start lives in
//! [`triggering`](self::triggering), how they end in [`completion`](self::completion).
//!
//! Choices this module makes (and the tests pin):
//! - A subtask counts as running only after `SubtaskStatus { status: Running }`; the driver
//!   reports every subtask, then `JobStatusChanged(Running)`, which starts periodic triggers
//!   (first one `interval` after that event).
//! - When the job leaves RUNNING, pending checkpoints are aborted (`JobNotRunning`, not counted
//!   against the failure budget) and queued requests fail.
//! - A failed or cancelled subtask aborts every pending checkpoint (`TaskFailure`); a finished
//!   one aborts those it has not acknowledged (`SubtaskFinished`).
//! - An id that does not ascend fails the job: it means a second coordinator or a counter
//!   seeded wrongly, and going on could overwrite a retained checkpoint's directory. The
//!   restart re-seeds the counter from storage.
//! - Min-pause runs from the moment the metadata of the last completed checkpoint *or
//!   savepoint* became durable (as Flink does); savepoints themselves ignore it.
//! - A savepoint's completion subsumes nothing (it is not in the store, so older pending
//!   checkpoints keep their value for recovery), and savepoint failures never count against
//!   the failure budget: they are reported to whoever asked.
//! - A duplicate acknowledgement, or one for a checkpoint that completed, is ignored rather
//!   than discarded: it may name the very files the checkpoint recorded.
//! - A repeated `TriggerRequest` id that is still queued, allocating or pending is ignored.

mod completion;
mod triggering;

use crate::completed::CompletedCheckpoint;
use crate::events::{
    AbortReason, Action, Event, JobStatus, JobVertices, TaskStatus, PERIODIC_REQUEST_BASE,
};
use crate::failure::FailureBudget;
use crate::pending::PendingCheckpoint;
use crate::queue::{QueuedTrigger, TriggerQueue};
use crate::stats::CheckpointStats;
use crate::store::{CompletedCheckpointStore, StandaloneCompletedCheckpointStore};
use std::collections::{BTreeMap, HashMap};
use weir_core::config::CheckpointConfig;
use weir_core::{CheckpointId, JobId, SubtaskId};

/// How many finished checkpoint ids are remembered, to tell a late acknowledgement from a
/// bogus one and to clean up after metadata that lands after an abort.
pub const RECENTLY_FINISHED_CAPACITY: usize = 1024;

/// How a recently finished checkpoint ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Finished {
    Completed,
    Aborted,
}

/// The job manager's checkpoint coordinator for one job (Flink's `CheckpointCoordinator`).
pub struct CheckpointCoordinator {
    job: JobId,
    config: CheckpointConfig,
    timeout_ms: u64,
    min_pause_ms: u64,
    max_concurrent: usize,

    // Invariant: `subtasks` has no duplicates, contains every source, and
    // `subtask_index[&subtasks[i]] == i`; `subtask_status` and every pending checkpoint's
    // acknowledgements are indexed the same way.
    subtasks: Vec<SubtaskId>,
    sources: Vec<SubtaskId>,
    subtask_index: HashMap<SubtaskId, usize>,
    subtask_status: Vec<Option<TaskStatus>>,
    job_status: JobStatus,
    shut_down: bool,

    /// When the next periodic trigger is due; `None` while the job is not RUNNING.
    next_periodic_ms: Option<u64>,
    next_periodic_token: u64,
    queue: TriggerQueue,
    // Invariant: at most one id allocation is in flight, so ids arrive in the order asked for
    // and the concurrency count cannot grow behind a trigger's back.
    allocating: Option<QueuedTrigger>,

    pending: BTreeMap<CheckpointId, PendingCheckpoint>,
    // Invariant: every checkpoint ever started or restored has an id ≤ `last_used_id`.
    last_used_id: Option<CheckpointId>,
    last_completion_ms: Option<u64>,
    recently_finished: BTreeMap<CheckpointId, Finished>,

    store: Box<dyn CompletedCheckpointStore>,
    failures: FailureBudget,
    stats: CheckpointStats,
}

impl CheckpointCoordinator {
    /// A coordinator with the standalone (in-memory) completed checkpoint store. The config is
    /// assumed valid ([`CheckpointConfig::validate`]).
    pub fn new(
        job: JobId,
        config: CheckpointConfig,
        vertices: JobVertices,
    ) -> CheckpointCoordinator {
        let store = StandaloneCompletedCheckpointStore::new(config.num_retained);
        CheckpointCoordinator::with_store(job, config, vertices, Box::new(store))
    }

    /// A coordinator with the given completed checkpoint store (an HA one, later).
    pub fn with_store(
        job: JobId,
        config: CheckpointConfig,
        vertices: JobVertices,
        store: Box<dyn CompletedCheckpointStore>,
    ) -> CheckpointCoordinator {
        let mut subtasks = Vec::with_capacity(vertices.all.len());
        let mut subtask_index = HashMap::with_capacity(vertices.all.len());
        // Sources are appended if `all` forgot them: a source must acknowledge too.
        for s in vertices.all.iter().chain(vertices.sources.iter()) {
            if !subtask_index.contains_key(s) {
                subtask_index.insert(*s, subtasks.len());
                subtasks.push(*s);
            }
        }
        let mut sources = vertices.sources.clone();
        sources.sort_unstable();
        sources.dedup();
        CheckpointCoordinator {
            job,
            timeout_ms: duration_ms(config.timeout),
            min_pause_ms: duration_ms(config.min_pause),
            max_concurrent: config.max_concurrent.max(1) as usize,
            subtask_status: vec![None; subtasks.len()],
            subtasks,
            sources,
            subtask_index,
            job_status: JobStatus::Created,
            shut_down: false,
            next_periodic_ms: None,
            next_periodic_token: PERIODIC_REQUEST_BASE,
            queue: TriggerQueue::default(),
            allocating: None,
            pending: BTreeMap::new(),
            last_used_id: None,
            last_completion_ms: None,
            recently_finished: BTreeMap::new(),
            store,
            failures: FailureBudget::new(config.tolerable_failed),
            stats: CheckpointStats::new(config.history_size),
            config,
        }
    }

    /// Seeds the store with the checkpoints found in storage (oldest first) on `--resume`, or
    /// records a restore from the latest retained one after a failover (`retained` empty).
    /// Shared files get their reference counts; ids must ascend past the newest; stats count a
    /// restore. Returns `DiscardCheckpoint` for checkpoints beyond `num_retained`.
    #[must_use = "the returned actions discard checkpoints beyond num-retained"]
    pub fn restore(&mut self, retained: Vec<CompletedCheckpoint>, now_ms: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for checkpoint in retained {
            if checkpoint.job != self.job {
                tracing::warn!(job = %self.job, found = %checkpoint.job, checkpoint = %checkpoint.id,
                    "restoring a checkpoint written by another job id");
            }
            self.last_used_id = self.last_used_id.max(Some(checkpoint.id));
            let id = checkpoint.id;
            match self.store.add(checkpoint) {
                Ok(discards) => {
                    for discard in discards {
                        out.push(Action::DiscardCheckpoint {
                            checkpoint: discard.checkpoint,
                            shared_paths: discard.shared_paths,
                        });
                    }
                }
                Err(e) => {
                    tracing::error!(checkpoint = %id, error = %e, "a restored checkpoint was not recorded in the store")
                }
            }
        }
        if let Some(latest) = self.store.latest() {
            self.failures.on_success(latest.id);
            self.stats.report_restored(latest, now_ms);
            tracing::info!(checkpoint = %latest.id, "restoring from checkpoint");
        }
        out
    }

    /// Handles one event at time `now_ms` and returns what the driver must do, in order.
    pub fn handle(&mut self, event: Event, now_ms: u64) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::JobStatusChanged(status) => self.on_job_status(status, now_ms, &mut out),
            Event::SubtaskStatus { subtask, status } => {
                self.on_subtask_status(subtask, status, now_ms, &mut out)
            }
            Event::Tick => self.on_tick(now_ms, &mut out),
            Event::TriggerRequest { request, kind } => {
                self.on_trigger_request(request, kind, now_ms, &mut out)
            }
            Event::IdAllocated { request, id } => {
                self.on_id_allocated(request, id, now_ms, &mut out)
            }
            Event::IdAllocationFailed { request, reason } => {
                self.on_id_allocation_failed(request, &reason, now_ms, &mut out)
            }
            Event::Ack {
                job,
                subtask,
                checkpoint,
                state,
                metrics,
            } => self.on_ack(job, subtask, checkpoint, state, &metrics, now_ms, &mut out),
            Event::StaleAck {
                job,
                subtask,
                checkpoint,
                state,
            } => self.on_stale_ack(job, subtask, checkpoint, state, &mut out),
            Event::Decline {
                job,
                subtask,
                checkpoint,
                reason,
            } => self.on_decline(job, subtask, checkpoint, &reason, now_ms, &mut out),
            Event::MetadataWritten {
                checkpoint,
                metadata_bytes,
            } => self.on_metadata_written(checkpoint, metadata_bytes, now_ms, &mut out),
            Event::MetadataWriteFailed { checkpoint, reason } => {
                self.on_metadata_write_failed(checkpoint, reason, now_ms, &mut out)
            }
            Event::Shutdown => self.on_shutdown(now_ms, &mut out),
        }
        out
    }

    /// The earliest time at which a [`Event::Tick`] would do something: a periodic trigger
    /// due, a checkpoint expiring, or a queued trigger whose min-pause ends. `None` when
    /// nothing is scheduled (and always after shutdown).
    pub fn next_deadline(&self) -> Option<u64> {
        if self.shut_down {
            return None;
        }
        let expiry = self
            .pending
            .values()
            .map(|p| p.trigger_timestamp_ms().saturating_add(self.timeout_ms))
            .min();
        let pause_end = match (self.allocating, self.queue.front(), self.last_completion_ms) {
            (None, Some(head), Some(last))
                if !head.is_savepoint() && self.pending_checkpoints() < self.max_concurrent =>
            {
                Some(last.saturating_add(self.min_pause_ms))
            }
            _ => None,
        };
        [self.next_periodic_ms, expiry, pause_end]
            .into_iter()
            .flatten()
            .min()
    }

    pub fn stats(&self) -> &CheckpointStats {
        &self.stats
    }

    /// The newest retained checkpoint: the one to restore from.
    pub fn latest_completed(&self) -> Option<&CompletedCheckpoint> {
        self.store.latest()
    }

    /// The retained checkpoints, oldest first.
    pub fn retained(&self) -> impl Iterator<Item = &CompletedCheckpoint> {
        self.store.all().iter()
    }

    /// Checkpoints and savepoints in flight (including those whose metadata is being written).
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Whether checkpoint `id` is in flight (including while its metadata is being written).
    pub fn is_pending(&self, id: CheckpointId) -> bool {
        self.pending.contains_key(&id)
    }

    /// The checkpoints in flight, by ascending id.
    pub fn pending(&self) -> impl Iterator<Item = &PendingCheckpoint> {
        self.pending.values()
    }

    pub fn job(&self) -> JobId {
        self.job
    }

    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    pub fn job_status(&self) -> JobStatus {
        self.job_status
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// The last status a subtask reported; `None` before its first report or if unknown.
    fn status_of(&self, subtask: &SubtaskId) -> Option<TaskStatus> {
        let index = *self.subtask_index.get(subtask)?;
        self.subtask_status.get(index).copied().flatten()
    }

    /// Pending checkpoints that count against max-concurrent-checkpoints (not savepoints).
    fn pending_checkpoints(&self) -> usize {
        self.pending.values().filter(|p| !p.is_savepoint()).count()
    }

    fn on_job_status(&mut self, status: JobStatus, now_ms: u64, out: &mut Vec<Action>) {
        let was = std::mem::replace(&mut self.job_status, status);
        if self.shut_down {
            return;
        }
        if status == JobStatus::Running {
            if was != JobStatus::Running {
                self.failures.on_job_running();
                self.next_periodic_ms = self
                    .config
                    .interval
                    .map(|i| now_ms.saturating_add(duration_ms(i)));
                tracing::debug!(job = %self.job, "job running: periodic checkpoints scheduled");
            }
            return;
        }
        // Invariant: periodic triggering only while RUNNING.
        self.next_periodic_ms = None;
        self.abort_all(&AbortReason::JobNotRunning(status), now_ms, out);
        let reason = format!("the job is not running ({status})");
        self.fail_queued(&reason, out);
    }

    fn on_subtask_status(
        &mut self,
        subtask: SubtaskId,
        status: TaskStatus,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let Some(&index) = self.subtask_index.get(&subtask) else {
            tracing::debug!(%subtask, ?status, "status of a subtask this job does not have, ignored");
            return;
        };
        self.subtask_status[index] = Some(status);
        match status {
            TaskStatus::Running => {}
            TaskStatus::Failed | TaskStatus::Cancelled => {
                self.abort_all(&AbortReason::TaskFailure, now_ms, out);
                self.serve_queue(now_ms, out);
            }
            TaskStatus::Finished => {
                let waiting: Vec<CheckpointId> = self
                    .pending
                    .values()
                    .filter(|p| !p.has_acknowledged(index))
                    .map(PendingCheckpoint::id)
                    .collect();
                for id in waiting {
                    self.abort(id, AbortReason::SubtaskFinished(subtask), now_ms, out);
                }
                self.serve_queue(now_ms, out);
            }
        }
    }

    fn on_shutdown(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.shut_down {
            return;
        }
        self.abort_all(&AbortReason::Shutdown, now_ms, out);
        // Set after aborting so the aborts still see a live coordinator, before failing the
        // queue so nothing is served again.
        self.shut_down = true;
        self.next_periodic_ms = None;
        self.fail_queued("coordinator is shut down", out);
        tracing::info!(job = %self.job, "checkpoint coordinator shut down");
    }

    fn remember_finished(&mut self, id: CheckpointId, how: Finished) {
        self.recently_finished.insert(id, how);
        while self.recently_finished.len() > RECENTLY_FINISHED_CAPACITY {
            self.recently_finished.pop_first();
        }
    }
}

fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
