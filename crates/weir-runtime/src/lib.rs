//! Weir's runtime: everything that runs a job.
//!
//! In the checkpoint flows: each subtask runs one task loop ([`task`]) on its own thread — a
//! mailbox where records, barriers and checkpoint notifications are handled in order, so
//! operator state needs no locks. Records travel in batches over bounded channels
//! ([`channel`], [`partition`], [`output`]); a full channel back-pressures its producer. The
//! input gate ([`gate`]) aligns barriers (flow 3). A snapshot's synchronous part runs on the
//! task loop; serialisation and writing run on the snapshot workers ([`snapshot`], flow 4),
//! which acknowledge to the coordinator's driver ([`driver`], flows 1 and 5). The executor
//! ([`executor`]) deploys a [`graph::JobGraph`], restores it from a checkpoint ([`restore`],
//! flow 7) and supervises it.
//!
//! Event time: sources make watermarks between batches ([`watermark`]); each input gate
//! combines its channels' watermarks and idleness ([`watermark_valve`]); keyed operators
//! register event-time and processing-time timers, which are keyed state
//! ([`timer_service`]); windows and joins build on both ([`operators::window`]); an operator
//! may emit a second stream ([`side_output`]).

pub mod alignment;
pub mod channel;
pub mod config;
pub mod control;
pub mod deploy;
pub mod driver;
pub mod error;
pub mod executor;
pub mod gate;
pub mod graph;
pub mod ha;
pub mod handle;
pub mod injection;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod output;
pub mod partition;
pub mod progress;
pub mod remote;
pub mod restart;
pub mod restore;
pub mod side_output;
pub mod snapshot;
mod supervise;
pub mod task;
pub mod timer_service;
pub mod watermark;
pub mod watermark_valve;

pub use config::{ClaimMode, ExecutionConfig, StartMode};
pub use control::Drain;
pub use error::{JobError, TaskError};
pub use executor::{execute, execute_job, execute_with};
pub use ha::HighAvailabilityServices;
pub use handle::{JobHandle, RequestStatus, StopHandle};
pub use operator::{OneInputOperator, OperatorContext, SourceFunction, SourceStatus};
pub use output::Output;
pub use progress::{JobProgress, JobSummary, LastCheckpoint};
