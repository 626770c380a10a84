//! Weir's DataStream API: how a user writes a streaming job.
//!
//! A [`StreamEnv`] holds the job's configuration and graph; sources start [`DataStream`]s,
//! transformations extend them, [`DataStream::key_by`] makes a [`KeyedStream`] whose
//! operators keep keyed state, and sinks end them. [`StreamEnv::build`] validates the graph
//! (for example: every operator uid unique) and returns the
//! [`JobGraph`](weir_runtime::graph::JobGraph) the runtime executes.
//!
//! ```
//! use weir_api::prelude::*;
//!
//! #[derive(Clone)]
//! struct Numbers { next: u64, end: u64 }
//! impl SourceFunction<u64> for Numbers {
//!     fn open(&mut self, _: &OperatorContext, restored: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> {
//!         if let Some(p) = restored.and_then(|p| p.into_iter().next()) {
//!             self.next = u64::from_le_bytes(p.try_into().map_err(|_| TaskError::user("bad position"))?);
//!         }
//!         Ok(())
//!     }
//!     fn poll_batch(&mut self, batch: &mut Vec<u64>, max: usize) -> Result<SourceStatus, TaskError> {
//!         if self.next == self.end { return Ok(SourceStatus::Exhausted); }
//!         let stop = self.end.min(self.next + max as u64);
//!         batch.extend(self.next..stop);
//!         self.next = stop;
//!         Ok(SourceStatus::Emitted)
//!     }
//!     fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
//!         Ok(vec![self.next.to_le_bytes().to_vec()])
//!     }
//! }
//!
//! let env = StreamEnv::new("example");
//! env.source("numbers", Numbers { next: 0, end: 1000 })
//!     .parallelism(1)
//!     .key_by(|n: &u64| n % 10)
//!     .count("count-per-digit")
//!     .filter("big", |(_, count): &(u64, u64)| *count > 50)
//!     .sink("print", CollectSink::default());
//! let graph = env.build().unwrap();
//! assert_eq!(graph.nodes.len(), 4);
//! ```

mod aggregate;
mod collect;
mod env;
mod stream;

pub use aggregate::{Count, Reduce, Sum};
pub use collect::CollectSink;
pub use env::StreamEnv;
pub use stream::{ConnectedStreams, DataStream, KeyedConnectedStreams, KeyedStream, SinkHandle};

/// Everything a job author needs, in one import.
pub mod prelude {
    pub use crate::{CollectSink, ConnectedStreams, DataStream, KeyedStream, StreamEnv};
    pub use weir_core::CheckpointId;
    pub use weir_runtime::channel::Either;
    pub use weir_runtime::operators::{
        CoProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction, SinkFunction,
    };
    pub use weir_runtime::{OperatorContext, Output, SourceFunction, SourceStatus, TaskError};
    pub use weir_state::{CurrentKey, Key, ListState, MapState, StableHash, Value, ValueState};
}
