//! Weir's checkpoint coordinator and what it keeps: the id counter, the completed checkpoint
//! store and the statistics.
//!
//! # Role in the flows
//!
//! The [`CheckpointCoordinator`] is the job manager's side of asynchronous barrier
//! snapshotting, written as a **pure state machine**: [`Event`]s and the current time go in,
//! [`Action`]s come out. It has no threads, timers, I/O or clock, so every rule is tested
//! deterministically; a thin driver (in the runtime) owns those and runs the actions.
//!
//! 1. **Trigger.** On [`Event::Tick`] (the driver ticks at
//!    [`CheckpointCoordinator::next_deadline`]) a due periodic trigger, or an
//!    [`Event::TriggerRequest`] from REST or the CLI, is checked against the job status, the
//!    sources' status, max-concurrent-checkpoints and min-pause; if not allowed yet it waits in
//!    a queue. The id comes from a [`CheckpointIdCounter`] run by the driver
//!    ([`Action::AllocateId`] → [`Event::IdAllocated`]), then the coordinator records a
//!    [`PendingCheckpoint`] and emits [`Action::TriggerSources`].
//! 2. **Acknowledge.** Every subtask answers with [`Event::Ack`] (state handles and timings)
//!    or [`Event::Decline`]. Late and unknown acknowledgements have their state discarded.
//! 3. **Complete.** With every acknowledgement in, the coordinator asks for the metadata to be
//!    written ([`Action::WriteMetadata`]); only after [`Event::MetadataWritten`] is the
//!    checkpoint added to the [`CompletedCheckpointStore`] (evicted checkpoints and
//!    unreferenced shared files are discarded), older pending checkpoints are subsumed, and
//!    every subtask is notified ([`Action::NotifyComplete`]): the moment sinks commit.
//! 4. **Abort.** Declined, expired, failed metadata writes, task failures, job status changes
//!    and shutdown abort a checkpoint: its files are discarded, subtasks are notified, and the
//!    failure budget (tolerable-failed-checkpoints) may fail the job ([`Action::FailJob`]).
//! 5. **Recover.** On `--resume` the driver reads the retained checkpoints from storage and
//!    hands them to [`CheckpointCoordinator::restore`]; the counter is seeded past the
//!    newest id ([`StandaloneCheckpointIdCounter::starting_after`]).
//!
//! [`CheckpointStats`] follows all of it for REST, the UI and metrics.
//!
//! ```
//! use weir_checkpoint::*;
//! use weir_core::{CheckpointId, CheckpointKind, JobId, OperatorId, SubtaskId, SubtaskState};
//!
//! let job = JobId(1);
//! let source = SubtaskId::new(OperatorId(1), 0);
//! let vertices = JobVertices { sources: vec![source], all: vec![source] };
//! let mut coordinator = CheckpointCoordinator::new(job, CheckpointConfig::default(), vertices);
//! coordinator.handle(Event::SubtaskStatus { subtask: source, status: TaskStatus::Running }, 0);
//! coordinator.handle(Event::JobStatusChanged(JobStatus::Running), 0);
//!
//! let kind = CheckpointKind::Checkpoint;
//! let actions = coordinator.handle(Event::TriggerRequest { request: 7, kind }, 10);
//! assert_eq!(actions, vec![Action::AllocateId { request: 7 }]);
//! let mut counter = StandaloneCheckpointIdCounter::new();
//! let id = counter.get_and_increment().unwrap();
//! coordinator.handle(Event::IdAllocated { request: 7, id }, 10);
//! let ack = Event::Ack { job, subtask: source, checkpoint: id, state: SubtaskState::default(),
//!                        metrics: AckMetrics::default() };
//! let actions = coordinator.handle(ack, 20);
//! assert!(matches!(actions[0], Action::WriteMetadata { .. }));
//! let actions = coordinator.handle(Event::MetadataWritten { checkpoint: id, metadata_bytes: 100 }, 25);
//! assert!(actions.contains(&Action::RequestCompleted { request: 7, checkpoint: id }));
//! assert_eq!(coordinator.latest_completed().map(|c| c.id), Some(CheckpointId(1)));
//! ```

pub mod completed;
pub mod coordinator;
pub mod counter;
pub mod events;
mod failure;
pub mod pending;
mod queue;
pub mod stats;
pub mod store;
pub mod summary;

pub use completed::CompletedCheckpoint;
pub use coordinator::CheckpointCoordinator;
pub use counter::{CheckpointIdCounter, CounterError, StandaloneCheckpointIdCounter};
pub use events::{
    AbortReason, AckMetrics, Action, Event, JobStatus, JobVertices, RequestId, TaskStatus,
    PERIODIC_REQUEST_BASE,
};
pub use pending::PendingCheckpoint;
pub use queue::MAX_QUEUED_TRIGGERS;
pub use stats::{
    CheckpointCounts, CheckpointStats, CheckpointStatsEntry, CheckpointStatus,
    CompletedCheckpointSummary, LatestCheckpoints, RestoredCheckpointStats, SubtaskAckStats,
    SubtaskCheckpointStats,
};
pub use store::{
    CompletedCheckpointStore, Discard, StandaloneCompletedCheckpointStore, StoreError,
};
pub use summary::{StatsSummary, SummarySnapshot};
pub use weir_core::config::CheckpointConfig;
