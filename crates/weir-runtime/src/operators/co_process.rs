//! Two-input processing over connected streams. The two inputs arrive on one gate as
//! [`Either`], so barriers align across both inputs like any other.

use std::marker::PhantomData;
use weir_core::CheckpointId;
use weir_state::{CurrentKey, Key, KeyedStateSet};

use crate::channel::Either;
use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed::open_state;
use crate::output::Output;

/// A function over two connected (non-keyed) streams.
pub trait CoProcessFunction<I1, I2, O>: Clone + Send + Sync + 'static {
    fn process1(&mut self, record: I1, out: &mut Output<O>) -> Result<(), TaskError>;
    fn process2(&mut self, record: I2, out: &mut Output<O>) -> Result<(), TaskError>;
}

#[derive(Clone)]
pub struct CoProcessOperator<F>(pub F);

impl<I1, I2, O, F> OneInputOperator<Either<I1, I2>, O> for CoProcessOperator<F>
where
    I1: Send + 'static,
    I2: Send + 'static,
    O: Clone + Send + 'static,
    F: CoProcessFunction<I1, I2, O>,
{
    fn process_batch(
        &mut self,
        batch: Vec<Either<I1, I2>>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        for record in batch {
            match record {
                Either::Left(r) => self.0.process1(r, out)?,
                Either::Right(r) => self.0.process2(r, out)?,
            }
        }
        Ok(())
    }
}

/// A function over two streams keyed by the same key type, sharing keyed state.
pub trait KeyedCoProcessFunction<K: Key, I1, I2, O>: Clone + Send + Sync + 'static {
    type State: KeyedStateSet<K>;
    fn state(&self) -> Self::State;
    fn process1(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I1,
        state: &mut Self::State,
        out: &mut Output<O>,
    ) -> Result<(), TaskError>;
    fn process2(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I2,
        state: &mut Self::State,
        out: &mut Output<O>,
    ) -> Result<(), TaskError>;
}

/// Runs a [`KeyedCoProcessFunction`].
pub struct KeyedCoProcessOperator<
    K: Key,
    I1,
    I2,
    O,
    F: KeyedCoProcessFunction<K, I1, I2, O>,
    K1,
    K2,
> {
    function: F,
    key1: K1,
    key2: K2,
    state: Option<F::State>,
    max_parallelism: u32,
    _inputs: PhantomData<fn(I1, I2)>,
    _outputs: PhantomData<fn() -> (K, O)>,
}

impl<K: Key, I1, I2, O, F, K1: Clone, K2: Clone> Clone
    for KeyedCoProcessOperator<K, I1, I2, O, F, K1, K2>
where
    F: KeyedCoProcessFunction<K, I1, I2, O>,
{
    fn clone(&self) -> Self {
        KeyedCoProcessOperator {
            function: self.function.clone(),
            key1: self.key1.clone(),
            key2: self.key2.clone(),
            state: None,
            max_parallelism: 0,
            _inputs: PhantomData,
            _outputs: PhantomData,
        }
    }
}

impl<K: Key, I1, I2, O, F, K1, K2> KeyedCoProcessOperator<K, I1, I2, O, F, K1, K2>
where
    F: KeyedCoProcessFunction<K, I1, I2, O>,
{
    pub fn new(function: F, key1: K1, key2: K2) -> Self {
        KeyedCoProcessOperator {
            function,
            key1,
            key2,
            state: None,
            max_parallelism: 0,
            _inputs: PhantomData,
            _outputs: PhantomData,
        }
    }
}

impl<K, I1, I2, O, F, K1, K2> OneInputOperator<Either<I1, I2>, O>
    for KeyedCoProcessOperator<K, I1, I2, O, F, K1, K2>
where
    K: Key,
    I1: Send + 'static,
    I2: Send + 'static,
    O: Clone + Send + 'static,
    F: KeyedCoProcessFunction<K, I1, I2, O>,
    K1: Fn(&I1) -> K + Send + 'static,
    K2: Fn(&I2) -> K + Send + 'static,
{
    fn open(&mut self, ctx: &OperatorContext, restored: RestoredState) -> Result<(), TaskError> {
        self.max_parallelism = ctx.max_parallelism;
        self.state = Some(open_state(self.function.state(), ctx, &restored)?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<I1, I2>>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        for record in batch {
            match record {
                Either::Left(r) => {
                    let key = (self.key1)(&r);
                    let current = CurrentKey::new(&key, self.max_parallelism);
                    self.function.process1(&current, r, state, out)?;
                }
                Either::Right(r) => {
                    let key = (self.key2)(&r);
                    let current = CurrentKey::new(&key, self.max_parallelism);
                    self.function.process2(&current, r, state, out)?;
                }
            }
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
