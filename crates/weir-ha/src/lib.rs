//! Weir's high availability on ZooKeeper: leader election among job managers with fencing,
//! the checkpoint id counter, and the completed checkpoint store.
//!
//! # Role in the flows
//!
//! With `high-availability.type: zookeeper` several job managers run the same job; ZooKeeper
//! decides which one leads, and holds what a new leader needs to carry on where the last one
//! stopped. Each piece plugs into the coordinator in place of its standalone twin.
//!
//! - **Leader election** ([`LeaderElection`]). Every job manager creates an ephemeral
//!   sequential znode under `<root>/<job-id>/leader`; the lowest leads, each other one watches
//!   its predecessor. The leader gets a [`FencingToken`] (its znode and epoch). Leadership is
//!   revoked at once, with a notification, when the connection to ZooKeeper drops or the
//!   session ends; a job manager that loses its session rejoins as a standby with a new one.
//! - **Trigger: the id counter** ([`ZooKeeperCheckpointIdCounter`], Flink's
//!   `ZooKeeperCheckpointIDCounter`). The coordinator's driver asks it for an id on
//!   `Action::AllocateId`. A compare-and-set on `<root>/<job-id>/checkpoint-counter` hands
//!   out each id once, strictly ascending across job managers, leaders and restarts.
//! - **Complete: the completed checkpoint store** ([`ZooKeeperCompletedCheckpointStore`]).
//!   Once `_metadata` is durable in checkpoint storage, the store records a pointer to it at
//!   `<root>/<job-id>/checkpoints/<id>` and removes the pointers of checkpoints beyond
//!   `num-retained`, in one ZooKeeper transaction; shared files are reference-counted by the
//!   standalone store it wraps.
//! - **Recover: failover.** A new leader rebuilds the store from the pointers and the metadata
//!   they name ([`ZooKeeperCompletedCheckpointStore::recover`]), skipping, with a warning,
//!   pointers whose metadata is missing or corrupt, and restores the job from the latest one;
//!   the counter carries on from ZooKeeper.
//!
//! # Fencing
//!
//! Every write of the counter and the store is a ZooKeeper multi-operation that checks the
//! leader's contender znode still exists ([`fencing`]). A job manager whose session expired or
//! that lost leadership otherwise gets [`HaError::Fenced`], and nothing is written: a stale
//! leader cannot hand out an id or complete a checkpoint, whatever it believes.
//!
//! # Blocking API
//!
//! The coordinator's driver is a plain thread, so the API blocks; ZooKeeper calls run on a
//! small internal tokio runtime and give up after the connection timeout ([`ZooKeeper`]).
//! [`ZooKeeperHaServices`] builds every piece from the `high-availability.*` options.

pub mod counter;
pub mod election;
pub mod error;
pub mod fencing;
mod pointer;
pub mod recovery;
pub mod services;
pub mod store;
pub mod znodes;
pub mod zookeeper;

pub use counter::ZooKeeperCheckpointIdCounter;
pub use election::{LeaderElection, LeaderInfo, LeadershipEvent};
pub use error::HaError;
pub use fencing::FencingToken;
pub use services::ZooKeeperHaServices;
pub use store::ZooKeeperCompletedCheckpointStore;
pub use znodes::JobZnodes;
pub use zookeeper::ZooKeeper;
