//! The layout of a job's znodes in ZooKeeper. Every path is built here, so writers and readers
//! always agree.
//!
//! ```text
//! <root>/<job-id>/leader/_c_<uuid>-latch-<seq>   one ephemeral sequential znode per job manager
//!                                                 contending for leadership; the lowest leads
//! <root>/<job-id>/checkpoint-counter             the next checkpoint id, as decimal text
//! <root>/<job-id>/checkpoints/<id>               a pointer (JSON) to one retained completed
//!                                                 checkpoint's metadata in checkpoint storage;
//!                                                 <id> has 20 digits so names sort as ids do
//! ```
//!
//! `<root>` is `high-availability.zookeeper.path.root` (default `/weir`), `<job-id>` the job's
//! [`JobId`] in hex. The `leader` znode must never be deleted while the job lives: its children's
//! sequence numbers are the leaders' epochs, and they only ascend as long as it exists.

use weir_core::{CheckpointId, JobId};

/// The znode paths of one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobZnodes {
    job_dir: String,
}

/// The name contenders' znodes carry before their sequence number.
pub(crate) const LATCH_NAME: &str = "latch-";

impl JobZnodes {
    /// The znodes of `job` under `root`, an absolute znode path without a trailing `/` (as
    /// [`ZooKeeperHaConfig::validate`](weir_core::config::ZooKeeperHaConfig::validate) checks).
    pub fn new(root: &str, job: JobId) -> JobZnodes {
        JobZnodes {
            job_dir: format!("{}/{job}", root.trim_end_matches('/')),
        }
    }

    /// `<root>/<job-id>`: everything of the job lives below.
    pub fn job_dir(&self) -> &str {
        &self.job_dir
    }

    /// Parent of the contenders' ephemeral sequential znodes.
    pub fn leader_dir(&self) -> String {
        format!("{}/leader", self.job_dir)
    }

    /// The checkpoint id counter.
    pub fn checkpoint_counter(&self) -> String {
        format!("{}/checkpoint-counter", self.job_dir)
    }

    /// Parent of the checkpoint pointers.
    /// The job's end, once it finished or failed for good: job managers do not run it again.
    pub fn result(&self) -> String {
        format!("{}/result", self.job_dir())
    }

    pub fn checkpoints_dir(&self) -> String {
        format!("{}/checkpoints", self.job_dir)
    }

    /// The pointer of checkpoint `id`.
    pub fn checkpoint(&self, id: CheckpointId) -> String {
        format!("{}/{}", self.checkpoints_dir(), Self::checkpoint_name(id))
    }

    /// The name of checkpoint `id`'s pointer under [`JobZnodes::checkpoints_dir`].
    pub fn checkpoint_name(id: CheckpointId) -> String {
        format!("{:020}", id.0)
    }

    /// The checkpoint id a pointer's name stands for.
    pub fn parse_checkpoint_name(name: &str) -> Option<CheckpointId> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        name.parse().ok().map(CheckpointId)
    }

    /// The epoch (sequence number) of a contender's znode, from its name or path.
    pub fn parse_epoch(znode: &str) -> Option<u64> {
        let name = znode.rsplit('/').next()?;
        let (_, sequence) = name.rsplit_once(LATCH_NAME)?;
        if sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        sequence.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_znodes_live_under_the_root_and_its_id() {
        let z = JobZnodes::new("/weir", JobId(0xab));
        let job = "/weir/000000000000000000000000000000ab";
        assert_eq!(z.job_dir(), job);
        assert_eq!(z.leader_dir(), format!("{job}/leader"));
        assert_eq!(z.checkpoint_counter(), format!("{job}/checkpoint-counter"));
        assert_eq!(
            z.checkpoint(CheckpointId(42)),
            format!("{job}/checkpoints/00000000000000000042")
        );
    }

    #[test]
    fn pointer_names_sort_as_ids_and_parse_back() {
        let mut names: Vec<String> = [10, 9, 100, u64::MAX]
            .iter()
            .map(|&i| JobZnodes::checkpoint_name(CheckpointId(i)))
            .collect();
        names.sort();
        let ids: Vec<u64> = names
            .iter()
            .map(|n| JobZnodes::parse_checkpoint_name(n).unwrap().0)
            .collect();
        assert_eq!(ids, vec![9, 10, 100, u64::MAX]);
        assert_eq!(JobZnodes::parse_checkpoint_name("12x"), None);
        assert_eq!(JobZnodes::parse_checkpoint_name(""), None);
    }

    #[test]
    fn epochs_are_the_sequence_numbers_of_contender_znodes() {
        assert_eq!(
            JobZnodes::parse_epoch("/weir/j/leader/_c_0f-latch-0000000012"),
            Some(12)
        );
        assert_eq!(JobZnodes::parse_epoch("/weir/j/leader/other"), None);
        assert_eq!(JobZnodes::parse_epoch("_c_0f-latch-"), None);
    }
}
