//! Keyed processing: a user function called per record with the record's key and the keyed
//! state tables of the key groups this subtask owns.

use std::marker::PhantomData;
use weir_core::CheckpointId;
use weir_state::{CurrentKey, Key, KeyedStateSet};

use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::output::Output;

/// A function over a keyed stream with keyed state.
///
/// `State` is a [`KeyedStateSet`]: one of `ValueState`, `MapState`, `ListState`, or a tuple of
/// them. [`state`](Self::state) creates the empty tables; the runtime owns, snapshots and
/// restores them, and passes them to every call.
pub trait KeyedProcessFunction<K: Key, I, O>: Clone + Send + Sync + 'static {
    type State: KeyedStateSet<K>;
    /// The empty state tables, with their names (names are how state is found on restore).
    fn state(&self) -> Self::State;
    fn process(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I,
        state: &mut Self::State,
        out: &mut Output<O>,
    ) -> Result<(), TaskError>;
}

/// Runs a [`KeyedProcessFunction`].
pub struct KeyedProcessOperator<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF> {
    function: F,
    key: KF,
    state: Option<F::State>,
    max_parallelism: u32,
    _types: PhantomData<fn(I) -> (K, O)>,
}

impl<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF: Clone> Clone
    for KeyedProcessOperator<K, I, O, F, KF>
{
    fn clone(&self) -> Self {
        KeyedProcessOperator {
            function: self.function.clone(),
            key: self.key.clone(),
            state: None,
            max_parallelism: self.max_parallelism,
            _types: PhantomData,
        }
    }
}

impl<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF> KeyedProcessOperator<K, I, O, F, KF> {
    pub fn new(function: F, key: KF) -> Self {
        KeyedProcessOperator {
            function,
            key,
            state: None,
            max_parallelism: 0,
            _types: PhantomData,
        }
    }
}

/// Creates a function's state tables for this subtask and loads restored state into them.
pub(crate) fn open_state<K: Key, S: KeyedStateSet<K>>(
    mut state: S,
    ctx: &OperatorContext,
    restored: &RestoredState,
) -> Result<S, TaskError> {
    let mut names = Vec::new();
    state.names(&mut names);
    let mut sorted = names.clone();
    sorted.sort();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(TaskError::user(format!(
            "operator '{}' declares keyed state '{}' twice",
            ctx.uid, w[0]
        )));
    }
    state.init(ctx.max_parallelism, ctx.key_groups);
    if let Some(reader) = &restored.keyed {
        state.restore(reader)?;
    }
    Ok(state)
}

impl<K, I, O, F, KF> OneInputOperator<I, O> for KeyedProcessOperator<K, I, O, F, KF>
where
    K: Key,
    I: Send + 'static,
    O: Clone + Send + 'static,
    F: KeyedProcessFunction<K, I, O>,
    KF: Fn(&I) -> K + Send + 'static,
{
    fn open(&mut self, ctx: &OperatorContext, restored: RestoredState) -> Result<(), TaskError> {
        self.max_parallelism = ctx.max_parallelism;
        self.state = Some(open_state(self.function.state(), ctx, &restored)?);
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        for record in batch {
            let key = (self.key)(&record);
            let current = CurrentKey::new(&key, self.max_parallelism);
            self.function.process(&current, record, state, out)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        let mut keyed = Vec::new();
        if let Some(state) = self.state.as_mut() {
            state.snapshot(&mut keyed);
        }
        Ok(OperatorSnapshot {
            keyed,
            operator: None,
        })
    }
}
