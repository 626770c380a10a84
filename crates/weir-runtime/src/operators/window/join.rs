//! The windowed join (and co-group) of two keyed streams: both inputs arrive at one window
//! operator as [`Either`]; each pane buffers the records of both sides, and when a window fires
//! its two sides are handed to a [`CoGroupFunction`] — an inner join emits one result per pair.
//!
//! Being an ordinary window operator, it shares panes between sliding windows, keeps its
//! buffers as keyed state per `(key, pane)` and takes its watermark as the minimum of both
//! inputs'.
//!
//! ```
//! use weir_runtime::operators::window::{CoGroupFunction, InnerJoin, TimeWindow, WindowElements};
//!
//! let mut join = InnerJoin(|person: &&str, auction: &u32| format!("{person}:{auction}"));
//! let mut out = Vec::new();
//! let people = ["ann"];
//! let auctions = [1, 2];
//! join.co_group(&7u64, TimeWindow::new(0, 10),
//!               WindowElements::new(vec![&people[..]]), WindowElements::new(vec![&auctions[..]]),
//!               &mut out).unwrap();
//! assert_eq!(out, ["ann:1", "ann:2"]);
//! ```

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::functions::{WindowElements, WindowFunction};
use super::time_window::TimeWindow;
use crate::channel::Either;
use crate::error::TaskError;
use weir_state::Value;

/// A function over the records of both inputs in one window of one key.
pub trait CoGroupFunction<K, A, B, O>: Clone + Send + Sync + 'static {
    fn co_group(
        &mut self,
        key: &K,
        window: TimeWindow,
        left: WindowElements<'_, A>,
        right: WindowElements<'_, B>,
        out: &mut Vec<O>,
    ) -> Result<(), TaskError>;
}

/// The inner join: `f(a, b)` for every pair of a window's left and right records.
#[derive(Clone)]
pub struct InnerJoin<F>(pub F);

impl<K, A, B, O, F> CoGroupFunction<K, A, B, O> for InnerJoin<F>
where
    F: FnMut(&A, &B) -> O + Clone + Send + Sync + 'static,
{
    fn co_group(
        &mut self,
        _key: &K,
        _window: TimeWindow,
        left: WindowElements<'_, A>,
        right: WindowElements<'_, B>,
        out: &mut Vec<O>,
    ) -> Result<(), TaskError> {
        for a in left {
            for b in right.clone() {
                out.push((self.0)(a, b));
            }
        }
        Ok(())
    }
}

/// A closure co-group: `f(key, window, left, right, out)`.
#[derive(Clone)]
pub struct CoGroup<F>(pub F);

impl<K, A, B, O, F> CoGroupFunction<K, A, B, O> for CoGroup<F>
where
    F: FnMut(&K, TimeWindow, WindowElements<'_, A>, WindowElements<'_, B>, &mut Vec<O>)
        + Clone
        + Send
        + Sync
        + 'static,
{
    fn co_group(
        &mut self,
        key: &K,
        window: TimeWindow,
        left: WindowElements<'_, A>,
        right: WindowElements<'_, B>,
        out: &mut Vec<O>,
    ) -> Result<(), TaskError> {
        (self.0)(key, window, left, right, out);
        Ok(())
    }
}

/// The records of both sides buffered in one pane.
///
/// A pane of a key often holds one record a side (a person and its auctions' seller row, say):
/// the first is kept inline, in the state table's entry, which saves an allocation per side and
/// a pointer to chase when the pane is read or written to a checkpoint. Serialised as sequences,
/// the same bytes as `Vec`s.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JoinBuffers<A, B> {
    pub left: SmallVec<[A; 1]>,
    pub right: SmallVec<[B; 1]>,
}

/// The window function of a windowed join over `Either<A, B>` records.
#[derive(Clone)]
pub struct Joining<C>(pub C);

impl<K, A, B, O, C> WindowFunction<K, Either<A, B>, O> for Joining<C>
where
    A: Value,
    B: Value,
    C: CoGroupFunction<K, A, B, O>,
{
    type Acc = JoinBuffers<A, B>;
    fn create(&self) -> JoinBuffers<A, B> {
        JoinBuffers {
            left: SmallVec::new(),
            right: SmallVec::new(),
        }
    }
    #[inline]
    fn add(&mut self, acc: &mut JoinBuffers<A, B>, record: Either<A, B>) {
        match record {
            Either::Left(a) => acc.left.push(a),
            Either::Right(b) => acc.right.push(b),
        }
    }
    fn merge(&mut self, acc: &mut JoinBuffers<A, B>, mut other: JoinBuffers<A, B>) {
        acc.left.append(&mut other.left);
        acc.right.append(&mut other.right);
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        panes: &[&JoinBuffers<A, B>],
        out: &mut Vec<O>,
    ) -> Result<(), TaskError> {
        let left = WindowElements::new(panes.iter().map(|p| p.left.as_slice()).collect());
        let right = WindowElements::new(panes.iter().map(|p| p.right.as_slice()).collect());
        self.0.co_group(key, window, left, right, out)
    }
}
