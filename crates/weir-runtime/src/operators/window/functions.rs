//! What a window computes: incremental aggregation ([`AggregateFunction`], `reduce`), or a
//! function over all the window's records ([`ProcessWindowFunction`]); and where late records
//! go ([`LatePolicy`]).
//!
//! ```
//! use weir_runtime::operators::window::{AggregateFunction, Count, Max};
//!
//! let count = Count;
//! let mut acc = AggregateFunction::<&str>::create_accumulator(&count);
//! count.add(&mut acc, "a");
//! count.add(&mut acc, "b");
//! assert_eq!(AggregateFunction::<&str>::get_result(&count, &acc), 2);
//!
//! let max = Max::by(|price: &u64| *price);
//! let mut acc = max.create_accumulator();
//! max.add(&mut acc, 3);
//! max.add(&mut acc, 7);
//! assert_eq!(max.get_result(&acc), Some(7));
//! ```

use std::marker::PhantomData;
use weir_state::Value;

use super::time_window::TimeWindow;
use crate::channel::Either;
use crate::error::TaskError;

/// An incremental aggregation: records are added to an accumulator as they arrive, and
/// accumulators of panes or merged sessions are merged.
pub trait AggregateFunction<T>: Clone + Send + Sync + 'static {
    type Acc: Value;
    type Out: weir_core::Data;
    fn create_accumulator(&self) -> Self::Acc;
    fn add(&self, acc: &mut Self::Acc, value: T);
    /// Adds `other`'s contents to `acc` (as if its records had been added to `acc`).
    fn merge(&self, acc: &mut Self::Acc, other: &Self::Acc);
    fn get_result(&self, acc: &Self::Acc) -> Self::Out;
}

/// Counts records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

impl<T> AggregateFunction<T> for Count {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, acc: &mut u64, _: T) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: &u64) {
        *acc += other;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// Keeps the record with the largest `by(record)` (the first one on ties).
#[derive(Clone)]
pub struct Max<F, T> {
    by: F,
    _t: PhantomData<fn(T)>,
}

impl<F, T> Max<F, T> {
    pub fn by(by: F) -> Max<F, T> {
        Max {
            by,
            _t: PhantomData,
        }
    }
}

impl<F, T, M> AggregateFunction<T> for Max<F, T>
where
    T: Value,
    M: Ord,
    F: Fn(&T) -> M + Clone + Send + Sync + 'static,
{
    type Acc = Option<T>;
    type Out = Option<T>;
    fn create_accumulator(&self) -> Option<T> {
        None
    }
    #[inline]
    fn add(&self, acc: &mut Option<T>, value: T) {
        match acc {
            Some(best) if (self.by)(best) >= (self.by)(&value) => {}
            _ => *acc = Some(value),
        }
    }
    fn merge(&self, acc: &mut Option<T>, other: &Option<T>) {
        if let Some(other) = other {
            self.add(acc, other.clone());
        }
    }
    fn get_result(&self, acc: &Option<T>) -> Option<T> {
        acc.clone()
    }
}

/// A window `reduce`: combines records two by two with `f(&acc, next)`.
#[derive(Clone)]
pub struct ReduceAggregate<F>(pub F);

impl<T, F> AggregateFunction<T> for ReduceAggregate<F>
where
    T: Value,
    F: Fn(&T, T) -> T + Clone + Send + Sync + 'static,
{
    type Acc = Option<T>;
    type Out = Option<T>;
    fn create_accumulator(&self) -> Option<T> {
        None
    }
    #[inline]
    fn add(&self, acc: &mut Option<T>, value: T) {
        *acc = Some(match acc.take() {
            Some(a) => (self.0)(&a, value),
            None => value,
        });
    }
    fn merge(&self, acc: &mut Option<T>, other: &Option<T>) {
        if let Some(other) = other {
            self.add(acc, other.clone());
        }
    }
    fn get_result(&self, acc: &Option<T>) -> Option<T> {
        acc.clone()
    }
}

/// The result of a window for one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct WindowResult<K, R> {
    pub key: K,
    pub window: TimeWindow,
    pub value: R,
}

/// The records of a window, oldest pane first (in arrival order within a pane).
pub struct WindowElements<'a, T> {
    panes: Vec<&'a [T]>,
    pane: usize,
    index: usize,
}

impl<T> Clone for WindowElements<'_, T> {
    fn clone(&self) -> Self {
        WindowElements {
            panes: self.panes.clone(),
            pane: self.pane,
            index: self.index,
        }
    }
}

impl<'a, T> WindowElements<'a, T> {
    pub fn new(panes: Vec<&'a [T]>) -> WindowElements<'a, T> {
        WindowElements {
            panes,
            pane: 0,
            index: 0,
        }
    }

    /// The number of records, whatever has been iterated already.
    pub fn total(&self) -> usize {
        self.panes.iter().map(|p| p.len()).sum()
    }
}

impl<'a, T> Iterator for WindowElements<'a, T> {
    type Item = &'a T;
    fn next(&mut self) -> Option<&'a T> {
        while let Some(pane) = self.panes.get(self.pane) {
            if let Some(item) = pane.get(self.index) {
                self.index += 1;
                return Some(item);
            }
            self.pane += 1;
            self.index = 0;
        }
        None
    }
}

/// A function over all the records of a window, called once per window and key when it fires
/// (and again for each late record, within the allowed lateness).
pub trait ProcessWindowFunction<K, T, O>: Clone + Send + Sync + 'static {
    fn process(
        &mut self,
        key: &K,
        window: TimeWindow,
        elements: WindowElements<'_, T>,
        out: &mut Vec<O>,
    ) -> Result<(), TaskError>;
}

impl<K, T, O, F> ProcessWindowFunction<K, T, O> for F
where
    F: FnMut(&K, TimeWindow, WindowElements<'_, T>, &mut Vec<O>) + Clone + Send + Sync + 'static,
{
    fn process(
        &mut self,
        key: &K,
        window: TimeWindow,
        elements: WindowElements<'_, T>,
        out: &mut Vec<O>,
    ) -> Result<(), TaskError> {
        self(key, window, elements, out);
        Ok(())
    }
}

/// What a window operator keeps per pane (or session) and emits when a window fires.
pub trait WindowFunction<K, T, O>: Clone + Send + Sync + 'static {
    type Acc: Value;
    fn create(&self) -> Self::Acc;
    fn add(&mut self, acc: &mut Self::Acc, record: T);
    /// Moves `other`'s contents into `acc` (merging sessions).
    fn merge(&mut self, acc: &mut Self::Acc, other: Self::Acc);
    /// Emits the window's result from its panes' state, oldest first (never empty).
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        panes: &[&Self::Acc],
        out: &mut Vec<O>,
    ) -> Result<(), TaskError>;
}

/// A window computed by an [`AggregateFunction`].
#[derive(Clone)]
pub struct Aggregating<A>(pub A);

impl<K, T, A> WindowFunction<K, T, WindowResult<K, A::Out>> for Aggregating<A>
where
    K: Clone + Send + Sync + 'static,
    A: AggregateFunction<T>,
{
    type Acc = A::Acc;
    fn create(&self) -> A::Acc {
        self.0.create_accumulator()
    }
    #[inline]
    fn add(&mut self, acc: &mut A::Acc, record: T) {
        self.0.add(acc, record)
    }
    fn merge(&mut self, acc: &mut A::Acc, other: A::Acc) {
        self.0.merge(acc, &other)
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        panes: &[&A::Acc],
        out: &mut Vec<WindowResult<K, A::Out>>,
    ) -> Result<(), TaskError> {
        let value = match panes {
            [one] => self.0.get_result(one),
            _ => {
                let mut acc = self.0.create_accumulator();
                for pane in panes {
                    self.0.merge(&mut acc, pane);
                }
                self.0.get_result(&acc)
            }
        };
        out.push(WindowResult {
            key: key.clone(),
            window,
            value,
        });
        Ok(())
    }
}

/// A window computed by a [`ProcessWindowFunction`] over its buffered records.
#[derive(Clone)]
pub struct Buffering<P>(pub P);

impl<K, T, O, P> WindowFunction<K, T, O> for Buffering<P>
where
    T: Value,
    P: ProcessWindowFunction<K, T, O>,
{
    type Acc = Vec<T>;
    fn create(&self) -> Vec<T> {
        Vec::new()
    }
    #[inline]
    fn add(&mut self, acc: &mut Vec<T>, record: T) {
        acc.push(record)
    }
    fn merge(&mut self, acc: &mut Vec<T>, mut other: Vec<T>) {
        acc.append(&mut other)
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        panes: &[&Vec<T>],
        out: &mut Vec<O>,
    ) -> Result<(), TaskError> {
        let elements = WindowElements::new(panes.iter().map(|p| p.as_slice()).collect());
        self.0.process(key, window, elements, out)
    }
}

/// Where a window operator's results and late records go: the operator's output type.
pub trait LatePolicy<O, L>: Clone + Send + Sync + 'static {
    type Out: weir_core::Data;
    fn result(result: O) -> Self::Out;
    /// A record too late for every window it belongs to.
    fn late(record: L) -> Option<Self::Out>;
}

/// Late records are dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct DropLate;

impl<O: weir_core::Data, L> LatePolicy<O, L> for DropLate {
    type Out = O;
    #[inline]
    fn result(result: O) -> O {
        result
    }
    fn late(_: L) -> Option<O> {
        None
    }
}

/// Late records go to a side output: the operator emits `Either::Right(record)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LateToSideOutput;

impl<O: weir_core::Data, L: weir_core::Data> LatePolicy<O, L> for LateToSideOutput {
    type Out = Either<O, L>;
    #[inline]
    fn result(result: O) -> Either<O, L> {
        Either::Left(result)
    }
    fn late(record: L) -> Option<Either<O, L>> {
        Some(Either::Right(record))
    }
}
