//! Weir's runtime: everything that runs a job. `ARCHITECTURE.md` at the repository's root
//! maps the flows to these modules.
//!
//! Each subtask runs one task loop (`task`) on its own thread — a mailbox where records,
//! barriers and checkpoint notifications are handled in order, so operator state needs no
//! locks. Records travel in batches over bounded channels ([`channel`], [`partition`],
//! `output`); a full channel back-pressures its producer. The input gate (`gate`) aligns
//! barriers. A snapshot's synchronous part runs on the task loop; serialisation and writing
//! run on the snapshot workers ([`snapshot`]), which acknowledge to the coordinator's driver
//! (`driver`). The executor ([`execute`]) plans where the job starts ([`restore`]), deploys
//! its [`graph::JobGraph`] ([`deploy`]), and supervises its attempts.
//!
//! Event time: sources make watermarks between batches ([`watermark`]); each input gate
//! combines its channels' watermarks and idleness; keyed operators register event-time and
//! processing-time timers, which are keyed state ([`timer_service`]); windows and joins build
//! on both ([`operators::window`]); an operator may emit a second stream ([`side_output`]).
//!
//! Operator chaining ([`chain`]): a one-input operator fed by a forward edge runs in its
//! producer's task loop, called directly, with its own state, snapshots and metrics.
//!
//! Modules other crates build on are public; the rest is `pub(crate)`, with the names a job
//! needs re-exported here.

pub(crate) mod alignment;
pub mod chain;
pub(crate) mod chained;
pub mod channel;
pub mod channel_state;
pub(crate) mod config;
pub mod control;
pub mod deploy;
pub(crate) mod driver;
pub mod error;
pub(crate) mod executor;
pub(crate) mod gate;
pub mod graph;
pub(crate) mod ha;
pub mod handle;
pub(crate) mod injection;
pub mod metrics;
pub mod operator;
pub mod operators;
pub(crate) mod output;
pub mod partition;
pub(crate) mod progress;
pub mod remote;
pub mod restart;
pub mod restore;
pub mod side_output;
pub mod snapshot;
pub mod split_watermarks;
mod supervise;
pub(crate) mod task;
pub mod timer_service;
pub mod watermark;
pub(crate) mod watermark_valve;
pub mod wire_format;

pub use config::{ClaimMode, ExecutionConfig, StartMode};
pub use control::Drain;
pub use error::{JobError, TaskError};
pub use executor::{execute, execute_job, execute_with};
pub use ha::HighAvailabilityServices;
pub use handle::{JobHandle, RequestStatus, StopHandle};
pub use injection::FailureInjection;
pub use operator::{OneInputOperator, OperatorContext, SourceFunction, SourceStatus};
pub use output::Output;
pub use progress::{JobProgress, JobSummary, LastCheckpoint};
