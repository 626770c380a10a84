//! Sources and sinks.
//!
//! - [`generator::EventGenerator`]: a replayable source of synthetic purchase events,
//!   deterministic from a seed and a position, so a restored job regenerates exactly the
//!   records after its checkpoint.
//! - [`file_sink::FileSink`]: writes lines to one file per subtask; on snapshot it flushes and
//!   fsyncs and records each file's length, and on restore it truncates back to it, so the files
//!   hold each record once after any crash.
//! - [`file_source::FileSource`]: replayable lines from a file or a directory of files.
//! - [`committing_sink::CommittingFileSink`]: the exactly-once file sink by two-phase commit;
//!   readers never see uncommitted records.
//! - [`nexmark`]: the Nexmark benchmark's deterministic event generator, its source, and its
//!   queries as Weir jobs.

pub mod committing_sink;
pub mod file_sink;
pub mod file_source;
pub mod generator;
pub mod nexmark;

pub use committing_sink::{CommittingFileSink, SinkMode};
pub use file_sink::FileSink;
pub use file_source::FileSource;
pub use generator::{Event, EventGenerator};
