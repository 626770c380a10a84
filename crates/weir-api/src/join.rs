//! Joins of two keyed streams in the API: the windowed join (and co-group) and the interval
//! join. Both streams must be keyed by the same key type; records meet in the subtask owning
//! their key's key group.
//!
//! ```
//! use std::time::Duration;
//! use weir_api::prelude::*;
//! use weir_api::TumblingEventTimeWindows;
//!
//! let env = StreamEnv::new("joins");
//! let people = env.source("people", VecSource::new(vec![(1u64, 100i64)])); // (id, time)
//! let auctions = env.source("auctions", VecSource::new(vec![(7u64, 1u64, 200i64)])); // (id, seller, time)
//!
//! // Sellers who opened an auction in the same 10 s window they registered in.
//! people.clone().key_by(|p: &(u64, i64)| p.0)
//!     .window_join(auctions.clone().key_by(|a: &(u64, u64, i64)| a.1),
//!                  TumblingEventTimeWindows::of(Duration::from_secs(10)),
//!                  |p: &(u64, i64)| p.1, |a: &(u64, u64, i64)| a.2)
//!     .apply("new-sellers", |p: &(u64, i64), a: &(u64, u64, i64)| (p.0, a.0))
//!     .sink("out", CollectSink::default());
//!
//! // Auctions opened at most 1 s after their seller registered.
//! people.key_by(|p: &(u64, i64)| p.0)
//!     .interval_join(auctions.key_by(|a: &(u64, u64, i64)| a.1),
//!                    |p: &(u64, i64)| p.1, |a: &(u64, u64, i64)| a.2, 0, 1_000)
//!     .process("quick-sellers", |p: &(u64, i64), a: &(u64, u64, i64)| (p.0, a.0))
//!     .sink("quick", CollectSink::default());
//! assert!(env.build().is_ok());
//! ```

use weir_core::Data;
use weir_runtime::channel::Either;
use weir_runtime::graph::{
    keyed_writers, left_channels, one_input_factory, right_channels, NodeRole,
};
use weir_runtime::operators::window::{
    CoGroup, CoGroupFunction, DropLate, InnerJoin, IntervalJoinOperator, Joining,
    PanedWindowOperator, SessionWindowOperator, WindowElements,
};
use weir_runtime::partition::Partition;
use weir_state::{Key, Value};

use crate::stream::{DataStream, KeyedStream};
use crate::window::Windows;
use weir_runtime::operators::window::TimeWindow;

/// Two keyed streams joined over event-time windows.
pub struct WindowJoin<A, B, K, KA, KB, TA, TB> {
    left: KeyedStream<A, K, KA>,
    right: KeyedStream<B, K, KB>,
    windows: Windows,
    time_left: TA,
    time_right: TB,
}

/// Two keyed streams joined over a relative time interval.
pub struct IntervalJoin<A, B, K, KA, KB, TA, TB> {
    left: KeyedStream<A, K, KA>,
    right: KeyedStream<B, K, KB>,
    time_left: TA,
    time_right: TB,
    lower: i64,
    upper: i64,
}

impl<A, K, KA> KeyedStream<A, K, KA>
where
    A: Data,
    K: Key,
    KA: Fn(&A) -> K + Clone + Send + Sync + 'static,
{
    /// Joins this stream with `other` per key and window: records of both sides in the same
    /// window (by their event times `time_left` / `time_right`) meet when it fires.
    pub fn window_join<B, KB, TA, TB, W>(
        self,
        other: KeyedStream<B, K, KB>,
        windows: W,
        time_left: TA,
        time_right: TB,
    ) -> WindowJoin<A, B, K, KA, KB, TA, TB>
    where
        W: Into<Windows>,
    {
        WindowJoin {
            left: self,
            right: other,
            windows: windows.into(),
            time_left,
            time_right,
        }
    }

    /// Joins each record of this stream at `t` with the records of `other` with the same key
    /// at `t + lower ..= t + upper` (milliseconds of event time; bounds may be negative).
    pub fn interval_join<B, KB, TA, TB>(
        self,
        other: KeyedStream<B, K, KB>,
        time_left: TA,
        time_right: TB,
        lower: i64,
        upper: i64,
    ) -> IntervalJoin<A, B, K, KA, KB, TA, TB> {
        IntervalJoin {
            left: self,
            right: other,
            time_left,
            time_right,
            lower,
            upper,
        }
    }
}

/// Connects both keyed streams into `node` (a two-input operator over `Either<A, B>`).
fn connect_both<A, B, K, KA, KB>(
    left: KeyedStream<A, K, KA>,
    right: KeyedStream<B, K, KB>,
    node: usize,
) where
    A: Data,
    B: Data,
    K: Key,
    KA: Fn(&A) -> K + Clone + Send + Sync + 'static,
    KB: Fn(&B) -> K + Clone + Send + Sync + 'static,
{
    left.stream.connect_into(
        node,
        left_channels::<A, B>(),
        keyed_writers::<A, K, KA>(left.key),
        Partition::Hash,
    );
    right.stream.connect_into(
        node,
        right_channels::<A, B>(),
        keyed_writers::<B, K, KB>(right.key),
        Partition::Hash,
    );
}

impl<A, B, K, KA, KB, TA, TB> WindowJoin<A, B, K, KA, KB, TA, TB>
where
    A: Value,
    B: Value,
    K: Key,
    KA: Fn(&A) -> K + Clone + Send + Sync + 'static,
    KB: Fn(&B) -> K + Clone + Send + Sync + 'static,
    TA: Fn(&A) -> i64 + Clone + Send + Sync + 'static,
    TB: Fn(&B) -> i64 + Clone + Send + Sync + 'static,
{
    /// The inner join: `f(a, b)` for every pair of records of a key in the same window.
    pub fn apply<O, F>(self, name: &str, f: F) -> DataStream<O>
    where
        O: Data,
        F: FnMut(&A, &B) -> O + Clone + Send + Sync + 'static,
    {
        self.co_group_with(name, InnerJoin(f))
    }

    /// Calls `f(key, window, left, right, out)` once per key and window with records on either
    /// side.
    pub fn co_group<O, F>(self, name: &str, f: F) -> DataStream<O>
    where
        O: Data,
        F: FnMut(&K, TimeWindow, WindowElements<'_, A>, WindowElements<'_, B>, &mut Vec<O>)
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.co_group_with(name, CoGroup(f))
    }

    /// Runs any [`CoGroupFunction`] per key and window.
    pub fn co_group_with<O, C>(self, name: &str, function: C) -> DataStream<O>
    where
        O: Data,
        C: CoGroupFunction<K, A, B, O>,
    {
        let (ka, kb) = (self.left.key.clone(), self.right.key.clone());
        let key = move |e: &Either<A, B>| match e {
            Either::Left(a) => ka(a),
            Either::Right(b) => kb(b),
        };
        let (ta, tb) = (self.time_left, self.time_right);
        let time = move |e: &Either<A, B>| match e {
            Either::Left(a) => ta(a),
            Either::Right(b) => tb(b),
        };
        let factory = match self.windows {
            Windows::Panes(g) => {
                one_input_factory::<Either<A, B>, O, _>(PanedWindowOperator::<
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    DropLate,
                >::new(
                    key, time, g, Joining(function)
                ))
            }
            Windows::Sessions(s) => {
                one_input_factory::<Either<A, B>, O, _>(SessionWindowOperator::<
                    _,
                    _,
                    _,
                    _,
                    _,
                    _,
                    DropLate,
                >::new(
                    key, time, s, Joining(function)
                ))
            }
        };
        let env = self.left.stream.env.clone();
        let node = env.add_node(name, NodeRole::Operator, true, factory);
        connect_both(self.left, self.right, node);
        DataStream::new(env, vec![node])
    }
}

impl<A, B, K, KA, KB, TA, TB> IntervalJoin<A, B, K, KA, KB, TA, TB>
where
    A: Value,
    B: Value,
    K: Key,
    KA: Fn(&A) -> K + Clone + Send + Sync + 'static,
    KB: Fn(&B) -> K + Clone + Send + Sync + 'static,
    TA: Fn(&A) -> i64 + Clone + Send + Sync + 'static,
    TB: Fn(&B) -> i64 + Clone + Send + Sync + 'static,
{
    /// `f(a, b)` for every matching pair, emitted as soon as its second record arrives.
    pub fn process<O, F>(self, name: &str, f: F) -> DataStream<O>
    where
        O: Data,
        F: FnMut(&A, &B) -> O + Clone + Send + Sync + 'static,
    {
        let op = IntervalJoinOperator::new(
            self.left.key.clone(),
            self.right.key.clone(),
            self.time_left,
            self.time_right,
            self.lower,
            self.upper,
            f,
        );
        let factory = one_input_factory::<Either<A, B>, O, _>(op);
        let env = self.left.stream.env.clone();
        let node = env.add_node(name, NodeRole::Operator, true, factory);
        connect_both(self.left, self.right, node);
        DataStream::new(env, vec![node])
    }
}
