//! Running aggregations on keyed streams — `reduce`, `sum`, `count` — as keyed process
//! functions over one `ValueState` each.

use weir_runtime::operators::KeyedProcessFunction;
use weir_runtime::{Output, TaskError};
use weir_state::{CurrentKey, Key, Value, ValueState};

/// A running reduction per key.
#[derive(Clone)]
pub struct Reduce<F>(F);

impl<F> Reduce<F> {
    pub fn new(f: F) -> Reduce<F> {
        Reduce(f)
    }
}

impl<K, T, F> KeyedProcessFunction<K, T, T> for Reduce<F>
where
    K: Key,
    T: Value,
    F: Fn(&T, T) -> T + Clone + Send + Sync + 'static,
{
    type State = ValueState<K, T>;
    fn state(&self) -> Self::State {
        ValueState::new("reduce")
    }
    fn process(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: T,
        state: &mut Self::State,
        out: &mut Output<T>,
    ) -> Result<(), TaskError> {
        let next = match state.get_mut(key) {
            Some(acc) => {
                *acc = (self.0)(acc, record);
                acc.clone()
            }
            None => {
                state.set(key, record.clone());
                record
            }
        };
        out.emit(next);
        Ok(())
    }
}

/// A running sum per key.
#[derive(Clone)]
pub struct Sum<F>(F);

impl<F> Sum<F> {
    pub fn new(f: F) -> Sum<F> {
        Sum(f)
    }
}

impl<K, T, S, F> KeyedProcessFunction<K, T, (K, S)> for Sum<F>
where
    K: Key,
    T: Send + 'static,
    S: Value + Copy + Default + std::ops::Add<Output = S>,
    F: Fn(&T) -> S + Clone + Send + Sync + 'static,
{
    type State = ValueState<K, S>;
    fn state(&self) -> Self::State {
        ValueState::new("sum")
    }
    fn process(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: T,
        state: &mut Self::State,
        out: &mut Output<(K, S)>,
    ) -> Result<(), TaskError> {
        let acc = state.get_or_insert_with(key, S::default);
        *acc = *acc + (self.0)(&record);
        let sum = *acc;
        out.emit((key.key.clone(), sum));
        Ok(())
    }
}

/// A running count per key.
#[derive(Clone, Copy)]
pub struct Count;

impl<K, T> KeyedProcessFunction<K, T, (K, u64)> for Count
where
    K: Key,
    T: Send + 'static,
{
    type State = ValueState<K, u64>;
    fn state(&self) -> Self::State {
        ValueState::new("count")
    }
    fn process(
        &mut self,
        key: &CurrentKey<'_, K>,
        _record: T,
        state: &mut Self::State,
        out: &mut Output<(K, u64)>,
    ) -> Result<(), TaskError> {
        let count = state.get_or_insert_with(key, || 0);
        *count += 1;
        let n = *count;
        out.emit((key.key.clone(), n));
        Ok(())
    }
}
