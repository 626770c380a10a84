//! The driver without its thread: messages go through `translate` and `apply` directly, with a
//! manual clock and checkpoint storage in a temporary directory.

use super::*;
use crossbeam_channel::unbounded;
use weir_checkpoint::{
    AckMetrics, CompletedCheckpoint, CompletedCheckpointStore, Discard, JobStatus, JobVertices,
    StandaloneCheckpointIdCounter, StandaloneCompletedCheckpointStore, StoreError, TaskStatus,
};
use weir_core::config::CheckpointConfig;
use weir_core::{HandleKind, ManualClock, OperatorId, StateHandle, SubtaskState};
use weir_storage::CheckpointLayout;

use crate::graph::JobGraph;
use crate::handle::StopHandle;

const JOB_NAME: &str = "driver-test";

fn source() -> SubtaskId {
    SubtaskId::new(OperatorId(1), 0)
}

/// A driver for a job of one source subtask, already running.
fn running_driver(dir: &std::path::Path, config: CheckpointConfig) -> (Driver, Receiver<JobEvent>) {
    let store = StandaloneCompletedCheckpointStore::new(config.num_retained);
    running_driver_with_store(dir, config, Box::new(store))
}

/// Like [`running_driver`], with the coordinator keeping completed checkpoints in `store`.
fn running_driver_with_store(
    dir: &std::path::Path,
    config: CheckpointConfig,
    store: Box<dyn CompletedCheckpointStore>,
) -> (Driver, Receiver<JobEvent>) {
    let job = JobId::from_name(JOB_NAME);
    let vertices = JobVertices {
        sources: vec![source()],
        all: vec![source()],
    };
    let graph = JobGraph {
        name: JOB_NAME.into(),
        max_parallelism: 128,
        nodes: Vec::new(),
        edges: Vec::new(),
        operator_chaining: true,
    };
    let (events, events_rx) = unbounded();
    let storage = CheckpointStorage::open(&dir.join("checkpoints"), JOB_NAME).unwrap();
    let mut driver = Driver {
        setup: DriverSetup {
            job,
            job_name: JOB_NAME.into(),
            max_parallelism: 128,
            operators: Vec::new(),
            sources: vec![source()],
            checkpoint_timeout: config.timeout,
            savepoint_dir: Some(dir.join("savepoints")),
        },
        coordinator: CheckpointCoordinator::with_store(job, config.clone(), vertices, store),
        io: Io::start(
            Box::new(StandaloneCheckpointIdCounter::new()),
            storage.clone(),
        ),
        storage,
        clock: Arc::new(ManualClock::new(1_000)),
        controls: HashMap::new(),
        events,
        stopping: None,
        stop_drain: Drain::Keep,
        attempt: 0,
        handle: JobHandle::new(&graph, &config, StopHandle::new()),
        targets: HashMap::new(),
        requests: HashMap::new(),
        savepoints: HashMap::new(),
        written: HashMap::new(),
    };
    driver.apply(Event::SubtaskStatus {
        subtask: source(),
        status: TaskStatus::Running,
    });
    driver.apply(Event::JobStatusChanged(JobStatus::Running));
    (driver, events_rx)
}

/// Hands `message` to the driver as its thread would, and waits until the I/O it led to is
/// done and answered.
fn deliver(driver: &mut Driver, message: CoordinatorMessage) {
    if let Translated::Event(event) = driver.translate(message) {
        driver.apply(event);
    }
    driver.settle();
}

fn pending(driver: &Driver) -> Vec<CheckpointId> {
    driver.coordinator.pending().map(|p| p.id()).collect()
}

fn trigger(driver: &mut Driver, request: RequestId, kind: CheckpointKind, target: Option<PathBuf>) {
    deliver(
        driver,
        CoordinatorMessage::Trigger {
            kind,
            request,
            target,
        },
    );
}

fn ack(checkpoint: CheckpointId) -> CoordinatorMessage {
    ack_with(0, checkpoint, SubtaskState::default())
}

fn ack_with(attempt: u32, checkpoint: CheckpointId, state: SubtaskState) -> CoordinatorMessage {
    CoordinatorMessage::Ack {
        attempt,
        subtask: source(),
        checkpoint,
        state,
        metrics: AckMetrics::default(),
    }
}

#[test]
fn the_driver_forgets_the_requests_and_targets_of_checkpoints_that_completed_aborted_or_were_subsumed(
) {
    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig {
        max_concurrent: 2,
        ..CheckpointConfig::default()
    };
    let (mut driver, _events) = running_driver(dir.path(), config);
    let mut request = 0;
    for round in 0..40 {
        request += 1;
        match round % 4 {
            // A checkpoint that completes.
            0 => {
                trigger(&mut driver, request, CheckpointKind::Checkpoint, None);
                let [checkpoint] = pending(&driver)[..] else {
                    panic!("one pending checkpoint expected")
                };
                deliver(&mut driver, ack(checkpoint));
            }
            // A checkpoint that is declined.
            1 => {
                trigger(&mut driver, request, CheckpointKind::Checkpoint, None);
                let [checkpoint] = pending(&driver)[..] else {
                    panic!("one pending checkpoint expected")
                };
                let decline = CoordinatorMessage::Decline {
                    attempt: 0,
                    subtask: source(),
                    checkpoint,
                    reason: "declined by the test".into(),
                };
                deliver(&mut driver, decline);
            }
            // A savepoint into a directory the request names.
            2 => {
                let target = Some(dir.path().join("asked-for"));
                trigger(&mut driver, request, CheckpointKind::Savepoint, target);
                let [checkpoint] = pending(&driver)[..] else {
                    panic!("one pending savepoint expected")
                };
                deliver(&mut driver, ack(checkpoint));
            }
            // Two checkpoints at once; the newer completes and subsumes the older.
            _ => {
                trigger(&mut driver, request, CheckpointKind::Checkpoint, None);
                request += 1;
                trigger(&mut driver, request, CheckpointKind::Checkpoint, None);
                let [_, newer] = pending(&driver)[..] else {
                    panic!("two pending checkpoints expected")
                };
                deliver(&mut driver, ack(newer));
            }
        }
        assert_eq!(driver.coordinator.pending_count(), 0, "round {round}");
        assert!(
            driver.requests.is_empty() && driver.targets.is_empty(),
            "after round {round}: {} requests, {} targets",
            driver.requests.len(),
            driver.targets.len()
        );
    }
    assert!(driver.savepoints.is_empty() && driver.written.is_empty());
}

/// Writes a state file of `subtask` for `checkpoint` as a snapshot worker would.
fn write_state(driver: &Driver, checkpoint: CheckpointId, shared: bool) -> StateHandle {
    let kind = HandleKind::Operator;
    if shared {
        let path = CheckpointLayout::shared_file(checkpoint, "source", 0, 7);
        driver
            .storage
            .write_shared_file(path, kind, vec![b"shared".to_vec()])
            .unwrap()
    } else {
        let path = CheckpointLayout::state_file(checkpoint, "source", 0, "op");
        driver
            .storage
            .write_state_file(path, kind, b"private")
            .unwrap()
    }
}

fn exists(driver: &Driver, handle: &StateHandle) -> bool {
    driver.storage.read_file(&handle.path).is_ok()
}

#[test]
fn an_acknowledgement_of_an_earlier_attempt_has_its_unreferenced_files_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut driver, _events) = running_driver(dir.path(), CheckpointConfig::default());
    // Checkpoint 1 completes and references a shared file.
    trigger(&mut driver, 1, CheckpointKind::Checkpoint, None);
    let [first] = pending(&driver)[..] else {
        panic!("one pending checkpoint expected")
    };
    let kept = write_state(&driver, first, true);
    let state = SubtaskState::from_handles(vec![kept.clone()]);
    deliver(&mut driver, ack_with(0, first, state));
    assert_eq!(
        driver.coordinator.latest_completed().map(|c| c.id),
        Some(first)
    );
    // Checkpoint 2 is in flight when the attempt fails and the job restarts.
    trigger(&mut driver, 2, CheckpointKind::Checkpoint, None);
    let [second] = pending(&driver)[..] else {
        panic!("one pending checkpoint expected")
    };
    deliver(
        &mut driver,
        CoordinatorMessage::JobStatus(JobStatus::Restarting),
    );
    deliver(
        &mut driver,
        CoordinatorMessage::NewAttempt {
            attempt: 1,
            controls: HashMap::new(),
        },
    );
    deliver(
        &mut driver,
        CoordinatorMessage::JobStatus(JobStatus::Running),
    );
    // The failed attempt's snapshot worker finishes checkpoint 2 only now.
    let private = write_state(&driver, second, false);
    let new_shared = write_state(&driver, second, true);
    let state = SubtaskState::from_handles(vec![private.clone(), new_shared.clone(), kept.clone()]);
    deliver(&mut driver, ack_with(0, second, state));
    assert!(
        !exists(&driver, &private),
        "{} is left behind",
        private.path
    );
    assert!(
        !exists(&driver, &new_shared),
        "{} is left behind",
        new_shared.path
    );
    assert!(
        exists(&driver, &kept),
        "checkpoint {first} still references {}",
        kept.path
    );
}

/// A store that refuses every checkpoint, as ZooKeeper refuses a leader that was fenced.
struct FencedStore(StandaloneCompletedCheckpointStore);

impl CompletedCheckpointStore for FencedStore {
    fn add(&mut self, _checkpoint: CompletedCheckpoint) -> Result<Vec<Discard>, StoreError> {
        Err(StoreError::Fenced("not the leader any more".into()))
    }
    fn latest(&self) -> Option<&CompletedCheckpoint> {
        self.0.latest()
    }
    fn all(&self) -> &[CompletedCheckpoint] {
        self.0.all()
    }
    fn is_shared_path_referenced(&self, path: &str) -> bool {
        self.0.is_shared_path_referenced(path)
    }
    fn shutdown(&mut self, discard_all: bool) -> Vec<Discard> {
        self.0.shutdown(discard_all)
    }
}

#[test]
fn a_checkpoint_refused_by_a_fenced_store_leaves_no_metadata_for_a_later_resume() {
    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig::default();
    let store = FencedStore(StandaloneCompletedCheckpointStore::new(config.num_retained));
    let (mut driver, _events) = running_driver_with_store(dir.path(), config, Box::new(store));
    trigger(&mut driver, 1, CheckpointKind::Checkpoint, None);
    let [checkpoint] = pending(&driver)[..] else {
        panic!("one pending checkpoint expected")
    };
    let private = write_state(&driver, checkpoint, false);
    let shared = write_state(&driver, checkpoint, true);
    let state = SubtaskState::from_handles(vec![private.clone(), shared.clone()]);
    deliver(&mut driver, ack_with(0, checkpoint, state));
    assert!(driver.coordinator.latest_completed().is_none());
    // What a storage sweep or a `--resume` without HA would take for a completed checkpoint.
    let completed = driver.storage.list_completed().unwrap();
    assert!(!completed.contains(&checkpoint), "{completed:?}");
    assert!(
        !exists(&driver, &private),
        "{} is left behind",
        private.path
    );
    // Shared files are reference-counted by the leader that fenced this one: left alone.
    assert!(exists(&driver, &shared));
}

#[test]
fn a_due_expiry_is_served_before_messages_that_keep_arriving() {
    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig::default();
    let timeout_ms = config.timeout.as_millis() as u64;
    let (mut driver, _events) = running_driver(dir.path(), config);
    trigger(&mut driver, 1, CheckpointKind::Checkpoint, None);
    let [checkpoint] = pending(&driver)[..] else {
        panic!("one pending checkpoint expected")
    };
    // The checkpoint is past its timeout, and the channel is never empty when the driver
    // looks: a message is waiting already.
    driver.clock = Arc::new(ManualClock::new(1_000 + timeout_ms + 1));
    let (messages, inbox) = unbounded();
    let (reply, stats) = unbounded();
    messages.send(CoordinatorMessage::Stats(reply)).unwrap();
    messages
        .send(CoordinatorMessage::Shutdown { drain: false })
        .unwrap();
    driver.run(inbox);
    let seen = stats.recv().unwrap();
    assert_eq!(
        (seen.counts.in_progress, seen.counts.failed),
        (0, 1),
        "checkpoint {checkpoint} should have expired before the next message was handled"
    );
}

#[test]
fn metadata_is_written_off_the_driver_thread_and_the_checkpoint_completes_only_once_it_is_durable()
{
    let dir = tempfile::tempdir().unwrap();
    let (mut driver, _events) = running_driver(dir.path(), CheckpointConfig::default());
    trigger(&mut driver, 1, CheckpointKind::Checkpoint, None);
    let [checkpoint] = pending(&driver)[..] else {
        panic!("one pending checkpoint expected")
    };
    // The last acknowledgement, handled as the driver thread would, without waiting for I/O.
    let Translated::Event(event) = driver.translate(ack(checkpoint)) else {
        panic!("an acknowledgement is an event")
    };
    driver.apply(event);
    assert!(
        driver.coordinator.is_pending(checkpoint),
        "the driver thread wrote the metadata itself"
    );
    assert!(driver.coordinator.latest_completed().is_none());
    // Meanwhile the driver answers requests.
    let (reply, stats) = unbounded();
    assert!(matches!(
        driver.translate(CoordinatorMessage::Stats(reply)),
        Translated::Nothing
    ));
    assert_eq!(stats.recv().unwrap().counts.in_progress, 1);
    driver.settle();
    assert_eq!(
        driver.coordinator.latest_completed().map(|c| c.id),
        Some(checkpoint)
    );
    assert!(driver.storage.read_metadata(checkpoint).is_ok());
}
