//! The asynchronous part of snapshots: a small pool of workers that serialise frozen state,
//! write it to checkpoint storage, and acknowledge (or decline) to the coordinator — while the
//! subtask that took the snapshot keeps processing.

use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use weir_checkpoint::AckMetrics;
use weir_core::{CheckpointId, HandleKind, KeyGroupRange, SubtaskId, SubtaskState};
use weir_storage::{CheckpointLayout, CheckpointStorage};

use crate::control::CoordinatorMessage;
use crate::operator::OperatorSnapshot;

/// One subtask's snapshot on its way to storage.
pub struct SnapshotJob {
    /// The job attempt the snapshot belongs to.
    pub attempt: u32,
    pub subtask: SubtaskId,
    pub uid: Arc<str>,
    pub checkpoint: CheckpointId,
    pub snapshot: OperatorSnapshot,
    pub key_groups: KeyGroupRange,
    pub sync_ms: u64,
    pub alignment_ms: u64,
    pub start_delay_ms: u64,
    pub started: Instant,
    /// Told once the acknowledgement (or decline) has been sent, so the subtask can report
    /// itself finished only after its last snapshot was acknowledged.
    pub done: Sender<CheckpointId>,
}

/// The pool. Dropping every sender (all subtasks and the executor) lets the workers finish.
pub struct SnapshotWorkers {
    sender: Sender<SnapshotJob>,
    handles: Vec<JoinHandle<()>>,
}

impl SnapshotWorkers {
    pub fn start(
        threads: usize,
        storage: CheckpointStorage,
        coordinator: Sender<CoordinatorMessage>,
    ) -> SnapshotWorkers {
        let (sender, receiver) = crossbeam_channel::unbounded::<SnapshotJob>();
        let handles = (0..threads.max(1))
            .map(|i| {
                let receiver = receiver.clone();
                let storage = storage.clone();
                let coordinator = coordinator.clone();
                std::thread::Builder::new()
                    .name(format!("weir-snapshot-{i}"))
                    .spawn(move || work(receiver, storage, coordinator))
                    .expect("spawn snapshot worker")
            })
            .collect();
        SnapshotWorkers { sender, handles }
    }

    pub fn sender(&self) -> Sender<SnapshotJob> {
        self.sender.clone()
    }

    /// Waits for queued snapshots to finish.
    pub fn join(self) {
        drop(self.sender);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

fn work(
    jobs: Receiver<SnapshotJob>,
    storage: CheckpointStorage,
    coordinator: Sender<CoordinatorMessage>,
) {
    for job in jobs {
        let subtask = job.subtask;
        let checkpoint = job.checkpoint;
        let attempt = job.attempt;
        let job_done = job.done.clone();
        let message = match persist(&storage, job) {
            Ok((state, metrics)) => CoordinatorMessage::Ack {
                attempt,
                subtask,
                checkpoint,
                state,
                metrics,
            },
            Err(reason) => {
                tracing::warn!(%checkpoint, %subtask, %reason, "declining checkpoint");
                CoordinatorMessage::Decline {
                    attempt,
                    subtask,
                    checkpoint,
                    reason,
                }
            }
        };
        let done = job_done.clone();
        if coordinator.send(message).is_err() {
            return; // the job is over
        }
        let _ = done.send(checkpoint);
    }
}

/// Serialises and writes one snapshot; any failure becomes the decline reason.
fn persist(
    storage: &CheckpointStorage,
    job: SnapshotJob,
) -> Result<(SubtaskState, AckMetrics), String> {
    let async_start = Instant::now();
    let mut handles = Vec::new();
    let index = job.subtask.index;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "async snapshot of '{}' subtask {index} for checkpoint {} failed ({what}): {e}",
            job.uid, job.checkpoint
        )
    };
    if !job.snapshot.keyed.is_empty() {
        let bytes = weir_state::encode_keyed_snapshot(&job.snapshot.keyed, job.key_groups)
            .map_err(|e| fail("encoding keyed state", &e))?;
        let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, "keyed");
        let kind = HandleKind::Keyed {
            key_groups: job.key_groups,
        };
        handles.push(
            storage
                .write_state_file(path, kind, &bytes)
                .map_err(|e| fail("writing keyed state", &e))?,
        );
    }
    if let Some(op_state) = &job.snapshot.operator {
        let bytes = op_state.encode();
        let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, "op");
        handles.push(
            storage
                .write_state_file(path, HandleKind::Operator, &bytes)
                .map_err(|e| fail("writing operator state", &e))?,
        );
    }
    let metrics = AckMetrics {
        sync_duration_ms: job.sync_ms,
        async_duration_ms: async_start.elapsed().as_millis() as u64,
        alignment_duration_ms: job.alignment_ms,
        start_delay_ms: job.start_delay_ms,
    };
    Ok((SubtaskState::from_handles(handles), metrics))
}
