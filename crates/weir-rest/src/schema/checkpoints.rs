//! The checkpoint bodies, from the coordinator's [`CheckpointStats`]:
//! `CheckpointingStatistics` (`/jobs/:jobid/checkpoints`), `CheckpointStatistics` with its
//! per-task map (`…/checkpoints/details/:checkpointid`),
//! `TaskCheckpointStatisticsWithSubtaskDetails` (`…/subtasks/:vertexid`) and
//! `CheckpointConfigInfo` (`…/checkpoints/config`).
//!
//! Sizes: Flink's `state_size` is the full size of the state a checkpoint references, and
//! `checkpointed_size` what this checkpoint wrote itself (its incremental size, channel state
//! included) — Weir's `state_size` and `persisted_size`.
//!
//! Unaligned checkpoints: a checkpoint some subtask took unaligned is a checkpoint of type
//! `UNALIGNED_CHECKPOINT` (Flink has no other per-checkpoint field for it), and each such
//! subtask says `unaligned_checkpoint: true`. `persisted_data` (`alignment.persisted` per
//! subtask) is the bytes of channel state written, as Flink's. `processed_data`
//! (`alignment.processed`) counts **records**, not bytes: what a subtask handed its operator
//! while aligning, as Weir never serialises records inside a process. Alignment `buffered` is
//! always 0, as Flink writes it.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use weir_checkpoint::{
    CheckpointStats, CheckpointStatsEntry, CheckpointStatus, CompletedCheckpointSummary,
    RestoredCheckpointStats, SubtaskAckStats, SubtaskCheckpointStats,
};
use weir_core::config::{CheckpointConfig, CheckpointingMode, StateBackendKind};
use weir_core::{CheckpointId, OperatorId};
use weir_runtime::JobHandle;

use super::{clamp, or_minus_one, StatsSummaryDto};
use crate::ids::vertex_id;

/// What the server knows about a checkpoint beyond the statistics: where a savepoint went and
/// whether it stopped the job.
#[derive(Clone, Debug, Default)]
pub struct KnownCheckpoint {
    pub location: Option<PathBuf>,
    pub stopped_job: bool,
}

/// Everything the checkpoint bodies are built from.
pub struct CheckpointView<'a> {
    pub job: &'a JobHandle,
    pub stats: &'a CheckpointStats,
    pub known: &'a HashMap<CheckpointId, KnownCheckpoint>,
}

/// Flink's `Counts`.
#[derive(Clone, Debug, Serialize)]
pub struct Counts {
    pub restored: i64,
    pub total: i64,
    pub in_progress: i32,
    pub completed: i64,
    pub failed: i64,
}

/// Flink's `CheckpointStatisticsSummary`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointStatisticsSummary {
    pub checkpointed_size: StatsSummaryDto,
    pub state_size: StatsSummaryDto,
    pub end_to_end_duration: StatsSummaryDto,
    pub alignment_buffered: StatsSummaryDto,
    pub processed_data: StatsSummaryDto,
    pub persisted_data: StatsSummaryDto,
}

/// Flink's `TaskCheckpointStatistics`: one vertex's share of a checkpoint.
#[derive(Clone, Debug, Serialize)]
pub struct TaskCheckpointStatistics {
    pub id: i64,
    pub status: &'static str,
    pub latest_ack_timestamp: i64,
    pub checkpointed_size: i64,
    pub state_size: i64,
    pub end_to_end_duration: i64,
    pub alignment_buffered: i64,
    pub processed_data: i64,
    pub persisted_data: i64,
    pub num_subtasks: i32,
    pub num_acknowledged_subtasks: i32,
}

/// Flink's `CheckpointStatistics` with its `className` discriminator: `completed`, `failed`
/// or `in_progress`; the fields of the first two are set only for them.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointStatistics {
    #[serde(rename = "className")]
    pub class_name: &'static str,
    pub id: i64,
    pub status: &'static str,
    pub is_savepoint: bool,
    /// `CANONICAL` for savepoints, `null` for checkpoints (as Flink).
    #[serde(rename = "savepointFormat")]
    pub savepoint_format: Option<&'static str>,
    pub trigger_timestamp: i64,
    pub latest_ack_timestamp: i64,
    pub checkpointed_size: i64,
    pub state_size: i64,
    pub end_to_end_duration: i64,
    pub alignment_buffered: i64,
    pub processed_data: i64,
    pub persisted_data: i64,
    pub num_subtasks: i32,
    pub num_acknowledged_subtasks: i32,
    pub checkpoint_type: &'static str,
    /// Per vertex id; empty in the history, filled in the details.
    pub tasks: BTreeMap<String, TaskCheckpointStatistics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_timestamp: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

/// Flink's `RestoredCheckpointStatistics`.
#[derive(Clone, Debug, Serialize)]
pub struct RestoredCheckpointStatistics {
    pub id: i64,
    pub restore_timestamp: i64,
    pub is_savepoint: bool,
    pub external_path: String,
}

/// Flink's `LatestCheckpoints`: `null` where there is none yet, as in Flink.
#[derive(Clone, Debug, Serialize)]
pub struct LatestCheckpoints {
    pub completed: Option<CheckpointStatistics>,
    pub savepoint: Option<CheckpointStatistics>,
    pub failed: Option<CheckpointStatistics>,
    pub restored: Option<RestoredCheckpointStatistics>,
}

/// Flink's `CheckpointingStatistics` (`GET /jobs/:jobid/checkpoints`).
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointingStatistics {
    pub counts: Counts,
    pub summary: CheckpointStatisticsSummary,
    pub latest: LatestCheckpoints,
    /// Newest first.
    pub history: Vec<CheckpointStatistics>,
}

/// Flink's `CheckpointDuration`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointDuration {
    pub sync: i64,
    #[serde(rename = "async")]
    pub async_: i64,
}

/// Flink's `CheckpointAlignment`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointAlignment {
    pub buffered: i64,
    pub processed: i64,
    pub persisted: i64,
    pub duration: i64,
}

/// Flink's `SubtaskCheckpointStatistics`: `completed` (acknowledged) or `pending`.
#[derive(Clone, Debug, Serialize)]
pub struct SubtaskCheckpointStatistics {
    #[serde(rename = "className")]
    pub class_name: &'static str,
    pub index: i32,
    pub status: &'static str,
    #[serde(flatten)]
    pub ack: Option<CompletedSubtask>,
}

/// The fields of Flink's `CompletedSubtaskCheckpointStatistics`.
#[derive(Clone, Debug, Serialize)]
pub struct CompletedSubtask {
    pub ack_timestamp: i64,
    pub end_to_end_duration: i64,
    pub state_size: i64,
    pub checkpointed_size: i64,
    pub checkpoint: CheckpointDuration,
    pub alignment: CheckpointAlignment,
    pub start_delay: i64,
    pub unaligned_checkpoint: bool,
    pub aborted: bool,
}

/// Flink's `CheckpointDurationSummary`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointDurationSummary {
    pub sync: StatsSummaryDto,
    #[serde(rename = "async")]
    pub async_: StatsSummaryDto,
}

/// Flink's `CheckpointAlignmentSummary`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointAlignmentSummary {
    pub buffered: StatsSummaryDto,
    pub processed: StatsSummaryDto,
    pub persisted: StatsSummaryDto,
    pub duration: StatsSummaryDto,
}

/// Flink's `TaskCheckpointStatisticsWithSubtaskDetailsSummary`.
#[derive(Clone, Debug, Serialize)]
pub struct SubtaskDetailsSummary {
    pub checkpointed_size: StatsSummaryDto,
    pub state_size: StatsSummaryDto,
    pub end_to_end_duration: StatsSummaryDto,
    pub checkpoint_duration: CheckpointDurationSummary,
    pub alignment: CheckpointAlignmentSummary,
    pub start_delay: StatsSummaryDto,
}

/// Flink's `TaskCheckpointStatisticsWithSubtaskDetails`.
#[derive(Clone, Debug, Serialize)]
pub struct TaskCheckpointStatisticsWithSubtaskDetails {
    #[serde(flatten)]
    pub task: TaskCheckpointStatistics,
    pub summary: SubtaskDetailsSummary,
    pub subtasks: Vec<SubtaskCheckpointStatistics>,
}

/// Flink's `ExternalizedCheckpointInfo`.
#[derive(Clone, Debug, Serialize)]
pub struct ExternalizedCheckpointInfo {
    pub enabled: bool,
    pub delete_on_cancellation: bool,
}

/// Flink's `CheckpointConfigInfo` (`GET /jobs/:jobid/checkpoints/config`).
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointConfigInfo {
    pub mode: &'static str,
    /// Milliseconds; Flink's `Long.MAX_VALUE` when periodic checkpoints are off.
    pub interval: i64,
    pub timeout: i64,
    pub min_pause: i64,
    pub max_concurrent: i64,
    pub externalization: ExternalizedCheckpointInfo,
    pub state_backend: &'static str,
    pub checkpoint_storage: String,
    pub unaligned_checkpoints: bool,
    pub tolerable_failed_checkpoints: i32,
    pub aligned_checkpoint_timeout: i64,
    pub checkpoints_after_tasks_finish: bool,
    pub state_changelog_enabled: bool,
    pub changelog_periodic_materialization_interval: i64,
    pub changelog_storage: &'static str,
}

fn status_name(status: CheckpointStatus) -> &'static str {
    match status {
        CheckpointStatus::InProgress => "IN_PROGRESS",
        CheckpointStatus::Completed => "COMPLETED",
        CheckpointStatus::Failed => "FAILED",
    }
}

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl CheckpointConfigInfo {
    /// The configuration of a job checkpointing with `config`, its keyed state in `backend`.
    pub fn of(config: &CheckpointConfig, backend: StateBackendKind) -> CheckpointConfigInfo {
        CheckpointConfigInfo {
            mode: match config.mode {
                CheckpointingMode::ExactlyOnce => "EXACTLY_ONCE",
                CheckpointingMode::AtLeastOnce => "AT_LEAST_ONCE",
            },
            interval: config.interval.map(ms).unwrap_or(i64::MAX),
            timeout: ms(config.timeout),
            min_pause: ms(config.min_pause),
            max_concurrent: i64::from(config.max_concurrent),
            // Retained checkpoints stay on disk after the job ends, and survive cancellation.
            externalization: ExternalizedCheckpointInfo {
                enabled: true,
                delete_on_cancellation: false,
            },
            // Flink's names of its heap and RocksDB backends.
            state_backend: match backend {
                StateBackendKind::HashMap => "HashMapStateBackend",
                StateBackendKind::RocksDb => "EmbeddedRocksDBStateBackend",
            },
            checkpoint_storage: config.dir.display().to_string(),
            unaligned_checkpoints: config.unaligned,
            tolerable_failed_checkpoints: i32::try_from(config.tolerable_failed)
                .unwrap_or(i32::MAX),
            aligned_checkpoint_timeout: ms(config.aligned_timeout),
            // A source that ended stays in the job and keeps checkpointing (always, in Weir).
            checkpoints_after_tasks_finish: true,
            state_changelog_enabled: false,
            changelog_periodic_materialization_interval: 0,
            changelog_storage: "none",
        }
    }
}

impl CheckpointView<'_> {
    /// The vertex index of every operator id of the job.
    fn vertex_of(&self) -> HashMap<OperatorId, usize> {
        self.job
            .vertices()
            .iter()
            .enumerate()
            .map(|(i, v)| (OperatorId::from_uid(&v.uid), i))
            .collect()
    }

    /// Ids of the completed checkpoints whose files retention has deleted: all but the newest
    /// `num-retained` (savepoints are never deleted).
    fn discarded(&self) -> Vec<CheckpointId> {
        let retained = self.job.checkpoint_config().num_retained as usize;
        let mut completed: Vec<CheckpointId> = self
            .stats
            .history()
            .filter(|e| e.status == CheckpointStatus::Completed && !e.is_savepoint)
            .map(|e| e.id)
            .collect();
        completed.sort_unstable_by(|a, b| b.cmp(a));
        completed.into_iter().skip(retained.max(1)).collect()
    }

    fn external_path(&self, id: CheckpointId, savepoint: bool) -> String {
        if let Some(location) = self.known.get(&id).and_then(|k| k.location.as_ref()) {
            return location.display().to_string();
        }
        if savepoint {
            return "<savepoint location unknown>".into();
        }
        let config = self.job.checkpoint_config();
        format!("{}/{}/chk-{}", config.dir.display(), self.job.name(), id.0)
    }

    /// One checkpoint, with its per-vertex map when `with_tasks`.
    pub fn entry(&self, e: &CheckpointStatsEntry, with_tasks: bool) -> CheckpointStatistics {
        let stopped = self.known.get(&e.id).is_some_and(|k| k.stopped_job);
        let mut s = CheckpointStatistics {
            class_name: match e.status {
                CheckpointStatus::Completed => "completed",
                CheckpointStatus::Failed => "failed",
                CheckpointStatus::InProgress => "in_progress",
            },
            id: clamp(e.id.0),
            status: status_name(e.status),
            is_savepoint: e.is_savepoint,
            savepoint_format: e.is_savepoint.then_some(if e.native_format {
                "NATIVE"
            } else {
                "CANONICAL"
            }),
            trigger_timestamp: clamp(e.trigger_timestamp_ms),
            latest_ack_timestamp: or_minus_one(e.latest_ack_timestamp_ms),
            checkpointed_size: clamp(e.persisted_size),
            state_size: clamp(e.state_size),
            end_to_end_duration: clamp(e.end_to_end_duration_ms),
            alignment_buffered: 0,
            processed_data: clamp(e.processed_records),
            persisted_data: clamp(e.persisted_data),
            num_subtasks: i32::try_from(e.num_subtasks).unwrap_or(i32::MAX),
            num_acknowledged_subtasks: i32::try_from(e.num_acknowledged_subtasks)
                .unwrap_or(i32::MAX),
            checkpoint_type: match (e.is_savepoint, stopped) {
                (false, _) if e.unaligned => "UNALIGNED_CHECKPOINT",
                (false, _) => "CHECKPOINT",
                (true, false) => "SAVEPOINT",
                (true, true) => "SYNC_SAVEPOINT",
            },
            tasks: BTreeMap::new(),
            external_path: None,
            discarded: None,
            failure_timestamp: None,
            failure_message: None,
        };
        match e.status {
            CheckpointStatus::Completed => {
                s.external_path = Some(self.external_path(e.id, e.is_savepoint));
                s.discarded = Some(self.discarded().contains(&e.id));
            }
            CheckpointStatus::Failed => {
                s.failure_timestamp = Some(or_minus_one(e.failure_timestamp_ms));
                s.failure_message = Some(e.failure_reason.clone().unwrap_or_default());
            }
            CheckpointStatus::InProgress => {}
        }
        if with_tasks {
            for (i, v) in self.job.vertices().iter().enumerate() {
                s.tasks.insert(vertex_id(&v.uid), self.task(e, i));
            }
        }
        s
    }

    /// The subtask lines of `entry` that belong to vertex `vertex`, by subtask index.
    fn lines<'e>(
        &self,
        e: &'e CheckpointStatsEntry,
        vertex: usize,
    ) -> Vec<&'e SubtaskCheckpointStats> {
        let of = self.vertex_of();
        let mut lines: Vec<_> = e
            .subtasks
            .iter()
            .filter(|l| of.get(&l.subtask.operator) == Some(&vertex))
            .collect();
        lines.sort_by_key(|l| l.subtask.index);
        lines
    }

    /// Vertex `vertex`'s share of checkpoint `e`.
    pub fn task(&self, e: &CheckpointStatsEntry, vertex: usize) -> TaskCheckpointStatistics {
        let lines = self.lines(e, vertex);
        let acks: Vec<&SubtaskAckStats> = lines.iter().filter_map(|l| l.ack.as_ref()).collect();
        let latest_ack = acks.iter().map(|a| a.ack_timestamp_ms).max();
        TaskCheckpointStatistics {
            id: clamp(e.id.0),
            status: status_name(e.status),
            latest_ack_timestamp: or_minus_one(latest_ack),
            checkpointed_size: clamp(acks.iter().map(|a| a.persisted_size).sum()),
            state_size: clamp(acks.iter().map(|a| a.state_size).sum()),
            end_to_end_duration: latest_ack
                .map(|t| clamp(t.saturating_sub(e.trigger_timestamp_ms)))
                .unwrap_or(-1),
            alignment_buffered: 0,
            processed_data: clamp(acks.iter().map(|a| a.processed_records).sum()),
            persisted_data: clamp(acks.iter().map(|a| a.persisted_data).sum()),
            num_subtasks: i32::try_from(lines.len()).unwrap_or(i32::MAX),
            num_acknowledged_subtasks: i32::try_from(acks.len()).unwrap_or(i32::MAX),
        }
    }

    /// Vertex `vertex`'s share of checkpoint `e`, subtask by subtask.
    pub fn subtasks(
        &self,
        e: &CheckpointStatsEntry,
        vertex: usize,
    ) -> TaskCheckpointStatisticsWithSubtaskDetails {
        let lines = self.lines(e, vertex);
        let acks: Vec<&SubtaskAckStats> = lines.iter().filter_map(|l| l.ack.as_ref()).collect();
        let summary_of = |f: fn(&SubtaskAckStats) -> u64| {
            StatsSummaryDto::of(&acks.iter().map(|a| f(a)).collect::<Vec<_>>())
        };
        let zero = StatsSummaryDto::of(&vec![0; acks.len()]);
        TaskCheckpointStatisticsWithSubtaskDetails {
            task: self.task(e, vertex),
            summary: SubtaskDetailsSummary {
                checkpointed_size: summary_of(|a| a.persisted_size),
                state_size: summary_of(|a| a.state_size),
                end_to_end_duration: summary_of(|a| a.end_to_end_duration_ms),
                checkpoint_duration: CheckpointDurationSummary {
                    sync: summary_of(|a| a.sync_duration_ms),
                    async_: summary_of(|a| a.async_duration_ms),
                },
                alignment: CheckpointAlignmentSummary {
                    buffered: zero,
                    processed: summary_of(|a| a.processed_records),
                    persisted: summary_of(|a| a.persisted_data),
                    duration: summary_of(|a| a.alignment_duration_ms),
                },
                start_delay: summary_of(|a| a.start_delay_ms),
            },
            subtasks: lines
                .iter()
                .map(|l| SubtaskCheckpointStatistics {
                    class_name: if l.ack.is_some() {
                        "completed"
                    } else {
                        "pending"
                    },
                    index: i32::try_from(l.subtask.index).unwrap_or(i32::MAX),
                    status: if l.ack.is_some() {
                        "completed"
                    } else {
                        "pending_or_failed"
                    },
                    ack: l.ack.as_ref().map(|a| CompletedSubtask {
                        ack_timestamp: clamp(a.ack_timestamp_ms),
                        end_to_end_duration: clamp(a.end_to_end_duration_ms),
                        state_size: clamp(a.state_size),
                        checkpointed_size: clamp(a.persisted_size),
                        checkpoint: CheckpointDuration {
                            sync: clamp(a.sync_duration_ms),
                            async_: clamp(a.async_duration_ms),
                        },
                        alignment: CheckpointAlignment {
                            buffered: 0,
                            processed: clamp(a.processed_records),
                            persisted: clamp(a.persisted_data),
                            duration: clamp(a.alignment_duration_ms),
                        },
                        start_delay: clamp(a.start_delay_ms),
                        unaligned_checkpoint: a.unaligned,
                        aborted: false,
                    }),
                })
                .collect(),
        }
    }

    fn restored(&self, r: &RestoredCheckpointStats) -> RestoredCheckpointStatistics {
        RestoredCheckpointStatistics {
            id: clamp(r.id.0),
            restore_timestamp: clamp(r.restore_timestamp_ms),
            is_savepoint: r.is_savepoint,
            external_path: self.external_path(r.id, r.is_savepoint),
        }
    }

    /// The whole `CheckpointingStatistics`.
    pub fn statistics(&self) -> CheckpointingStatistics {
        let c = &self.stats.counts;
        let latest = &self.stats.latest;
        CheckpointingStatistics {
            counts: Counts {
                restored: clamp(c.restored),
                total: clamp(c.total),
                in_progress: i32::try_from(c.in_progress).unwrap_or(i32::MAX),
                completed: clamp(c.completed),
                failed: clamp(c.failed),
            },
            summary: summary(&self.stats.summary),
            latest: LatestCheckpoints {
                completed: latest.completed.as_ref().map(|e| self.entry(e, false)),
                savepoint: latest.savepoint.as_ref().map(|e| self.entry(e, false)),
                failed: latest.failed.as_ref().map(|e| self.entry(e, false)),
                restored: latest.restored.as_ref().map(|r| self.restored(r)),
            },
            history: {
                let mut entries: Vec<&CheckpointStatsEntry> = self.stats.history().collect();
                entries.reverse();
                entries.into_iter().map(|e| self.entry(e, false)).collect()
            },
        }
    }
}

fn summary(s: &CompletedCheckpointSummary) -> CheckpointStatisticsSummary {
    let none = StatsSummaryDto::default();
    CheckpointStatisticsSummary {
        checkpointed_size: StatsSummaryDto::from_snapshot(&s.persisted_size.snapshot()),
        state_size: StatsSummaryDto::from_snapshot(&s.state_size.snapshot()),
        end_to_end_duration: StatsSummaryDto::from_snapshot(&s.end_to_end_duration_ms.snapshot()),
        alignment_buffered: none,
        processed_data: StatsSummaryDto::from_snapshot(&s.processed_records.snapshot()),
        persisted_data: StatsSummaryDto::from_snapshot(&s.persisted_data.snapshot()),
    }
}
