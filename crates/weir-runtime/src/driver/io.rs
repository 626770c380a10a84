//! The driver's I/O worker: allocating checkpoint ids (a ZooKeeper call in HA mode), writing
//! metadata and savepoints, deleting discarded files. It runs on its own thread so that a slow
//! disk, object store or ZooKeeper never holds up acknowledgements, ticks or the REST API; each
//! answer comes back to the driver as an [`IoDone`], which feeds it to the coordinator.
//!
//! Jobs run one at a time in the order submitted. The coordinator relies on that: the second
//! discard of a checkpoint whose metadata landed after its abort follows that write, and a
//! checkpoint's directory is deleted after, never during, a write into it.

use crossbeam_channel::{Receiver, Sender};
use std::path::PathBuf;
use std::thread::JoinHandle;
use weir_checkpoint::{CheckpointIdCounter, Event, RequestId};
use weir_core::{CheckpointId, StateHandle};
use weir_storage::{CheckpointMetadata, CheckpointStorage};

/// Work for the I/O worker.
pub(super) enum IoJob {
    AllocateId {
        request: RequestId,
    },
    WriteMetadata {
        metadata: Box<CheckpointMetadata>,
        duration_ms: u64,
        size_bytes: u64,
    },
    /// A self-contained copy of the snapshot into `target`; the files the subtasks wrote for
    /// it under the checkpoint root are deleted afterwards.
    WriteSavepoint {
        metadata: Box<CheckpointMetadata>,
        target: PathBuf,
        duration_ms: u64,
        size_bytes: u64,
    },
    DiscardCheckpoint {
        checkpoint: CheckpointId,
        shared_paths: Vec<String>,
    },
    DiscardState {
        handles: Vec<StateHandle>,
    },
}

/// What a job came to.
pub(super) enum IoDone {
    /// `IdAllocated` or `IdAllocationFailed`.
    Allocated(Event),
    /// `MetadataWritten` (with what the completion event reports) or `MetadataWriteFailed`.
    Written {
        event: Event,
        duration_ms: u64,
        size_bytes: u64,
        /// What the checkpoint wrote itself (its incremental size).
        persisted_bytes: u64,
        savepoint: Option<PathBuf>,
    },
    Deleted,
}

/// The driver's handle on its worker.
pub(super) struct Io {
    jobs: Option<Sender<IoJob>>,
    pub(super) done: Receiver<IoDone>,
    // Invariant: the number of jobs submitted whose `IoDone` the driver has not received yet.
    pub(super) in_flight: usize,
    thread: Option<JoinHandle<()>>,
}

impl Io {
    pub(super) fn start(counter: Box<dyn CheckpointIdCounter>, storage: CheckpointStorage) -> Io {
        let (jobs, inbox) = crossbeam_channel::unbounded();
        let (done, done_rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("weir-checkpoint-io".into())
            .spawn(move || work(inbox, done, counter, storage))
            .expect("spawn checkpoint I/O worker");
        Io {
            jobs: Some(jobs),
            done: done_rx,
            in_flight: 0,
            thread: Some(thread),
        }
    }

    pub(super) fn submit(&mut self, job: IoJob) {
        let Some(jobs) = &self.jobs else {
            tracing::error!("checkpoint I/O submitted after the worker stopped; dropped");
            return;
        };
        if jobs.send(job).is_ok() {
            self.in_flight += 1;
        } else {
            tracing::error!("the checkpoint I/O worker is gone; job dropped");
        }
    }

    /// Lets the worker finish what it was given and waits for it.
    pub(super) fn close(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn work(
    jobs: Receiver<IoJob>,
    done: Sender<IoDone>,
    mut counter: Box<dyn CheckpointIdCounter>,
    storage: CheckpointStorage,
) {
    for job in jobs {
        let answer = run(job, counter.as_mut(), &storage);
        if done.send(answer).is_err() {
            return; // the driver is gone
        }
    }
}

fn run(job: IoJob, counter: &mut dyn CheckpointIdCounter, storage: &CheckpointStorage) -> IoDone {
    match job {
        IoJob::AllocateId { request } => IoDone::Allocated(match counter.get_and_increment() {
            Ok(id) => Event::IdAllocated { request, id },
            Err(e) => Event::IdAllocationFailed {
                request,
                reason: e.to_string(),
            },
        }),
        IoJob::WriteMetadata {
            metadata,
            duration_ms,
            size_bytes,
        } => {
            let checkpoint = metadata.checkpoint.id;
            match storage.write_metadata(&metadata) {
                Ok(bytes) => IoDone::Written {
                    event: Event::MetadataWritten {
                        checkpoint,
                        metadata_bytes: bytes,
                    },
                    duration_ms,
                    size_bytes: size_bytes + bytes,
                    persisted_bytes: metadata.checkpoint.persisted_size() + bytes,
                    savepoint: None,
                },
                Err(e) => failed(checkpoint, e.to_string()),
            }
        }
        IoJob::WriteSavepoint {
            metadata,
            target,
            duration_ms,
            size_bytes,
        } => {
            let id = metadata.checkpoint.id;
            match weir_storage::savepoint::write_savepoint(storage, &metadata, &target) {
                Ok(written) => {
                    if let Err(e) = storage.discard_checkpoint(id) {
                        tracing::warn!(checkpoint = %id, error = %e, "could not delete a savepoint's working files");
                    }
                    tracing::info!(checkpoint = %id, path = %written.path.display(), "savepoint written");
                    IoDone::Written {
                        event: Event::MetadataWritten {
                            checkpoint: id,
                            metadata_bytes: written.metadata_bytes,
                        },
                        duration_ms,
                        size_bytes,
                        persisted_bytes: metadata.checkpoint.persisted_size(),
                        savepoint: Some(written.path),
                    }
                }
                Err(e) => failed(
                    id,
                    format!("writing the savepoint to {} failed: {e}", target.display()),
                ),
            }
        }
        IoJob::DiscardCheckpoint {
            checkpoint,
            shared_paths,
        } => {
            if let Err(e) = storage.discard_checkpoint(checkpoint) {
                tracing::warn!(%checkpoint, error = %e, "could not delete discarded checkpoint");
            }
            for path in shared_paths {
                if let Err(e) = storage.discard_file(&path) {
                    tracing::warn!(%path, error = %e, "could not delete shared state file");
                }
            }
            IoDone::Deleted
        }
        IoJob::DiscardState { handles } => {
            for h in handles {
                if let Err(e) = storage.discard_file(&h.path) {
                    tracing::warn!(path = %h.path, error = %e, "could not delete state file");
                }
            }
            IoDone::Deleted
        }
    }
}

fn failed(checkpoint: CheckpointId, reason: String) -> IoDone {
    IoDone::Written {
        event: Event::MetadataWriteFailed { checkpoint, reason },
        duration_ms: 0,
        size_bytes: 0,
        persisted_bytes: 0,
        savepoint: None,
    }
}
