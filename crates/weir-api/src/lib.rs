//! Weir's DataStream API: how a user writes a streaming job.
//!
//! A [`StreamEnv`] holds the job's configuration and graph; sources start [`DataStream`]s,
//! transformations extend them, [`DataStream::key_by`] makes a [`KeyedStream`] whose
//! operators keep keyed state, and sinks end them. [`StreamEnv::build`] validates the graph
//! (for example: every operator uid unique) and returns the
//! [`JobGraph`](weir_runtime::graph::JobGraph) the runtime executes.
//!
//! Event time: [`StreamEnv::source_with_watermarks`] (or
//! [`DataStream::assign_timestamps_and_watermarks`]) makes watermarks;
//! [`KeyedStream::window`] cuts a keyed stream into tumbling, sliding or session windows with
//! incremental [`aggregate`](WindowedStream::aggregate)/[`reduce`](WindowedStream::reduce) or a
//! full-window [`process`](WindowedStream::process), allowed lateness and a side output for
//! late records ([`OutputTag`]); [`KeyedStream::window_join`] and
//! [`KeyedStream::interval_join`] join two keyed streams; keyed process functions register
//! event-time and processing-time timers through their `TimerContext`.
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
mod exactly_once_collect;
mod join;
mod side_output;
mod stream;
mod vec_source;
mod watermarks;
mod window;

pub use aggregate::{Count, Reduce, Sum};
pub use collect::CollectSink;
pub use env::StreamEnv;
pub use exactly_once_collect::ExactlyOnceCollectSink;
pub use join::{IntervalJoin, WindowJoin};
pub use side_output::OutputTag;
pub use stream::{ConnectedStreams, DataStream, KeyedConnectedStreams, KeyedStream, SinkHandle};
pub use vec_source::VecSource;
pub use weir_runtime::operators::window::{
    AggregateFunction, EventTimeSessionWindows, ProcessWindowFunction, SlidingEventTimeWindows,
    TimeWindow, TumblingEventTimeWindows, WindowElements, WindowResult,
};
pub use weir_runtime::watermark::WatermarkStrategy;
pub use window::{WindowedStream, Windows};

/// Everything a job author needs, in one import.
pub mod prelude {
    pub use crate::{
        AggregateFunction, CollectSink, ConnectedStreams, DataStream, EventTimeSessionWindows,
        KeyedStream, OutputTag, SlidingEventTimeWindows, StreamEnv, TimeWindow,
        TumblingEventTimeWindows, VecSource, WatermarkStrategy, WindowElements, WindowResult,
    };
    pub use weir_core::{CheckpointId, Data};
    pub use weir_runtime::channel::Either;
    pub use weir_runtime::operators::{
        CoProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction, SinkFunction,
    };
    pub use weir_runtime::timer_service::{TimeDomain, Timer, TimerContext};
    pub use weir_runtime::{OperatorContext, Output, SourceFunction, SourceStatus, TaskError};
    pub use weir_state::{
        CurrentKey, Key, KeyedStateSet, ListState, MapState, StableHash, StateTtlConfig,
        TtlListState, TtlMapState, TtlValueState, Value, ValueState,
    };
}
