//! Sources and sinks.
//!
//! - [`generator::EventGenerator`]: a replayable source of synthetic purchase events,
//!   deterministic from a seed and a position, so a restored job regenerates exactly the
//!   records after its checkpoint.
//! - [`file_sink::FileSink`]: writes lines to one file per subtask; on snapshot it flushes and
//!   fsyncs and records each file's length, and on restore it truncates back to it, so the files
//!   hold each record once after any crash.

pub mod file_sink;
pub mod generator;

pub use file_sink::FileSink;
pub use generator::{Event, EventGenerator};
