//! Watching one attempt of a job: progress, completion, failures, the final checkpoint.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use weir_core::CheckpointId;

use crate::control::{CoordinatorMessage, JobEvent};
use crate::deploy::Deployed;
use crate::error::JobError;
use crate::handle::StopHandle;
use crate::progress::{JobProgress, LastCheckpoint};

/// Why an attempt ended badly.
pub(crate) struct Failure {
    pub(crate) cause: JobError,
    pub(crate) recoverable: bool,
    pub(crate) at: Instant,
}

pub(crate) enum Outcome {
    Finished,
    Cancelled,
    Failed(Failure),
}

/// Why the sources are being stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// Bounded sources ran out: the final checkpoint must complete, or the attempt failed.
    EndOfInput,
    /// Someone asked the job to stop: without a final checkpoint the last one stands.
    Requested,
    /// Stop with a savepoint: if the savepoint fails, the job goes on (restarting from its
    /// latest checkpoint, as its sources have already ended).
    Savepoint,
}

/// Watches attempts of a job and keeps its progress across them.
pub(crate) struct Watch {
    pub(crate) started: Instant,
    pub(crate) progress: JobProgress,
    /// Records emitted by the sources of earlier attempts.
    pub(crate) records_before: u64,
    /// The job's storage while it holds a claim on the snapshot it started from: the
    /// snapshot is deleted once the first checkpoint after it completed.
    pub(crate) claimed: Option<weir_storage::CheckpointStorage>,
    pub(crate) recovery_ms: Vec<u64>,
}

impl Watch {
    pub(crate) fn new() -> Watch {
        Watch {
            started: Instant::now(),
            progress: JobProgress {
                elapsed: Duration::ZERO,
                records: 0,
                records_per_second: 0.0,
                checkpoints_completed: 0,
                checkpoints_failed: 0,
                last_checkpoint: None,
            },
            records_before: 0,
            claimed: None,
            recovery_ms: Vec::new(),
        }
    }

    /// Watches one attempt until it finishes or fails, reporting progress.
    pub(crate) fn attempt(
        &mut self,
        deployed: &Deployed,
        events: &Receiver<JobEvent>,
        coordinator: &Sender<CoordinatorMessage>,
        stop: &StopHandle,
        progress: &mut dyn FnMut(&JobProgress),
        recovery: &mut Option<(Instant, u32)>,
    ) -> Outcome {
        let (mut exhausted, mut finished) = (0, 0);
        let mut stopping: Option<StopReason> = None;
        let mut final_checkpoint: Option<CheckpointId> = None;
        let mut final_outcome: Option<Result<(), String>> = None;
        let mut last_report = (Instant::now(), self.progress.records);
        let total = deployed.all.len();
        let failed = |cause: JobError, recoverable: bool| {
            Outcome::Failed(Failure {
                cause,
                recoverable,
                at: Instant::now(),
            })
        };
        let outcome = loop {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(JobEvent::SourceExhausted(_)) => {
                    exhausted += 1;
                    if exhausted == deployed.sources.len() && stopping.is_none() {
                        stopping = Some(StopReason::EndOfInput);
                        let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
                    }
                }
                Ok(JobEvent::TaskFinished(_)) => finished += 1,
                Ok(JobEvent::TaskFailed {
                    subtask,
                    error,
                    recoverable,
                }) => {
                    let cause = if recoverable {
                        JobError::TaskFailed {
                            uid: deployed.uid(subtask),
                            subtask: subtask.index,
                            error,
                        }
                    } else {
                        JobError::BadInput(format!(
                            "'{}' subtask {}: {error}",
                            deployed.uid(subtask),
                            subtask.index
                        ))
                    };
                    tracing::warn!(%cause, "attempt {} failed", deployed.attempt);
                    break failed(cause, recoverable);
                }
                Ok(JobEvent::JobFailed(reason)) => break failed(JobError::Failed(reason), true),
                Ok(JobEvent::FinalCheckpointTriggered { id, savepoint }) => {
                    final_checkpoint = Some(id);
                    if savepoint {
                        stopping = Some(StopReason::Savepoint);
                    } else if stopping.is_none() {
                        stopping = Some(StopReason::Requested);
                    }
                }
                Ok(JobEvent::FinalCheckpointFailed(reason)) => final_outcome = Some(Err(reason)),
                Ok(JobEvent::FirstRecordProcessed { attempt }) => {
                    if let Some((failed_at, a)) = *recovery {
                        if a == attempt {
                            let ms = failed_at.elapsed().as_millis() as u64;
                            tracing::warn!(attempt, recovery_ms = ms, "job recovered: {ms} ms from the failure to the first record processed");
                            self.recovery_ms.push(ms);
                            *recovery = None;
                        }
                    }
                }
                Ok(event) => {
                    if let (JobEvent::CheckpointCompleted { id, .. }, Some(storage)) =
                        (&event, &self.claimed)
                    {
                        // Invariant: a claimed snapshot goes only once a newer checkpoint holds
                        // the job's whole state; its claim goes after it, so that a kill in
                        // between leaves the claim for the next run to settle.
                        match weir_storage::claim::settle(storage, *id) {
                            Ok(Some(path)) => {
                                tracing::info!(checkpoint = %id, path = %path.display(), "deleted the claimed snapshot")
                            }
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "could not delete the claimed snapshot; the job's next run tries again")
                            }
                        }
                        self.claimed = None;
                    }
                    match &event {
                        JobEvent::CheckpointCompleted { id, .. }
                            if Some(*id) == final_checkpoint =>
                        {
                            final_outcome = Some(Ok(()))
                        }
                        JobEvent::CheckpointAborted { id, reason }
                            if Some(*id) == final_checkpoint =>
                        {
                            final_outcome = Some(Err(reason.clone()))
                        }
                        _ => {}
                    }
                    count_checkpoint(&mut self.progress, event);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    break failed(JobError::Failed("job event channel closed".into()), false)
                }
            }
            if finished == total {
                match (stopping, &final_outcome) {
                    (_, Some(Ok(()))) | (None, _) => break Outcome::Finished,
                    (Some(StopReason::Requested), Some(Err(reason))) => {
                        tracing::warn!(%reason, "stopped without a final checkpoint; the latest one stands");
                        break Outcome::Finished;
                    }
                    (Some(StopReason::EndOfInput), Some(Err(reason))) => {
                        let cause =
                            JobError::Failed(format!("the final checkpoint failed: {reason}"));
                        break failed(cause, true);
                    }
                    (Some(StopReason::Savepoint), Some(Err(reason))) => {
                        let cause =
                            JobError::Failed(format!("stop with savepoint failed: {reason}"));
                        break failed(cause, true);
                    }
                    (Some(_), None) => {} // its outcome is on the way
                }
            }
            if stop.is_cancelled() {
                break Outcome::Cancelled;
            }
            if stop.is_stopped() && stopping.is_none() {
                stopping = Some(StopReason::Requested);
                tracing::info!("stopping: taking a final checkpoint");
                let _ = coordinator.send(CoordinatorMessage::StopWithCheckpoint);
            }
            if last_report.0.elapsed() >= Duration::from_millis(500) {
                let p = &mut self.progress;
                p.records = self.records_before + deployed.source_records();
                p.records_per_second = p.records.saturating_sub(last_report.1) as f64
                    / last_report.0.elapsed().as_secs_f64();
                p.elapsed = self.started.elapsed();
                last_report = (Instant::now(), p.records);
                progress(p);
            }
        };
        self.records_before += deployed.source_records();
        self.progress.records = self.records_before;
        self.progress.elapsed = self.started.elapsed();
        outcome
    }
}

/// A subtask failure reported while the attempt was shutting down (e.g. a failed commit).
pub(crate) fn late_failure(events: &Receiver<JobEvent>, watch: &mut Watch) -> Option<Failure> {
    let mut failure = None;
    for event in events.try_iter() {
        match event {
            JobEvent::TaskFailed {
                error, recoverable, ..
            } if failure.is_none() => {
                failure = Some(Failure {
                    cause: JobError::Failed(error),
                    recoverable,
                    at: Instant::now(),
                })
            }
            other => count_checkpoint(&mut watch.progress, other),
        }
    }
    failure
}

pub(crate) fn count_checkpoint(p: &mut JobProgress, event: JobEvent) {
    match event {
        JobEvent::CheckpointCompleted {
            id,
            duration_ms,
            size_bytes,
        } => {
            p.checkpoints_completed += 1;
            p.last_checkpoint = Some(LastCheckpoint {
                id,
                duration_ms,
                size_bytes,
            });
        }
        JobEvent::CheckpointAborted { .. } => p.checkpoints_failed += 1,
        _ => {}
    }
}

/// Sleeps `delay`, waking early (and returning false) if the job is asked to stop.
pub(crate) fn sleep_unless_stopped(delay: Duration, stop: &StopHandle) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if stop.is_stopped() {
            return false;
        }
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.is_stopped()
}
