//! Two-input processing over connected streams. The two inputs arrive on one gate as
//! [`Either`], so barriers align across both inputs like any other.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use weir_core::{CheckpointId, Clock};
use weir_state::{CurrentKey, Key, KeyedStateSet};

use crate::channel::Either;
use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed_backend::KeyedSlot;
use crate::output::Output;
use crate::timer_service::{Timer, TimerContext};

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

/// A function over two streams keyed by the same key type, sharing keyed state and timers.
///
/// Implement `process1`/`process2`, or `process_element1`/`process_element2` to use timers
/// (see [`KeyedProcessFunction`](crate::operators::KeyedProcessFunction)); the watermark is the
/// minimum of both inputs'.
pub trait KeyedCoProcessFunction<K: Key, I1, I2, O>: Clone + Send + Sync + 'static {
    type State: KeyedStateSet<K>;
    fn state(&self) -> Self::State;
    fn process1(
        &mut self,
        _key: &CurrentKey<'_, K>,
        _record: I1,
        _state: &mut Self::State,
        _out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        Err(TaskError::user(
            "a keyed co-process function must implement `process1` or `process_element1`",
        ))
    }
    fn process2(
        &mut self,
        _key: &CurrentKey<'_, K>,
        _record: I2,
        _state: &mut Self::State,
        _out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        Err(TaskError::user(
            "a keyed co-process function must implement `process2` or `process_element2`",
        ))
    }
    /// A record of the first input, with access to times and timers.
    fn process_element1(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I1,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, K>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        self.process1(key, record, state, out)
    }
    /// A record of the second input, with access to times and timers.
    fn process_element2(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I2,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, K>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        self.process2(key, record, state, out)
    }
    /// A timer registered for `key` fired.
    fn on_timer(
        &mut self,
        _key: &CurrentKey<'_, K>,
        _timer: Timer,
        _state: &mut Self::State,
        _ctx: &mut TimerContext<'_, K>,
        _out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
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
    keyed: KeyedSlot<K, F::State>,
    clock: Option<Arc<dyn Clock>>,
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
            keyed: KeyedSlot::default(),
            clock: self.clock.clone(),
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
            keyed: KeyedSlot::default(),
            clock: None,
            _inputs: PhantomData,
            _outputs: PhantomData,
        }
    }

    /// Reads processing time from `clock` instead of the system clock (for tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
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
    fn open(
        &mut self,
        ctx: &OperatorContext,
        mut restored: RestoredState,
    ) -> Result<(), TaskError> {
        self.keyed.open(
            self.function.state(),
            self.clock.clone(),
            ctx,
            &mut restored,
        )
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<I1, I2>>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        let (backend, state) = self.keyed.opened()?;
        for record in batch {
            match record {
                Either::Left(r) => {
                    let key = (self.key1)(&r);
                    let current = CurrentKey::new(&key, backend.max_parallelism);
                    let mut ctx = TimerContext::new(&current, &mut backend.timers);
                    self.function
                        .process_element1(&current, r, state, &mut ctx, out)?;
                }
                Either::Right(r) => {
                    let key = (self.key2)(&r);
                    let current = CurrentKey::new(&key, backend.max_parallelism);
                    let mut ctx = TimerContext::new(&current, &mut backend.timers);
                    self.function
                        .process_element2(&current, r, state, &mut ctx, out)?;
                }
            }
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, out: &mut Output<O>) -> Result<(), TaskError> {
        let (backend, state) = self.keyed.opened()?;
        let function = &mut self.function;
        backend.advance_watermark(watermark, |key, timer, ctx| {
            function.on_timer(key, timer, state, ctx, out)
        })
    }

    fn next_processing_timer(&self) -> Option<Duration> {
        self.keyed.next_processing_timer()
    }

    fn on_processing_time(&mut self, out: &mut Output<O>) -> Result<(), TaskError> {
        let (backend, state) = self.keyed.opened()?;
        let function = &mut self.function;
        backend.fire_processing_timers(|key, timer, ctx| {
            function.on_timer(key, timer, state, ctx, out)
        })
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        self.keyed.snapshot(checkpoint)
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.keyed.complete(checkpoint);
        Ok(())
    }

    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.keyed.abort(checkpoint);
        Ok(())
    }
}
