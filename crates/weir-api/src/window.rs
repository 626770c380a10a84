//! Windows in the API: `key_by(..).window(assigner, timestamp)` and what to compute per window.
//!
//! ```
//! use std::time::Duration;
//! use weir_api::prelude::*;
//! use weir_api::{SlidingEventTimeWindows, WindowResult};
//! use weir_runtime::operators::window::Count;
//!
//! // Bids per auction over the last 10 s, every 2 s (panes of 2 s are shared by 5 windows).
//! let env = StreamEnv::new("hot-items");
//! let bids = vec![(1u64, 1_000i64), (1, 3_000), (2, 3_500)]; // (auction, time)
//! let counts: DataStream<WindowResult<u64, u64>> = env
//!     .source("bids", VecSource::new(bids))
//!     .key_by(|b: &(u64, i64)| b.0)
//!     .window(SlidingEventTimeWindows::of(Duration::from_secs(10), Duration::from_secs(2)),
//!             |b: &(u64, i64)| b.1)
//!     .aggregate("bids-per-auction", Count);
//! counts.sink("out", CollectSink::default());
//! assert!(env.build().is_ok());
//! ```

use std::time::Duration;
use weir_core::Data;
use weir_runtime::channel::Either;
use weir_runtime::graph::{direct_channels, keyed_writers, one_input_factory, NodeRole};
use weir_runtime::operators::window::{
    AggregateFunction, Aggregating, Buffering, DropLate, EventTimeSessionWindows, LateToSideOutput,
    PaneGeometry, PanedWindowOperator, ProcessWindowFunction, ReduceAggregate,
    SessionWindowOperator, SlidingEventTimeWindows, TumblingEventTimeWindows, WindowFunction,
    WindowResult,
};
use weir_runtime::partition::Partition;
use weir_runtime::side_output::main_half;
use weir_state::{Key, Value};

use crate::side_output::OutputTag;
use crate::stream::{DataStream, KeyedStream};

/// Which windows: tumbling and sliding windows (made of panes) or sessions.
#[derive(Clone, Copy, Debug)]
pub enum Windows {
    Panes(PaneGeometry),
    Sessions(EventTimeSessionWindows),
}

impl From<TumblingEventTimeWindows> for Windows {
    fn from(w: TumblingEventTimeWindows) -> Windows {
        Windows::Panes(w.panes())
    }
}

impl From<SlidingEventTimeWindows> for Windows {
    fn from(w: SlidingEventTimeWindows) -> Windows {
        Windows::Panes(w.panes())
    }
}

impl From<EventTimeSessionWindows> for Windows {
    fn from(w: EventTimeSessionWindows) -> Windows {
        Windows::Sessions(w)
    }
}

/// A keyed stream cut into event-time windows; choose what to compute per window.
pub struct WindowedStream<T, K, KF, TF> {
    keyed: KeyedStream<T, K, KF>,
    timestamp: TF,
    windows: Windows,
    allowed_lateness: i64,
    late: Option<(String, std::any::TypeId)>,
}

impl<T, K, KF> KeyedStream<T, K, KF>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    /// Windows of event time `timestamp(record)` (milliseconds), e.g.
    /// [`TumblingEventTimeWindows`], [`SlidingEventTimeWindows`] or
    /// [`EventTimeSessionWindows`]. Windows fire when the watermark passes their end.
    pub fn window<W, TF>(self, windows: W, timestamp: TF) -> WindowedStream<T, K, KF, TF>
    where
        W: Into<Windows>,
        TF: Fn(&T) -> i64 + Clone + Send + Sync + 'static,
    {
        WindowedStream {
            keyed: self,
            timestamp,
            windows: windows.into(),
            allowed_lateness: 0,
            late: None,
        }
    }
}

impl<T, K, KF, TF> WindowedStream<T, K, KF, TF>
where
    T: Data,
    K: Key,
    KF: Fn(&T) -> K + Clone + Send + Sync + 'static,
    TF: Fn(&T) -> i64 + Clone + Send + Sync + 'static,
{
    /// Keeps windows this long after they fired; a late record within it fires its window
    /// again with the record included. Records later than that are dropped, or sent to the
    /// side output of [`side_output_late_data`](Self::side_output_late_data).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness.as_millis().min(i64::MAX as u128 / 4) as i64;
        self
    }

    /// Sends records too late for all their windows to the side output `tag` of the window
    /// operator (see [`DataStream::side_output`]).
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.late = Some((tag.id().to_string(), tag.type_id()));
        self
    }

    /// Aggregates each window incrementally: one accumulator per pane or session, merged when
    /// the window fires.
    pub fn aggregate<A>(self, name: &str, aggregate: A) -> DataStream<WindowResult<K, A::Out>>
    where
        A: AggregateFunction<T>,
    {
        self.build(name, Aggregating(aggregate))
    }

    /// Combines each window's records two by two.
    pub fn reduce<F>(self, name: &str, f: F) -> DataStream<WindowResult<K, Option<T>>>
    where
        T: Value,
        F: Fn(&T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.build(name, Aggregating(ReduceAggregate(f)))
    }

    /// Calls `function` with all the records of each window when it fires.
    pub fn process<O, P>(self, name: &str, function: P) -> DataStream<O>
    where
        T: Value,
        O: Data,
        P: ProcessWindowFunction<K, T, O>,
    {
        self.build(name, Buffering(function))
    }

    /// Adds the window operator running `function` and connects the keyed stream into it.
    pub(crate) fn build<O, W>(self, name: &str, function: W) -> DataStream<O>
    where
        O: Data,
        W: WindowFunction<K, T, O>,
    {
        let WindowedStream {
            keyed,
            timestamp,
            windows,
            allowed_lateness,
            late,
        } = self;
        let key = keyed.key.clone();
        let factory = match (windows, late.is_some()) {
            (Windows::Panes(g), false) => one_input_factory::<T, O, _>(
                PanedWindowOperator::<_, _, _, _, _, _, DropLate>::new(key, timestamp, g, function)
                    .with_allowed_lateness(allowed_lateness),
            ),
            (Windows::Panes(g), true) => one_input_factory::<T, Either<O, T>, _>(
                PanedWindowOperator::<_, _, _, _, _, _, LateToSideOutput>::new(
                    key, timestamp, g, function,
                )
                .with_allowed_lateness(allowed_lateness),
            ),
            (Windows::Sessions(s), false) => one_input_factory::<T, O, _>(
                SessionWindowOperator::<_, _, _, _, _, _, DropLate>::new(
                    key, timestamp, s, function,
                )
                .with_allowed_lateness(allowed_lateness),
            ),
            (Windows::Sessions(s), true) => one_input_factory::<T, Either<O, T>, _>(
                SessionWindowOperator::<_, _, _, _, _, _, LateToSideOutput>::new(
                    key, timestamp, s, function,
                )
                .with_allowed_lateness(allowed_lateness),
            ),
        };
        let env = keyed.stream.env.clone();
        let node = env.add_node(name, NodeRole::Operator, true, factory);
        keyed.stream.connect_into(
            node,
            direct_channels::<T>(),
            keyed_writers::<T, K, KF>(keyed.key),
            Partition::Hash,
        );
        match late {
            None => DataStream::new(env, vec![node]),
            Some(tag) => {
                env.inner.borrow_mut().side_outputs.insert(node, tag);
                DataStream::adapted(env, node, main_half::<O, T>)
            }
        }
    }
}
