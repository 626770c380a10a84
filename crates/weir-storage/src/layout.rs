//! The layout of a job's checkpoints in its storage. Every path is built here, so writers and
//! readers always agree.
//!
//! ```text
//! <checkpoint-dir>/<job>/chk-<id>/_metadata            the completed checkpoint (written last)
//! <checkpoint-dir>/<job>/chk-<id>/<uid>-<index>.keyed  a subtask's keyed state: a full
//!                                                      snapshot, or an incremental manifest
//! <checkpoint-dir>/<job>/chk-<id>/<uid>-<index>.op     a subtask's operator state
//! <checkpoint-dir>/<job>/shared/<uid>-<index>-<id>-<nonce>.kgs
//! <checkpoint-dir>/<job>/shared/<uid>-<index>-<id>-<nonce>.sst
//!                                                      key-group blobs of incremental
//!                                                      checkpoints, referenced by later ones
//! <checkpoint-dir>/<job>/_claimed                      a snapshot the job claimed and has not
//!                                                      deleted yet (claim mode)
//! ```
//!
//! Paths in `StateHandle`s are relative to `<checkpoint-dir>/<job>` and use `/`, so a job's
//! checkpoints can move (between directories or to an object store) without rewriting them.
//! The checkpoint directory is a local path (or `file://` URL) or `s3://bucket/prefix`.

use weir_core::CheckpointId;

pub const METADATA_FILE: &str = "_metadata";
/// Where a local `_metadata` is written before its atomic rename.
pub const METADATA_TEMP_FILE: &str = "_metadata.inprogress";
pub const SHARED_DIR: &str = "shared";
/// The job's claim on the snapshot it started from in claim mode, until that snapshot is gone.
pub const CLAIM_FILE: &str = "_claimed";
const CHECKPOINT_PREFIX: &str = "chk-";
/// The extension of shared key-group data files.
pub const SHARED_EXTENSION: &str = "kgs";
/// The extension of a shared RocksDB table file (an incremental checkpoint of the RocksDB
/// state backend).
pub const TABLE_FILE_EXTENSION: &str = "sst";

/// Names of a job's checkpoint files, relative to the job's root.
#[derive(Clone, Debug)]
pub struct CheckpointLayout;

impl CheckpointLayout {
    pub fn checkpoint_dir_name(id: CheckpointId) -> String {
        format!("{CHECKPOINT_PREFIX}{id}")
    }

    /// The relative path of a checkpoint's metadata.
    pub fn metadata_file(id: CheckpointId) -> String {
        format!("{}/{METADATA_FILE}", Self::checkpoint_dir_name(id))
    }

    /// The relative path (as stored in a `StateHandle`) of a subtask's private state file.
    pub fn state_file(id: CheckpointId, uid: &str, index: u32, extension: &str) -> String {
        format!(
            "{}/{}-{index}.{extension}",
            Self::checkpoint_dir_name(id),
            sanitize(uid)
        )
    }

    /// The relative path of a new shared data file written by a subtask for checkpoint `id`.
    /// `nonce` keeps it unique even if an id is ever reused after a crash.
    pub fn shared_file(id: CheckpointId, uid: &str, index: u32, nonce: u64) -> String {
        format!(
            "{SHARED_DIR}/{}-{index}-{id}-{nonce:016x}.{SHARED_EXTENSION}",
            sanitize(uid)
        )
    }

    /// The relative path of a RocksDB table file uploaded by a subtask for checkpoint `id`
    /// (see [`CheckpointLayout::shared_file`]).
    pub fn shared_table_file(id: CheckpointId, uid: &str, index: u32, nonce: u64) -> String {
        format!(
            "{SHARED_DIR}/{}-{index}-{id}-{nonce:016x}.{TABLE_FILE_EXTENSION}",
            sanitize(uid)
        )
    }

    /// Whether a relative path lies in the shared directory.
    pub fn is_shared(relative: &str) -> bool {
        relative
            .strip_prefix(SHARED_DIR)
            .is_some_and(|r| r.starts_with('/'))
    }

    /// Whether a path names a RocksDB table file (shared by checkpoints, or a native
    /// savepoint's own), by its extension.
    pub fn is_table_file(relative: &str) -> bool {
        relative
            .rsplit_once('.')
            .is_some_and(|(_, ext)| ext == TABLE_FILE_EXTENSION)
    }

    /// The checkpoint id a directory name stands for, if it is a checkpoint directory.
    pub fn parse_checkpoint_dir(name: &str) -> Option<CheckpointId> {
        name.strip_prefix(CHECKPOINT_PREFIX)?
            .parse()
            .ok()
            .map(CheckpointId)
    }

    /// The checkpoint whose directory holds the relative path `relative`, if any.
    pub fn checkpoint_of(relative: &str) -> Option<CheckpointId> {
        Self::parse_checkpoint_dir(relative.split('/').next()?)
    }
}

/// Uids may hold any text; file names keep to a portable alphabet.
pub(crate) fn sanitize(uid: &str) -> String {
    uid.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_live_in_their_checkpoint_directory_under_a_portable_name() {
        let p = CheckpointLayout::state_file(CheckpointId(7), "count per/user", 1, "keyed");
        assert_eq!(p, "chk-7/count_per_user-1.keyed");
        assert_eq!(CheckpointLayout::checkpoint_of(&p), Some(CheckpointId(7)));
        assert_eq!(
            CheckpointLayout::metadata_file(CheckpointId(7)),
            "chk-7/_metadata"
        );
    }

    #[test]
    fn shared_files_live_in_the_shared_directory_and_belong_to_no_checkpoint() {
        let p = CheckpointLayout::shared_file(CheckpointId(3), "spend", 0, 0xab);
        assert_eq!(p, "shared/spend-0-3-00000000000000ab.kgs");
        assert!(CheckpointLayout::is_shared(&p));
        assert!(!CheckpointLayout::is_shared("sharedx/a"));
        assert_eq!(CheckpointLayout::checkpoint_of(&p), None);
    }

    #[test]
    fn only_chk_directories_parse_as_checkpoints() {
        assert_eq!(
            CheckpointLayout::parse_checkpoint_dir("chk-12"),
            Some(CheckpointId(12))
        );
        assert_eq!(CheckpointLayout::parse_checkpoint_dir("chk-x"), None);
        assert_eq!(CheckpointLayout::parse_checkpoint_dir("shared"), None);
    }
}
