//! Event time in the API: sources that generate watermarks, and timestamp assigners in the
//! middle of a job.
//!
//! ```
//! use std::time::Duration;
//! use weir_api::prelude::*;
//!
//! #[derive(Clone)]
//! struct Readings { next: i64 }
//! impl SourceFunction<(i64, f64)> for Readings {
//!     fn open(&mut self, _: &OperatorContext, _: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> { Ok(()) }
//!     fn poll_batch(&mut self, batch: &mut Vec<(i64, f64)>, _: usize) -> Result<SourceStatus, TaskError> {
//!         if self.next == 100 { return Ok(SourceStatus::Exhausted); }
//!         batch.push((self.next * 1_000, 20.0));
//!         self.next += 1;
//!         Ok(SourceStatus::Emitted)
//!     }
//!     fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
//!         Ok(vec![self.next.to_le_bytes().to_vec()])
//!     }
//! }
//!
//! let env = StreamEnv::new("readings");
//! let strategy = WatermarkStrategy::for_bounded_out_of_orderness(
//!     Duration::from_secs(5), |r: &(i64, f64)| r.0)
//!     .with_idleness(Duration::from_secs(30));
//! env.source_with_watermarks("readings", Readings { next: 0 }, strategy)
//!     .sink("out", CollectSink::default());
//! assert!(env.build().is_ok());
//! ```

use std::time::Duration;
use weir_core::Data;
use weir_runtime::graph::{source_factory_with_watermarks, NodeRole};
use weir_runtime::operator::SourceFunction;
use weir_runtime::watermark::{
    BoundedOutOfOrderness, TimestampsAndWatermarksOperator, WatermarkGenerator, WatermarkStrategy,
};

use crate::env::StreamEnv;
use crate::stream::DataStream;

impl StreamEnv {
    /// Adds a parallel source whose subtasks generate watermarks with `strategy` between batches
    /// (see [`weir_runtime::watermark`]).
    pub fn source_with_watermarks<T, S, G>(
        &self,
        name: &str,
        source: S,
        strategy: WatermarkStrategy<G>,
    ) -> DataStream<T>
    where
        T: Data,
        S: SourceFunction<T> + Clone + Send,
        G: WatermarkGenerator<T>,
    {
        let node = self.add_node(
            name,
            NodeRole::Source,
            false,
            source_factory_with_watermarks(source, strategy),
        );
        DataStream::new(self.clone(), vec![node])
    }
}

impl<T: Data> DataStream<T> {
    /// Reads event time with `timestamp` (milliseconds) and emits watermarks allowing records
    /// up to `max_out_of_orderness` out of order, replacing the watermarks from upstream.
    pub fn assign_timestamps_and_watermarks<F>(
        self,
        name: &str,
        timestamp: F,
        max_out_of_orderness: Duration,
    ) -> DataStream<T>
    where
        F: Fn(&T) -> i64 + Clone + Send + Sync + 'static,
    {
        self.assign_watermarks(
            name,
            WatermarkStrategy::new(BoundedOutOfOrderness::new(max_out_of_orderness, timestamp)),
        )
    }

    /// Emits watermarks made by `strategy`, replacing the watermarks from upstream.
    pub fn assign_watermarks<G>(self, name: &str, strategy: WatermarkStrategy<G>) -> DataStream<T>
    where
        G: WatermarkGenerator<T> + Sync,
    {
        self.then(
            name,
            NodeRole::Operator,
            false,
            TimestampsAndWatermarksOperator::new(strategy),
        )
    }
}
