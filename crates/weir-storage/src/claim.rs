//! Claim mode: a job that starts from a snapshot in claim mode owns it and deletes it once a
//! checkpoint of its own holds the job's whole state.
//!
//! The claim is recorded in the job's storage (`_claimed`) before the job runs, and removed
//! only after the snapshot is gone. A process killed between its first completed checkpoint
//! and the deletion therefore leaves the claim behind, and the next run of the job (with
//! `--resume`) settles it: its latest checkpoint is at or above the claim's first checkpoint
//! id, so the snapshot is no longer needed.
//!
//! ```text
//! weir-claim v1
//! first-checkpoint: <id>      the lowest id a checkpoint of the claiming run can have
//! snapshot: <path>            the claimed savepoint or retained checkpoint directory
//! ```

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use weir_core::CheckpointId;

use crate::layout::{CLAIM_FILE, METADATA_FILE};
use crate::savepoint::{is_savepoint_layout, open_unchecked};
use crate::{CheckpointStorage, StorageError};

const HEADER: &str = "weir-claim v1";

/// A snapshot a job claimed and has not deleted yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The claimed savepoint or retained checkpoint directory.
    pub snapshot: PathBuf,
    /// Checkpoints of the claiming run have this id or a higher one.
    pub first_checkpoint: CheckpointId,
}

impl Claim {
    fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let snapshot = self.snapshot.to_str().ok_or_else(|| {
            StorageError::Encode(format!(
                "the claimed snapshot's path {} is not UTF-8",
                self.snapshot.display()
            ))
        })?;
        Ok(format!(
            "{HEADER}\nfirst-checkpoint: {}\nsnapshot: {snapshot}\n",
            self.first_checkpoint.0
        )
        .into_bytes())
    }

    fn decode(bytes: &[u8], path: &str) -> Result<Claim, StorageError> {
        let corrupt = |reason: &str| StorageError::Corrupt {
            path: path.to_string(),
            reason: reason.to_string(),
        };
        let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(corrupt("not a claim written by Weir"));
        }
        let first = lines
            .next()
            .and_then(|l| l.strip_prefix("first-checkpoint: "))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| corrupt("no first-checkpoint line"))?;
        let snapshot = lines
            .next()
            .and_then(|l| l.strip_prefix("snapshot: "))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| corrupt("no snapshot line"))?;
        Ok(Claim {
            snapshot: PathBuf::from(snapshot),
            first_checkpoint: CheckpointId(first),
        })
    }
}

/// Records that the job owns `claim.snapshot`, durably, before the job runs.
pub fn record(storage: &CheckpointStorage, claim: &Claim) -> Result<(), StorageError> {
    storage.io.put(CLAIM_FILE, claim.encode()?)
}

/// The job's pending claim, if any.
pub fn pending(storage: &CheckpointStorage) -> Result<Option<Claim>, StorageError> {
    match storage.io.get(CLAIM_FILE) {
        Ok(bytes) => Claim::decode(&bytes, &storage.display(CLAIM_FILE)).map(Some),
        Err(StorageError::Missing { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Settles the job's pending claim once checkpoint `completed` of the job has completed: if
/// it belongs to the claiming run (or a later one), the claimed snapshot is deleted and then
/// the claim. Returns the deleted snapshot's path.
pub fn settle(
    storage: &CheckpointStorage,
    completed: CheckpointId,
) -> Result<Option<PathBuf>, StorageError> {
    let Some(claim) = pending(storage)? else {
        return Ok(None);
    };
    if completed < claim.first_checkpoint {
        return Ok(None);
    }
    if claim.snapshot.join(METADATA_FILE).exists() {
        discard_claimed(&claim.snapshot)?;
    } else if claim.snapshot.is_dir() {
        // A deletion cut short: the shared files went first, `_metadata` with the directory.
        fs::remove_dir_all(&claim.snapshot).map_err(|e| StorageError::io(&claim.snapshot, e))?;
    }
    storage.io.delete(CLAIM_FILE)?;
    Ok(Some(claim.snapshot))
}

/// Deletes a snapshot that a job claimed: every file its metadata references — for a
/// retained incremental checkpoint also the shared files outside its directory, unless
/// another completed checkpoint beside it still references them — and then its directory.
/// Files already gone are fine. A snapshot whose metadata cannot be read is left alone:
/// deleting what cannot be identified could remove another checkpoint's files.
pub fn discard_claimed(path: &Path) -> Result<(), StorageError> {
    let (storage, metadata) = open_unchecked(path)?;
    // A savepoint's files are all in its directory; a checkpoint's private files too, its
    // shared ones under the job's root, where other retained checkpoints may share them.
    if !is_savepoint_layout(&metadata) {
        match shared_files_of_others(&storage, metadata.checkpoint.id) {
            Some(kept) => {
                for state in metadata.checkpoint.subtask_states.values() {
                    for handle in state.handles.iter().filter(|h| h.is_file() && h.shared) {
                        if !kept.contains(&handle.path) {
                            storage.discard_file(&handle.path)?;
                        }
                    }
                }
            }
            None => tracing::warn!(
                path = %path.display(),
                "kept the claimed checkpoint's shared files: a checkpoint beside it could not be read"
            ),
        }
    }
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// The shared files that completed checkpoints other than `claimed` reference, or `None` if
/// one of them cannot be read.
fn shared_files_of_others(
    storage: &CheckpointStorage,
    claimed: CheckpointId,
) -> Option<HashSet<String>> {
    let mut kept = HashSet::new();
    for id in storage.list_completed().ok()? {
        if id == claimed {
            continue;
        }
        let metadata = storage.read_metadata(id).ok()?;
        for state in metadata.checkpoint.subtask_states.values() {
            kept.extend(
                state
                    .handles
                    .iter()
                    .filter(|h| h.is_file() && h.shared)
                    .map(|h| h.path.clone()),
            );
        }
    }
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_reads_back_as_written() {
        let claim = Claim {
            snapshot: PathBuf::from("/data/savepoints/savepoint-3-17"),
            first_checkpoint: CheckpointId(4),
        };
        let bytes = claim.encode().unwrap();
        assert_eq!(Claim::decode(&bytes, "_claimed").unwrap(), claim);
    }

    #[test]
    fn a_damaged_claim_is_an_error_naming_the_file() {
        for bad in [
            &b""[..],
            b"weir-claim v1\n",
            b"weir-claim v1\nfirst-checkpoint: x\nsnapshot: /a\n",
            b"weir-claim v1\nfirst-checkpoint: 3\nsnapshot: \n",
            b"something else\nfirst-checkpoint: 3\nsnapshot: /a\n",
            b"\xff\xfe",
        ] {
            let e = Claim::decode(bad, "ck/job/_claimed").unwrap_err();
            assert!(e.to_string().contains("ck/job/_claimed"), "{e}");
        }
    }
}
