//! Keyed processing: a user function called per record with the record's key and the keyed
//! state tables of the key groups this subtask owns, and called back by the timers it
//! registers (see [`crate::timer_service`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use weir_core::{CheckpointId, Clock};
use weir_state::{CurrentKey, Key, KeyedStateSet};

use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed_backend::KeyedSlot;
use crate::output::Output;
use crate::timer_service::{Timer, TimerContext};

/// A function over a keyed stream with keyed state and timers.
///
/// `State` is a [`KeyedStateSet`]: one of `ValueState`, `MapState`, `ListState`, or a tuple of
/// them. [`state`](Self::state) creates the empty tables; the runtime owns, snapshots and
/// restores them, and passes them to every call.
///
/// Implement [`process`](Self::process), or [`process_element`](Self::process_element) to
/// register timers; [`on_timer`](Self::on_timer) is called for each timer that fires, with the
/// timer's key as the current key. Timers are keyed state: they are in every checkpoint and
/// fire exactly once.
///
/// ```
/// use weir_runtime::operators::KeyedProcessFunction;
/// use weir_runtime::timer_service::{Timer, TimerContext};
/// use weir_runtime::{Output, TaskError};
/// use weir_state::{CurrentKey, ValueState};
///
/// /// Emits a user's number of clicks once 10 s of event time passed without a click.
/// #[derive(Clone)]
/// struct SessionClicks;
///
/// impl KeyedProcessFunction<u64, (u64, i64), (u64, u64)> for SessionClicks {
///     type State = ValueState<u64, (u64, i64)>; // (clicks, last click time)
///     fn state(&self) -> Self::State {
///         ValueState::new("clicks")
///     }
///     fn process_element(&mut self, key: &CurrentKey<'_, u64>, (_, time): (u64, i64),
///                        state: &mut Self::State, ctx: &mut TimerContext<'_, u64>,
///                        _out: &mut Output<(u64, u64)>) -> Result<(), TaskError> {
///         let entry = state.get_or_insert_with(key, || (0, time));
///         ctx.delete_event_time_timer(entry.1 + 10_000);
///         *entry = (entry.0 + 1, entry.1.max(time));
///         ctx.register_event_time_timer(entry.1 + 10_000);
///         Ok(())
///     }
///     fn on_timer(&mut self, key: &CurrentKey<'_, u64>, _timer: Timer, state: &mut Self::State,
///                 _ctx: &mut TimerContext<'_, u64>, out: &mut Output<(u64, u64)>)
///                 -> Result<(), TaskError> {
///         if let Some((clicks, _)) = state.take(key) {
///             out.emit((*key.key, clicks));
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait KeyedProcessFunction<K: Key, I, O>: Clone + Send + Sync + 'static {
    type State: KeyedStateSet<K>;
    /// The empty state tables, with their names (names are how state is found on restore).
    fn state(&self) -> Self::State;
    /// Processes one record of `key`. Implement this or
    /// [`process_element`](Self::process_element).
    fn process(
        &mut self,
        _key: &CurrentKey<'_, K>,
        _record: I,
        _state: &mut Self::State,
        _out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        Err(TaskError::user(
            "a keyed process function must implement `process` or `process_element`",
        ))
    }
    /// Processes one record of `key`, with access to the current times and to timers.
    /// Defaults to [`process`](Self::process).
    fn process_element(
        &mut self,
        key: &CurrentKey<'_, K>,
        record: I,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, K>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        self.process(key, record, state, out)
    }
    /// A timer registered for `key` fired (it is already removed; it fires once).
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

/// Runs a [`KeyedProcessFunction`].
pub struct KeyedProcessOperator<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF> {
    function: F,
    key: KF,
    keyed: KeyedSlot<K, F::State>,
    /// Where processing time comes from (the system clock unless a test says otherwise).
    clock: Option<Arc<dyn Clock>>,
    _types: PhantomData<fn(I) -> (K, O)>,
}

impl<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF: Clone> Clone
    for KeyedProcessOperator<K, I, O, F, KF>
{
    fn clone(&self) -> Self {
        KeyedProcessOperator {
            function: self.function.clone(),
            key: self.key.clone(),
            keyed: KeyedSlot::default(),
            clock: self.clock.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Key, I, O, F: KeyedProcessFunction<K, I, O>, KF> KeyedProcessOperator<K, I, O, F, KF> {
    pub fn new(function: F, key: KF) -> Self {
        KeyedProcessOperator {
            function,
            key,
            keyed: KeyedSlot::default(),
            clock: None,
            _types: PhantomData,
        }
    }

    /// Reads processing time from `clock` instead of the system clock (for tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }
}

impl<K, I, O, F, KF> OneInputOperator<I, O> for KeyedProcessOperator<K, I, O, F, KF>
where
    K: Key,
    I: Send + 'static,
    O: Clone + Send + 'static,
    F: KeyedProcessFunction<K, I, O>,
    KF: Fn(&I) -> K + Send + 'static,
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

    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError> {
        let (backend, state) = self.keyed.opened()?;
        #[cfg(feature = "rocksdb")]
        if backend.uses_lsm() {
            // Every key of the batch first, so that RocksDB is read once for the batch.
            let keys: Vec<K> = batch.iter().map(&self.key).collect();
            let current: Vec<CurrentKey<'_, K>> = keys
                .iter()
                .map(|k| CurrentKey::new(k, backend.max_parallelism))
                .collect();
            state.prefetch(&current);
            for (record, key) in batch.into_iter().zip(&current) {
                let mut ctx = TimerContext::new(key, &mut backend.timers);
                self.function
                    .process_element(key, record, state, &mut ctx, out)?;
            }
            return Ok(());
        }
        for record in batch {
            let key = (self.key)(&record);
            let current = CurrentKey::new(&key, backend.max_parallelism);
            let mut ctx = TimerContext::new(&current, &mut backend.timers);
            self.function
                .process_element(&current, record, state, &mut ctx, out)?;
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
