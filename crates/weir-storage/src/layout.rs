//! The on-disk layout of a job's checkpoints. Every path is built here, so writers and readers
//! always agree.
//!
//! ```text
//! <checkpoint-dir>/<job>/chk-<id>/_metadata           the completed checkpoint (written last)
//! <checkpoint-dir>/<job>/chk-<id>/<uid>-<index>.keyed  a subtask's keyed state
//! <checkpoint-dir>/<job>/chk-<id>/<uid>-<index>.op     a subtask's operator state
//! <checkpoint-dir>/<job>/shared/                       files referenced by several checkpoints
//! ```

use std::path::{Path, PathBuf};
use weir_core::CheckpointId;

pub const METADATA_FILE: &str = "_metadata";
pub const METADATA_TEMP_FILE: &str = "_metadata.inprogress";
pub const SHARED_DIR: &str = "shared";
const CHECKPOINT_PREFIX: &str = "chk-";

/// Paths of one job's checkpoints under its root `<checkpoint-dir>/<job>`.
#[derive(Clone, Debug)]
pub struct CheckpointLayout {
    root: PathBuf,
}

impl CheckpointLayout {
    pub fn new(checkpoint_dir: &Path, job_name: &str) -> CheckpointLayout {
        CheckpointLayout {
            root: checkpoint_dir.join(job_name),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn checkpoint_dir_name(id: CheckpointId) -> String {
        format!("{CHECKPOINT_PREFIX}{id}")
    }

    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.root.join(Self::checkpoint_dir_name(id))
    }

    pub fn metadata_path(&self, id: CheckpointId) -> PathBuf {
        self.checkpoint_dir(id).join(METADATA_FILE)
    }

    /// The relative path (as stored in a `StateHandle`) of a subtask's private state file.
    pub fn state_file(id: CheckpointId, uid: &str, index: u32, extension: &str) -> String {
        format!(
            "{}/{}-{index}.{extension}",
            Self::checkpoint_dir_name(id),
            sanitize(uid)
        )
    }

    /// Resolves a handle's relative path.
    pub fn resolve(&self, relative: &str) -> PathBuf {
        relative
            .split('/')
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// The checkpoint id a directory name stands for, if it is a checkpoint directory.
    pub fn parse_checkpoint_dir(name: &str) -> Option<CheckpointId> {
        name.strip_prefix(CHECKPOINT_PREFIX)?
            .parse()
            .ok()
            .map(CheckpointId)
    }
}

/// Uids may hold any text; file names keep to a portable alphabet.
fn sanitize(uid: &str) -> String {
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
        let layout = CheckpointLayout::new(Path::new("/ckpt"), "demo");
        assert_eq!(
            layout.resolve(&p),
            Path::new("/ckpt/demo/chk-7/count_per_user-1.keyed")
        );
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
