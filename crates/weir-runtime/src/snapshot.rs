//! The asynchronous part of snapshots: a small pool of workers that serialise frozen state,
//! write it to checkpoint storage, and acknowledge (or decline) to the coordinator — while the
//! subtask that took the snapshot keeps processing.
//!
//! With incremental checkpoints (`execution.checkpointing.incremental`, the default) a keyed
//! snapshot follows the plan its synchronous phase made: only changed key groups are written,
//! into one new shared file, and a small manifest in the checkpoint's directory chains them
//! with the blobs of earlier checkpoints. Otherwise every key group is written into one private
//! file. A RocksDB subtask's incremental checkpoint uploads the database's table files no
//! completed checkpoint uploaded; a native savepoint uploads all of them, as files of its own.
//! Private state (a manifest, operator state, a small full snapshot) of at most
//! `execution.checkpointing.data-inline-threshold` bytes is kept inline in the checkpoint's
//! metadata instead of a file of its own. Any error declines the checkpoint; the subtask keeps
//! running.

use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use weir_checkpoint::AckMetrics;
use weir_core::config::CheckpointConfig;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, KeyGroupRange, StateHandle, SubtaskId, SubtaskState,
};
use weir_state::{
    encode_incremental_releasing, Chain, FrozenTable, KeyedSnapshotPlan, SharedStateFile,
};
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
    /// A checkpoint or a savepoint. Savepoints stand alone: a canonical one is written in
    /// full, a native one uploads every RocksDB table file of its own (see [`persist`]).
    pub kind: CheckpointKind,
    pub snapshot: OperatorSnapshot,
    pub key_groups: KeyGroupRange,
    pub sync_ms: u64,
    pub alignment_ms: u64,
    pub start_delay_ms: u64,
    /// Records handed to the operator while its input gate aligned the barrier.
    pub processed_records: u64,
    pub started: Instant,
    /// Told once the acknowledgement (or decline) has been sent, so the subtask can report
    /// itself finished only after its last snapshot was acknowledged.
    pub done: Sender<CheckpointId>,
}

/// `live` before any attempt began: every snapshot is persisted.
const ANY_ATTEMPT: u64 = u64::MAX;
/// `live` once the last attempt was cancelled: no snapshot is persisted.
const NO_ATTEMPT: u64 = u64::MAX - 1;

/// The pool. Dropping every sender (all subtasks and the executor) lets the workers finish.
pub struct SnapshotWorkers {
    sender: Sender<SnapshotJob>,
    handles: Vec<JoinHandle<()>>,
    /// The attempt whose snapshots are persisted (or [`ANY_ATTEMPT`], [`NO_ATTEMPT`]). An
    /// equality test, not an order: a task manager's attempts count afresh under a new job
    /// manager.
    live: Arc<AtomicU64>,
}

/// How the workers write snapshots, from the checkpoint options.
#[derive(Clone, Copy, Debug)]
struct WriteOptions {
    incremental: bool,
    inline_threshold: usize,
}

impl SnapshotWorkers {
    /// Starts `threads` workers writing to `storage` as `config` says (incrementally or not,
    /// which private state is kept inline).
    pub fn start(
        threads: usize,
        storage: CheckpointStorage,
        coordinator: Sender<CoordinatorMessage>,
        config: &CheckpointConfig,
    ) -> SnapshotWorkers {
        let options = WriteOptions {
            incremental: config.incremental,
            inline_threshold: config.data_inline_threshold,
        };
        let (sender, receiver) = crossbeam_channel::unbounded::<SnapshotJob>();
        let live = Arc::new(AtomicU64::new(ANY_ATTEMPT));
        let handles = (0..threads.max(1))
            .map(|i| {
                let receiver = receiver.clone();
                let storage = storage.clone();
                let coordinator = coordinator.clone();
                let live = live.clone();
                std::thread::Builder::new()
                    .name(format!("weir-snapshot-{i}"))
                    .spawn(move || work(receiver, storage, coordinator, options, &live))
                    .expect("spawn snapshot worker")
            })
            .collect();
        SnapshotWorkers {
            sender,
            handles,
            live,
        }
    }

    /// From now on, persists only snapshots of `attempt`: those of earlier attempts still
    /// queued are dropped.
    pub fn begin_attempt(&self, attempt: u32) {
        self.live.store(u64::from(attempt), Ordering::Release);
    }

    /// Stops persisting snapshots of `attempt`, which was cancelled: the coordinator would
    /// ignore their acknowledgements anyway.
    pub fn cancel_attempt(&self, attempt: u32) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live == u64::from(attempt) || live == ANY_ATTEMPT).then_some(NO_ATTEMPT)
            });
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
    options: WriteOptions,
    live: &AtomicU64,
) {
    for job in jobs {
        let subtask = job.subtask;
        let checkpoint = job.checkpoint;
        let attempt = job.attempt;
        let job_done = job.done.clone();
        let current = live.load(Ordering::Acquire);
        if current != ANY_ATTEMPT && current != u64::from(attempt) {
            // Invariant: nothing is written for an attempt known to be cancelled. One cancelled
            // while its snapshot is being written still acknowledges; the coordinator's driver
            // deletes what that acknowledgement names.
            tracing::debug!(%checkpoint, %subtask, attempt, "snapshot of a cancelled attempt dropped");
            drop(job);
            let _ = job_done.send(checkpoint);
            continue;
        }
        let writer = storage
            .local_copy()
            .map(|_| format!("{}#{}", job.uid, subtask.index));
        let message = match persist(&storage, options, job) {
            Ok((state, metrics)) => {
                if let (Some(local), Some(writer)) = (storage.local_copy(), writer) {
                    let files = state.handles.iter().filter(|h| h.inline.is_none());
                    local.retain(&writer, files.map(|h| h.path.clone()).collect());
                }
                CoordinatorMessage::Ack {
                    attempt,
                    subtask,
                    checkpoint,
                    state,
                    metrics,
                }
            }
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
    options: WriteOptions,
    mut job: SnapshotJob,
) -> Result<(SubtaskState, AckMetrics), String> {
    let async_start = Instant::now();
    // Owned here to be let go of once encoded, before the slow part (writing and `fsync`):
    // while a snapshot shares a key group, the task's writes to it take the slower
    // copy-on-write path (see `weir_state::keyed_table`).
    let keyed = std::mem::take(&mut job.snapshot.keyed);
    let plan = job.snapshot.incremental.take();
    let index = job.subtask.index;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "async snapshot of '{}' subtask {index} for checkpoint {} failed ({what}): {e}",
            job.uid, job.checkpoint
        )
    };
    let mut state = SubtaskState::default();
    // The shared files this snapshot wrote (and a native savepoint's own table files): nobody
    // references them before the acknowledgement, so a failure after they were written
    // deletes them.
    let mut new_shared: Vec<String> = Vec::new();
    // Savepoints stand alone, without shared files: a canonical one is written in full; a
    // native one uploads every RocksDB table file afresh and writes its heap tables in full.
    let incremental = options.incremental && !job.kind.is_savepoint();
    // RocksDB tables go by their table files; the tables kept on the heap beside them (the
    // timers) follow the plan like any heap table.
    #[cfg(feature = "rocksdb")]
    let native = job.kind == CheckpointKind::NativeSavepoint;
    #[cfg(feature = "rocksdb")]
    let keyed = match (
        job.snapshot.lsm.take(),
        (incremental || native) && !keyed.is_empty(),
    ) {
        (Some(lsm), true) => {
            let (tables, heap): (Vec<_>, Vec<_>) =
                keyed.into_iter().partition(|t| lsm.holds_table(t.name()));
            let (s, written) = persist_lsm(storage, options, &job, tables, lsm, native)
                .map_err(|(what, e)| fail(what, &e))?;
            state = s;
            new_shared = written;
            heap
        }
        _ => keyed,
    };
    if !keyed.is_empty() {
        match (plan, incremental) {
            (Some(plan), true) => {
                let (s, written) = match persist_incremental(storage, options, &job, keyed, &plan) {
                    Ok(done) => done,
                    Err((what, e)) => {
                        for path in &new_shared {
                            discard_unacknowledged(storage, path);
                        }
                        return Err(fail(what, &e));
                    }
                };
                state.handles.extend(s.handles);
                state.state_size += s.state_size;
                state.persisted_size += s.persisted_size;
                new_shared.extend(written);
            }
            _ => {
                let bytes = weir_state::encode_keyed_snapshot(&keyed, job.key_groups)
                    .map_err(|e| fail("encoding keyed state", &e))?;
                drop(keyed);
                let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, "keyed");
                let kind = HandleKind::Keyed {
                    key_groups: job.key_groups,
                };
                let handle = match storage.write_or_inline_state(
                    path,
                    kind,
                    bytes,
                    options.inline_threshold,
                ) {
                    Ok(handle) => handle,
                    Err(e) => {
                        for path in &new_shared {
                            discard_unacknowledged(storage, path);
                        }
                        return Err(fail("writing keyed state", &e));
                    }
                };
                // Beside the RocksDB tables' files of a native savepoint, if any.
                state.state_size += handle.size;
                state.persisted_size += handle.size;
                state.handles.push(handle);
            }
        }
    }
    let operator = job.snapshot.operator.as_ref().map(|s| s.encode());
    // Invariant: a snapshot carries channel state exactly when its subtask took the
    // checkpoint unaligned.
    let unaligned = job.snapshot.channels.is_some();
    let mut persisted_data = 0;
    let private = [
        (
            operator,
            HandleKind::Operator,
            "op",
            "writing operator state",
        ),
        (
            job.snapshot.channels.take(),
            HandleKind::Channels,
            "channels",
            "writing channel state",
        ),
    ];
    for (bytes, kind, suffix, what) in private {
        let Some(bytes) = bytes else { continue };
        let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, suffix);
        let handle =
            match storage.write_or_inline_state(path, kind, bytes, options.inline_threshold) {
                Ok(h) => h,
                Err(e) => {
                    for path in &new_shared {
                        discard_unacknowledged(storage, path);
                    }
                    return Err(fail(what, &e));
                }
            };
        if kind == HandleKind::Channels {
            persisted_data += handle.size;
        }
        state.state_size += handle.size;
        state.persisted_size += handle.size;
        state.handles.push(handle);
    }
    let metrics = AckMetrics {
        sync_duration_ms: job.sync_ms,
        async_duration_ms: async_start.elapsed().as_millis() as u64,
        alignment_duration_ms: job.alignment_ms,
        start_delay_ms: job.start_delay_ms,
        unaligned,
        persisted_data,
        processed_records: job.processed_records,
    };
    Ok((state, metrics))
}

fn discard_unacknowledged(storage: &CheckpointStorage, path: &str) {
    if let Err(e) = storage.discard_file(path) {
        tracing::warn!(%path, error = %e, "could not delete the file of a failed snapshot");
    }
}

/// Writes the key groups the plan changed into one new shared file and the subtask's manifest
/// into the checkpoint's directory; acknowledges the manifest (private), the new file and every
/// earlier shared file the manifest still references (shared, reference-counted).
fn persist_incremental(
    storage: &CheckpointStorage,
    options: WriteOptions,
    job: &SnapshotJob,
    mut keyed: Vec<Box<dyn FrozenTable>>,
    plan: &KeyedSnapshotPlan,
) -> Result<(SubtaskState, Option<String>), (&'static str, String)> {
    let index = job.subtask.index;
    let kind = HandleKind::Keyed {
        key_groups: job.key_groups,
    };
    // Each key group is let go of as soon as it is encoded.
    let mut encoding = encode_incremental_releasing(&mut keyed, job.key_groups, plan)
        .map_err(|e| ("encoding keyed state", e.to_string()))?;
    drop(keyed);
    let mut written = Vec::new();
    let mut file = None;
    if let Some(data) = encoding.data.take() {
        let path = CheckpointLayout::shared_file(job.checkpoint, &job.uid, index, nonce(job));
        let handle = storage
            .write_shared_file(path, kind, data)
            .map_err(|e| ("writing shared keyed state", e.to_string()))?;
        file = Some(Arc::new(SharedStateFile {
            path: handle.path.clone(),
            size: handle.size,
            checksum: handle.checksum,
        }));
        written.push(handle);
    }
    // A file this snapshot wrote is not referenced by anybody yet: on failure, it goes.
    let clean_up = |written: &[StateHandle]| {
        for h in written {
            discard_unacknowledged(storage, &h.path);
        }
    };
    let (chains, manifest) = match encoding.finish(plan, file) {
        Ok(done) => done,
        Err(e) => {
            clean_up(&written);
            return Err(("assembling the manifest", e.to_string()));
        }
    };
    let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, "keyed");
    let manifest_handle =
        match storage.write_or_inline_state(path, kind, manifest, options.inline_threshold) {
            Ok(h) => h,
            Err(e) => {
                clean_up(&written);
                return Err(("writing the keyed state manifest", e.to_string()));
            }
        };
    let persisted_size = manifest_handle.size + written.iter().map(|h| h.size).sum::<u64>();
    let new_shared = written.first().map(|h| h.path.clone());
    let mut handles = vec![manifest_handle];
    handles.extend(written);
    add_chained_files(&mut handles, &chains, kind);
    plan.base.record_written(plan, chains);
    Ok((referencing(handles, persisted_size), new_shared))
}

/// A subtask's state of `handles`, `persisted_size` bytes of which its snapshot wrote.
fn referencing(handles: Vec<StateHandle>, persisted_size: u64) -> SubtaskState {
    SubtaskState {
        state_size: handles.iter().map(|h| h.size).sum(),
        handles,
        persisted_size,
    }
}

/// Uploads the table files of a RocksDB snapshot (of the RocksDB tables `keyed`) that no
/// earlier completed checkpoint uploaded, each to a shared file of its own, and writes the
/// subtask's RocksDB manifest into the checkpoint's directory; acknowledges the manifest
/// (private), the new files and every earlier one the manifest references (shared,
/// reference-counted). A `standalone` snapshot (a native savepoint) references no earlier
/// upload: it uploads every table file of its own.
#[cfg(feature = "rocksdb")]
fn persist_lsm(
    storage: &CheckpointStorage,
    options: WriteOptions,
    job: &SnapshotJob,
    keyed: Vec<Box<dyn FrozenTable>>,
    lsm: weir_state::lsm::LsmSnapshot,
    standalone: bool,
) -> Result<(SubtaskState, Vec<String>), (&'static str, String)> {
    let index = job.subtask.index;
    let kind = HandleKind::Keyed {
        key_groups: job.key_groups,
    };
    let path_for = |name: &str| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (nonce(job), name).hash(&mut h);
        let nonce = h.finish();
        if standalone {
            // The savepoint's own: in its checkpoint's directory, which goes once the savepoint
            // has copied it (a shared file would outlive it, referenced by nobody).
            let extension = format!(
                "{nonce:016x}.{}",
                weir_storage::layout::TABLE_FILE_EXTENSION
            );
            CheckpointLayout::state_file(job.checkpoint, &job.uid, index, &extension)
        } else {
            CheckpointLayout::shared_table_file(job.checkpoint, &job.uid, index, nonce)
        }
    };
    let files = if standalone {
        lsm.all_files(&path_for)
    } else {
        lsm.files(&path_for)
    };
    let mut files = files.map_err(|e| ("materializing RocksDB state", e.to_string()))?;
    let mut handles: Vec<StateHandle> = files
        .reused()
        .iter()
        .map(|f| StateHandle {
            path: f.file.path.clone(),
            size: f.file.size,
            checksum: f.file.checksum,
            kind,
            shared: true,
            inline: None,
        })
        .collect();
    let uploads: Vec<_> = files
        .uploads()
        .iter()
        .map(|u| (u.name.clone(), u.local.clone(), u.path.clone()))
        .collect();
    let mut written: Vec<StateHandle> = Vec::with_capacity(uploads.len());
    // A file this snapshot wrote is not referenced by anybody yet: on failure, it goes.
    let fail = |written: &[StateHandle], what: &'static str, e: String| {
        for h in written {
            discard_unacknowledged(storage, &h.path);
        }
        (what, e)
    };
    for (name, local, path) in uploads {
        let mut handle = match storage
            .write_shared_file_from(path, kind, &local)
            .map_err(|e| e.to_string())
        {
            Ok(h) => h,
            Err(e) => return Err(fail(&written, "uploading a RocksDB table file", e)),
        };
        handle.shared = !standalone;
        files.uploaded(
            &name,
            SharedStateFile {
                path: handle.path.clone(),
                size: handle.size,
                checksum: handle.checksum,
            },
        );
        written.push(handle);
    }
    let manifest = match files.manifest(keyed, job.key_groups) {
        Ok(m) => m,
        Err(e) => {
            return Err(fail(
                &written,
                "assembling the RocksDB manifest",
                e.to_string(),
            ))
        }
    };
    let path = CheckpointLayout::state_file(job.checkpoint, &job.uid, index, "rocksdb");
    let manifest_handle =
        match storage.write_or_inline_state(path, kind, manifest, options.inline_threshold) {
            Ok(h) => h,
            Err(e) => {
                return Err(fail(
                    &written,
                    "writing the RocksDB manifest",
                    e.to_string(),
                ))
            }
        };
    let persisted_size = manifest_handle.size + written.iter().map(|h| h.size).sum::<u64>();
    let new_shared = written.iter().map(|h| h.path.clone()).collect();
    handles.insert(0, manifest_handle);
    handles.extend(written);
    Ok((referencing(handles, persisted_size), new_shared))
}

/// Adds to `handles` a shared handle for every file the chains of an incremental snapshot
/// reference that `handles` does not hold yet: what a subtask acknowledges besides its manifest.
pub fn add_chained_files(handles: &mut Vec<StateHandle>, chains: &[Vec<Chain>], kind: HandleKind) {
    for blob in chains.iter().flatten().flat_map(|chain| chain.iter()) {
        if !handles.iter().any(|h| h.path == blob.file.path) {
            handles.push(StateHandle {
                path: blob.file.path.clone(),
                size: blob.file.size,
                checksum: blob.file.checksum,
                kind,
                shared: true,
                inline: None,
            });
        }
    }
}

/// A number that makes a shared file's name unique even if a checkpoint id were reused.
fn nonce(job: &SnapshotJob) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    (job.checkpoint.0, job.subtask.index, &*job.uid).hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::OperatorId;
    use weir_state::OperatorStateSnapshot;

    fn job(attempt: u32, checkpoint: u64, done: &Sender<CheckpointId>) -> SnapshotJob {
        let operator = OperatorStateSnapshot {
            list: vec![("offsets".into(), vec![vec![7; 256]])],
            union: Vec::new(),
        };
        SnapshotJob {
            attempt,
            subtask: SubtaskId::new(OperatorId(1), 0),
            uid: Arc::from("source"),
            checkpoint: CheckpointId(checkpoint),
            kind: CheckpointKind::Checkpoint,
            snapshot: OperatorSnapshot {
                operator: Some(operator),
                ..OperatorSnapshot::default()
            },
            key_groups: KeyGroupRange::new(0, 127),
            sync_ms: 0,
            alignment_ms: 0,
            start_delay_ms: 0,
            processed_records: 0,
            started: Instant::now(),
            done: done.clone(),
        }
    }

    #[test]
    fn a_snapshot_with_channel_state_is_acknowledged_unaligned_with_the_bytes_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path(), "snapshot-test").unwrap();
        let (coordinator, messages) = crossbeam_channel::unbounded();
        let config = CheckpointConfig {
            data_inline_threshold: 0,
            ..CheckpointConfig::default()
        };
        let workers = SnapshotWorkers::start(1, storage, coordinator, &config);
        let (done, _finished) = crossbeam_channel::unbounded();
        let queue = workers.sender();
        let mut unaligned = job(0, 1, &done);
        unaligned.snapshot.channels = Some(vec![3; 1000]);
        unaligned.processed_records = 5;
        queue.send(unaligned).unwrap();
        queue.send(job(0, 2, &done)).unwrap();
        let metrics = |message| match message {
            CoordinatorMessage::Ack { state, metrics, .. } => (state, metrics),
            other => panic!("{other:?}"),
        };
        let (state, m) = metrics(messages.recv().unwrap());
        assert!(m.unaligned);
        assert_eq!(m.persisted_data, 1000);
        assert_eq!(m.processed_records, 5);
        assert!(
            state.persisted_size > m.persisted_data,
            "channel state is part of what the snapshot wrote"
        );
        let (_, m) = metrics(messages.recv().unwrap());
        assert!(!m.unaligned);
        assert_eq!((m.persisted_data, m.processed_records), (0, 0));
        drop(queue);
        workers.join();
    }

    #[test]
    fn snapshots_of_a_cancelled_attempt_are_neither_written_nor_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path(), "snapshot-test").unwrap();
        let (coordinator, messages) = crossbeam_channel::unbounded();
        let config = CheckpointConfig {
            data_inline_threshold: 0,
            ..CheckpointConfig::default()
        };
        // One worker takes the jobs in the order they were queued.
        let workers = SnapshotWorkers::start(1, storage.clone(), coordinator, &config);
        workers.begin_attempt(0);
        let (done, finished) = crossbeam_channel::unbounded();
        let queue = workers.sender();
        workers.cancel_attempt(0);
        queue.send(job(0, 5, &done)).unwrap();
        workers.begin_attempt(1);
        queue.send(job(1, 6, &done)).unwrap();
        let first = messages.recv().unwrap();
        assert!(
            matches!(
                first,
                CoordinatorMessage::Ack {
                    attempt: 1,
                    checkpoint: CheckpointId(6),
                    ..
                }
            ),
            "{first:?}"
        );
        let cancelled = CheckpointLayout::state_file(CheckpointId(5), "source", 0, "op");
        assert!(
            storage.read_file(&cancelled).is_err(),
            "{cancelled} was written"
        );
        // The cancelled snapshot's subtask is not left waiting for it.
        let released: Vec<CheckpointId> = finished.try_iter().collect();
        assert!(released.contains(&CheckpointId(5)), "{released:?}");
        drop(queue);
        workers.join();
    }
}
