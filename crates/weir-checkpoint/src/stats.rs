//! Checkpoint statistics (Flink's `CheckpointStatsTracker`): counts, a bounded history with
//! per-subtask details, summaries over completed checkpoints and the latest checkpoint of each
//! kind. Everything serialises, so a REST layer can serve Flink's checkpoint schema from it.
//!
//! The coordinator reports into it; readers get it through
//! [`crate::CheckpointCoordinator::stats`]. History entries are kept in id order, which is
//! trigger order, so an acknowledgement finds its entry by binary search.

use crate::completed::CompletedCheckpoint;
use crate::events::{AbortReason, AckMetrics};
use crate::pending::PendingCheckpoint;
use crate::summary::StatsSummary;
use serde::Serialize;
use std::collections::VecDeque;
use weir_core::{CheckpointId, SubtaskId, SubtaskState};

/// Where a checkpoint in the history stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Failed,
}

/// How many checkpoints did what, since the coordinator was created.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize)]
pub struct CheckpointCounts {
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    /// Restores from a retained checkpoint.
    pub restored: u64,
    /// Checkpoints started: in progress + completed + failed.
    pub total: u64,
    /// Triggers that never became a checkpoint (job or sources not running, no id).
    pub failed_triggers: u64,
}

/// One subtask's acknowledgement of one checkpoint.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct SubtaskAckStats {
    pub ack_timestamp_ms: u64,
    /// From the trigger to this acknowledgement.
    pub end_to_end_duration_ms: u64,
    pub sync_duration_ms: u64,
    pub async_duration_ms: u64,
    pub alignment_duration_ms: u64,
    pub start_delay_ms: u64,
    pub state_size: u64,
    /// Bytes the snapshot wrote, its channel state included.
    pub persisted_size: u64,
    /// Taken unaligned, with the data queued in the input channels as channel state.
    pub unaligned: bool,
    /// Bytes of channel state written (Flink's persisted data); part of `persisted_size`.
    pub persisted_data: u64,
    /// Records processed during alignment (Flink's processed data, in records).
    pub processed_records: u64,
}

/// A subtask's line in a checkpoint's details; `ack` is `None` until it acknowledged.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct SubtaskCheckpointStats {
    pub subtask: SubtaskId,
    pub ack: Option<SubtaskAckStats>,
}

/// One checkpoint as the history shows it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct CheckpointStatsEntry {
    pub id: CheckpointId,
    pub status: CheckpointStatus,
    pub is_savepoint: bool,
    /// A savepoint in the state backend's native format.
    pub native_format: bool,
    pub trigger_timestamp_ms: u64,
    pub latest_ack_timestamp_ms: Option<u64>,
    /// When the metadata became durable: the moment min-pause is measured from.
    pub completion_timestamp_ms: Option<u64>,
    /// From the trigger to completion, failure, or (in progress) the latest acknowledgement.
    pub end_to_end_duration_ms: u64,
    /// Bytes of all state referenced (full size), over the acknowledgements so far.
    pub state_size: u64,
    /// Bytes this checkpoint wrote itself (incremental size), channel state included.
    pub persisted_size: u64,
    /// Some subtask took it unaligned (Flink's `UNALIGNED_CHECKPOINT`).
    pub unaligned: bool,
    /// Bytes of channel state its subtasks wrote, over the acknowledgements so far.
    pub persisted_data: u64,
    /// Records its subtasks processed during alignment, over the acknowledgements so far.
    pub processed_records: u64,
    pub metadata_size: Option<u64>,
    pub num_acknowledged_subtasks: usize,
    pub num_subtasks: usize,
    pub failure_reason: Option<String>,
    pub failure_timestamp_ms: Option<u64>,
    pub subtasks: Vec<SubtaskCheckpointStats>,
}

/// Summaries over completed checkpoints (savepoints included, as in Flink).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompletedCheckpointSummary {
    pub end_to_end_duration_ms: StatsSummary,
    pub state_size: StatsSummary,
    pub persisted_size: StatsSummary,
    /// Bytes of channel state per checkpoint.
    pub persisted_data: StatsSummary,
    /// Records processed during alignment per checkpoint.
    pub processed_records: StatsSummary,
}

/// The checkpoint the job was last restored from.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct RestoredCheckpointStats {
    pub id: CheckpointId,
    pub is_savepoint: bool,
    pub restore_timestamp_ms: u64,
}

/// The newest checkpoint of each outcome.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize)]
pub struct LatestCheckpoints {
    pub completed: Option<CheckpointStatsEntry>,
    pub savepoint: Option<CheckpointStatsEntry>,
    pub failed: Option<CheckpointStatsEntry>,
    pub restored: Option<RestoredCheckpointStats>,
}

/// All checkpoint statistics of one job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckpointStats {
    pub counts: CheckpointCounts,
    pub summary: CompletedCheckpointSummary,
    pub latest: LatestCheckpoints,
    // Invariant: at most `history_size` entries, ascending by id.
    history: VecDeque<CheckpointStatsEntry>,
    #[serde(skip)]
    history_size: usize,
}

impl CheckpointStats {
    /// Statistics remembering the newest `history_size` checkpoints (at least one).
    pub fn new(history_size: u32) -> CheckpointStats {
        CheckpointStats {
            counts: CheckpointCounts::default(),
            summary: CompletedCheckpointSummary::default(),
            latest: LatestCheckpoints::default(),
            history: VecDeque::new(),
            history_size: history_size.max(1) as usize,
        }
    }

    /// The newest checkpoints, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &CheckpointStatsEntry> {
        self.history.iter()
    }

    /// One checkpoint of the history.
    pub fn entry(&self, id: CheckpointId) -> Option<&CheckpointStatsEntry> {
        self.position(id).map(|i| &self.history[i])
    }

    fn position(&self, id: CheckpointId) -> Option<usize> {
        self.history.binary_search_by_key(&id, |e| e.id).ok()
    }

    fn entry_mut(&mut self, id: CheckpointId) -> Option<&mut CheckpointStatsEntry> {
        self.position(id).map(|i| &mut self.history[i])
    }

    pub(crate) fn report_pending(&mut self, pending: &PendingCheckpoint, subtasks: &[SubtaskId]) {
        self.counts.in_progress += 1;
        self.counts.total += 1;
        if self.history.len() == self.history_size {
            self.history.pop_front();
        }
        let entry = CheckpointStatsEntry {
            id: pending.id(),
            status: CheckpointStatus::InProgress,
            is_savepoint: pending.is_savepoint(),
            native_format: pending.kind() == weir_core::CheckpointKind::NativeSavepoint,
            trigger_timestamp_ms: pending.trigger_timestamp_ms(),
            latest_ack_timestamp_ms: None,
            completion_timestamp_ms: None,
            end_to_end_duration_ms: 0,
            state_size: 0,
            persisted_size: 0,
            unaligned: false,
            persisted_data: 0,
            processed_records: 0,
            metadata_size: None,
            num_acknowledged_subtasks: 0,
            num_subtasks: subtasks.len(),
            failure_reason: None,
            failure_timestamp_ms: None,
            subtasks: subtasks
                .iter()
                .map(|&subtask| SubtaskCheckpointStats { subtask, ack: None })
                .collect(),
        };
        // Invariant kept: ids are triggered in ascending order, so pushing at the back keeps
        // the history sorted; an out-of-order id (never produced by the coordinator) is placed.
        match self.history.back() {
            Some(last) if last.id >= entry.id => {
                let at = self.history.partition_point(|e| e.id < entry.id);
                self.history.insert(at, entry);
            }
            _ => self.history.push_back(entry),
        }
    }

    /// Records subtask `index`'s acknowledgement. O(log history) and no allocation.
    pub(crate) fn report_ack(
        &mut self,
        id: CheckpointId,
        index: usize,
        now_ms: u64,
        metrics: &AckMetrics,
        state: &SubtaskState,
    ) {
        let Some(entry) = self.entry_mut(id) else {
            return; // fell out of the history already
        };
        let Some(line) = entry.subtasks.get_mut(index) else {
            return;
        };
        line.ack = Some(SubtaskAckStats {
            ack_timestamp_ms: now_ms,
            end_to_end_duration_ms: now_ms.saturating_sub(entry.trigger_timestamp_ms),
            sync_duration_ms: metrics.sync_duration_ms,
            async_duration_ms: metrics.async_duration_ms,
            alignment_duration_ms: metrics.alignment_duration_ms,
            start_delay_ms: metrics.start_delay_ms,
            state_size: state.state_size,
            persisted_size: state.persisted_size,
            unaligned: metrics.unaligned,
            persisted_data: metrics.persisted_data,
            processed_records: metrics.processed_records,
        });
        entry.num_acknowledged_subtasks += 1;
        entry.state_size += state.state_size;
        entry.persisted_size += state.persisted_size;
        entry.unaligned |= metrics.unaligned;
        entry.persisted_data += metrics.persisted_data;
        entry.processed_records += metrics.processed_records;
        entry.latest_ack_timestamp_ms = Some(now_ms);
        entry.end_to_end_duration_ms = now_ms.saturating_sub(entry.trigger_timestamp_ms);
    }

    pub(crate) fn report_completed(
        &mut self,
        checkpoint: &CompletedCheckpoint,
        metadata_bytes: u64,
        now_ms: u64,
    ) {
        self.counts.in_progress = self.counts.in_progress.saturating_sub(1);
        self.counts.completed += 1;
        let end_to_end = now_ms.saturating_sub(checkpoint.trigger_timestamp_ms);
        let (state_size, persisted_size) = (checkpoint.state_size(), checkpoint.persisted_size());
        // The in-flight data came with the acknowledgements, which only the history entry
        // added up; one evicted before its checkpoint completed (more checkpoints pending than
        // the history holds) counts as none.
        let (persisted_data, processed_records) = self
            .entry(checkpoint.id)
            .map_or((0, 0), |e| (e.persisted_data, e.processed_records));
        self.summary.end_to_end_duration_ms.add(end_to_end);
        self.summary.state_size.add(state_size);
        self.summary.persisted_size.add(persisted_size);
        self.summary.persisted_data.add(persisted_data);
        self.summary.processed_records.add(processed_records);
        let num_subtasks = checkpoint.subtask_states.len();
        let entry = match self.entry_mut(checkpoint.id) {
            Some(entry) => entry,
            None => return,
        };
        entry.status = CheckpointStatus::Completed;
        entry.completion_timestamp_ms = Some(now_ms);
        entry.end_to_end_duration_ms = end_to_end;
        entry.state_size = state_size;
        entry.persisted_size = persisted_size;
        entry.metadata_size = Some(metadata_bytes);
        entry.num_acknowledged_subtasks = num_subtasks;
        let entry = entry.clone();
        if entry.is_savepoint {
            self.latest.savepoint = Some(entry);
        } else {
            self.latest.completed = Some(entry);
        }
    }

    pub(crate) fn report_failed(
        &mut self,
        pending: &PendingCheckpoint,
        reason: &AbortReason,
        now_ms: u64,
    ) {
        self.counts.in_progress = self.counts.in_progress.saturating_sub(1);
        self.counts.failed += 1;
        let end_to_end = now_ms.saturating_sub(pending.trigger_timestamp_ms());
        let entry = match self.entry_mut(pending.id()) {
            Some(entry) => entry,
            None => return,
        };
        entry.status = CheckpointStatus::Failed;
        entry.end_to_end_duration_ms = end_to_end;
        entry.failure_reason = Some(reason.to_string());
        entry.failure_timestamp_ms = Some(now_ms);
        self.latest.failed = Some(entry.clone());
    }

    pub(crate) fn report_failed_trigger(&mut self) {
        self.counts.failed_triggers += 1;
    }

    pub(crate) fn report_restored(&mut self, checkpoint: &CompletedCheckpoint, now_ms: u64) {
        self.counts.restored += 1;
        self.latest.restored = Some(RestoredCheckpointStats {
            id: checkpoint.id,
            is_savepoint: checkpoint.is_savepoint(),
            restore_timestamp_ms: now_ms,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{CheckpointKind, OperatorId};

    fn subtasks(n: u32) -> Vec<SubtaskId> {
        (0..n).map(|i| SubtaskId::new(OperatorId(1), i)).collect()
    }

    fn pending(id: u64, at: u64, n: usize) -> PendingCheckpoint {
        PendingCheckpoint::new(CheckpointId(id), CheckpointKind::Checkpoint, None, at, n)
    }

    #[test]
    fn the_history_is_bounded_and_keeps_the_newest() {
        let mut stats = CheckpointStats::new(2);
        for id in 1..=3 {
            stats.report_pending(&pending(id, id * 10, 1), &subtasks(1));
        }
        let ids: Vec<u64> = stats.history().map(|e| e.id.0).collect();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(stats.counts.in_progress, 3);
        assert_eq!(stats.counts.total, 3);
    }

    #[test]
    fn acknowledgements_fill_in_per_subtask_details_and_totals() {
        let mut stats = CheckpointStats::new(5);
        let p = pending(1, 100, 2);
        stats.report_pending(&p, &subtasks(2));
        let metrics = AckMetrics {
            sync_duration_ms: 1,
            async_duration_ms: 2,
            alignment_duration_ms: 3,
            start_delay_ms: 4,
            ..AckMetrics::default()
        };
        let state = SubtaskState {
            handles: vec![],
            state_size: 50,
            persisted_size: 20,
        };
        stats.report_ack(CheckpointId(1), 1, 130, &metrics, &state);
        let e = stats.entry(CheckpointId(1)).unwrap();
        assert_eq!(e.num_acknowledged_subtasks, 1);
        assert_eq!(e.latest_ack_timestamp_ms, Some(130));
        assert_eq!(e.end_to_end_duration_ms, 30);
        let ack = e.subtasks[1].ack.unwrap();
        assert_eq!(
            (
                ack.sync_duration_ms,
                ack.async_duration_ms,
                ack.alignment_duration_ms,
                ack.start_delay_ms
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(
            (ack.state_size, ack.persisted_size, ack.ack_timestamp_ms),
            (50, 20, 130)
        );
        assert!(e.subtasks[0].ack.is_none());

        stats.report_failed(&p, &AbortReason::Expired, 200);
        let e = stats.entry(CheckpointId(1)).unwrap();
        assert_eq!(e.status, CheckpointStatus::Failed);
        assert_eq!(e.failure_timestamp_ms, Some(200));
        assert_eq!(stats.counts.failed, 1);
        assert_eq!(stats.counts.in_progress, 0);
        assert_eq!(
            stats.latest.failed.as_ref().map(|e| e.id),
            Some(CheckpointId(1))
        );
    }

    #[test]
    fn a_checkpoint_is_unaligned_once_any_subtask_took_it_unaligned_and_sums_its_in_flight_data() {
        let mut stats = CheckpointStats::new(5);
        let p = pending(1, 100, 2);
        stats.report_pending(&p, &subtasks(2));
        let state = SubtaskState {
            handles: vec![],
            state_size: 500,
            persisted_size: 300,
        };
        let aligned = AckMetrics {
            processed_records: 7,
            ..AckMetrics::default()
        };
        stats.report_ack(CheckpointId(1), 0, 110, &aligned, &state);
        let e = stats.entry(CheckpointId(1)).unwrap();
        assert!(!e.unaligned);
        assert_eq!((e.persisted_data, e.processed_records), (0, 7));

        let unaligned = AckMetrics {
            unaligned: true,
            persisted_data: 200,
            ..AckMetrics::default()
        };
        stats.report_ack(CheckpointId(1), 1, 120, &unaligned, &state);
        let e = stats.entry(CheckpointId(1)).unwrap();
        assert!(e.unaligned);
        assert_eq!((e.persisted_data, e.processed_records), (200, 7));
        let lines: Vec<(bool, u64)> = e
            .subtasks
            .iter()
            .map(|l| l.ack.map(|a| (a.unaligned, a.persisted_data)).unwrap())
            .collect();
        assert_eq!(lines, vec![(false, 0), (true, 200)]);

        let completed = CompletedCheckpoint {
            job: weir_core::JobId(1),
            id: CheckpointId(1),
            kind: CheckpointKind::Checkpoint,
            trigger_timestamp_ms: 100,
            completion_timestamp_ms: 120,
            subtask_states: subtasks(2)
                .into_iter()
                .map(|s| (s, state.clone()))
                .collect(),
        };
        stats.report_completed(&completed, 64, 125);
        let e = stats.latest.completed.as_ref().unwrap();
        assert!(e.unaligned);
        assert_eq!(stats.summary.persisted_data.snapshot().max, 200);
        assert_eq!(stats.summary.processed_records.snapshot().max, 7);
    }

    #[test]
    fn every_stats_type_serialises_for_the_rest_layer() {
        fn serialisable<T: Serialize>() {}
        serialisable::<CheckpointStats>();
        serialisable::<CheckpointStatsEntry>();
        serialisable::<LatestCheckpoints>();
        serialisable::<CompletedCheckpointSummary>();
    }
}
