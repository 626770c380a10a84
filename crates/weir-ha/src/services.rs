//! Everything a job manager needs for high availability, built from the
//! `high-availability.*` options: one ZooKeeper session, the leader election, and, for the
//! leader, the checkpoint id counter and the completed checkpoint store.
//!
//! ```no_run
//! # use weir_ha::*;
//! # use std::time::Duration;
//! # fn run(storage: weir_storage::CheckpointStorage) -> Result<(), HaError> {
//! use weir_core::config::ZooKeeperHaConfig;
//! use weir_core::JobId;
//! let config = ZooKeeperHaConfig::new("zk1:2181,zk2:2181,zk3:2181", "s3://bucket/weir-ha");
//! let ha = ZooKeeperHaServices::connect(&config, JobId::from_name("wordcount"))?;
//! let election = ha.leader_election("jobmanager-1:6123");
//! if let Some(token) = election.await_leadership(Duration::from_secs(60)) {
//!     let counter = ha.checkpoint_id_counter(&token)?;
//!     let (store, discards) = ha.recover_completed_checkpoint_store(&token, storage, 3)?;
//!     // CheckpointCoordinator::with_store(.., Box::new(store)), the driver with the counter.
//! }
//! # Ok(()) }
//! ```

use crate::{
    FencingToken, HaError, JobZnodes, LeaderElection, ZooKeeper, ZooKeeperCheckpointIdCounter,
    ZooKeeperCompletedCheckpointStore,
};
use weir_checkpoint::Discard;
use weir_core::config::ZooKeeperHaConfig;
use weir_core::{CheckpointId, JobId};
use weir_storage::CheckpointStorage;

/// A job manager's high-availability services for one job.
#[derive(Clone, Debug)]
pub struct ZooKeeperHaServices {
    zk: ZooKeeper,
    znodes: JobZnodes,
    config: ZooKeeperHaConfig,
}

impl ZooKeeperHaServices {
    /// Connects to ZooKeeper for `job`, as `config` says (validated first).
    pub fn connect(config: &ZooKeeperHaConfig, job: JobId) -> Result<ZooKeeperHaServices, HaError> {
        config.validate().map_err(|e| HaError::ZooKeeper {
            quorum: config.quorum.clone(),
            operation: "connect".into(),
            reason: e.to_string(),
        })?;
        Ok(ZooKeeperHaServices {
            zk: ZooKeeper::from_config(config)?,
            znodes: JobZnodes::new(&config.root, job),
            config: config.clone(),
        })
    }

    pub fn zookeeper(&self) -> &ZooKeeper {
        &self.zk
    }

    pub fn znodes(&self) -> &JobZnodes {
        &self.znodes
    }

    pub fn config(&self) -> &ZooKeeperHaConfig {
        &self.config
    }

    /// Joins the job's leader election as `contender` (its address, for instance).
    pub fn leader_election(&self, contender: &str) -> LeaderElection {
        LeaderElection::start(&self.zk, &self.znodes, contender)
    }

    /// The job's checkpoint id counter, written with the leader's `token`.
    pub fn checkpoint_id_counter(
        &self,
        token: &FencingToken,
    ) -> Result<ZooKeeperCheckpointIdCounter, HaError> {
        ZooKeeperCheckpointIdCounter::new(&self.zk, &self.znodes, token.clone())
    }

    /// The job's checkpoint id counter, raised above `max_id_found` in checkpoint storage.
    pub fn checkpoint_id_counter_after(
        &self,
        token: &FencingToken,
        max_id_found: CheckpointId,
    ) -> Result<ZooKeeperCheckpointIdCounter, HaError> {
        ZooKeeperCheckpointIdCounter::starting_after(
            &self.zk,
            &self.znodes,
            token.clone(),
            max_id_found,
        )
    }

    /// How the job ended, if a leader recorded its end ([`Self::record_job_result`]).
    pub fn job_result(&self) -> Result<Option<String>, HaError> {
        Ok(self
            .zk
            .get_data(&self.znodes.result())?
            .map(|(data, _)| String::from_utf8_lossy(&data).into_owned()))
    }

    /// Records that the job ended for good with `status` (FINISHED, FAILED), written with the
    /// leader's `token`: a standby or a restarted job manager then does not run it again, as
    /// Flink's job result store. Recording it twice keeps the first.
    pub fn record_job_result(&self, token: &FencingToken, status: &str) -> Result<(), HaError> {
        self.zk.ensure_path(self.znodes.job_dir())?;
        let write = crate::fencing::FencedWrite {
            token,
            ops: vec![crate::fencing::WriteOp::Create {
                path: self.znodes.result(),
                data: status.as_bytes().to_vec(),
            }],
            operation: format!("record the job's end ({status})"),
        };
        match self.zk.fenced_write(&write) {
            Ok(()) => Ok(()),
            Err(crate::fencing::WriteFailure::Op {
                error: zookeeper_client::Error::NodeExists,
                ..
            }) => Ok(()),
            Err(crate::fencing::WriteFailure::Op { error, .. }) => {
                Err(self.zk.error(&write.operation, true, error))
            }
            Err(crate::fencing::WriteFailure::Ha(e)) => Err(e),
        }
    }

    /// The job's completed checkpoint store, recovered from ZooKeeper and `storage`, written
    /// with the leader's `token`; and what to delete for checkpoints beyond `num_retained`.
    pub fn recover_completed_checkpoint_store(
        &self,
        token: &FencingToken,
        storage: CheckpointStorage,
        num_retained: u32,
    ) -> Result<(ZooKeeperCompletedCheckpointStore, Vec<Discard>), HaError> {
        ZooKeeperCompletedCheckpointStore::recover(
            &self.zk,
            &self.znodes,
            token.clone(),
            storage,
            num_retained,
        )
    }
}
