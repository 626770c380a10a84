//! Keyed processing: a user function called per record with the record's key and the keyed
//! state tables of the key groups this subtask owns, and called back by the timers it
//! registers (see [`crate::timer_service`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use weir_core::{CheckpointId, Clock, SystemClock};
use weir_state::{CurrentKey, IncrementalBase, Key, KeyedStateSet};

use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::output::Output;
use crate::timer_service::{
    check_reserved_names, fire_due, TimeDomain, Timer, TimerContext, TimerService,
};

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
    state: Option<F::State>,
    timers: Option<TimerService<K>>,
    /// Where processing time comes from (the system clock unless a test says otherwise).
    clock: Option<Arc<dyn Clock>>,
    /// What the last completed checkpoint holds of this subtask's keyed state.
    base: IncrementalBase,
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
            timers: None,
            clock: self.clock.clone(),
            base: IncrementalBase::new(),
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
            timers: None,
            clock: None,
            base: IncrementalBase::new(),
            max_parallelism: 0,
            _types: PhantomData,
        }
    }

    /// Reads processing time from `clock` instead of the system clock (for tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }
}

/// Checkpoint `checkpoint` completed: it may become the incremental base, and the tables of
/// `state` and the timers forget the removals no later delta needs.
pub(crate) fn complete<K: Key, SK: Key, S: KeyedStateSet<SK>>(
    base: &IncrementalBase,
    checkpoint: CheckpointId,
    state: Option<&mut S>,
    timers: Option<&mut TimerService<K>>,
) {
    base.complete(checkpoint.0);
    let confirmed_epoch = |table: &str| base.confirmed_epoch(table);
    if let Some(state) = state {
        state.forget_removals(&confirmed_epoch);
    }
    if let Some(timers) = timers {
        timers.forget_removals(&confirmed_epoch);
    }
}

/// Creates the timer service of a keyed operator subtask and loads its restored timers.
pub(crate) fn open_timers<K: Key>(
    clock: Option<Arc<dyn Clock>>,
    ctx: &OperatorContext,
    restored: &RestoredState,
) -> Result<TimerService<K>, TaskError> {
    let clock = clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
    let mut timers = TimerService::new(clock);
    timers.init(ctx.max_parallelism, ctx.key_groups);
    if let Some(reader) = &restored.keyed {
        timers.restore(reader)?;
    }
    Ok(timers)
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

/// The incremental base of a restored subtask: the chains of the checkpoint it restored from
/// (empty on a fresh start, or after a restore from a full checkpoint).
pub(crate) fn restored_base(ctx: &OperatorContext, restored: &RestoredState) -> IncrementalBase {
    match &restored.keyed {
        Some(reader) => IncrementalBase::restored(reader, ctx.key_groups),
        None => IncrementalBase::new(),
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
    fn open(&mut self, ctx: &OperatorContext, restored: RestoredState) -> Result<(), TaskError> {
        self.max_parallelism = ctx.max_parallelism;
        let state = self.function.state();
        check_reserved_names(&state, &ctx.uid)?;
        self.state = Some(open_state(state, ctx, &restored)?);
        self.timers = Some(open_timers(self.clock.clone(), ctx, &restored)?);
        self.base = restored_base(ctx, &restored);
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<I>, out: &mut Output<O>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let timers = self.timers.as_mut().expect("opened before processing");
        for record in batch {
            let key = (self.key)(&record);
            let current = CurrentKey::new(&key, self.max_parallelism);
            let mut ctx = TimerContext::new(&current, timers);
            self.function
                .process_element(&current, record, state, &mut ctx, out)?;
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, out: &mut Output<O>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let timers = self.timers.as_mut().expect("opened before processing");
        timers.advance_watermark(watermark);
        let function = &mut self.function;
        fire_due(
            timers,
            TimeDomain::EventTime,
            watermark,
            |timers, key, timer| {
                let mut ctx = TimerContext::new(key, timers);
                function.on_timer(key, timer, state, &mut ctx, out)
            },
        )
    }

    fn next_processing_timer(&self) -> Option<Duration> {
        self.timers.as_ref()?.until_next_processing_timer()
    }

    fn on_processing_time(&mut self, out: &mut Output<O>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let timers = self.timers.as_mut().expect("opened before processing");
        let now = timers.processing_time();
        let function = &mut self.function;
        fire_due(
            timers,
            TimeDomain::ProcessingTime,
            now,
            |timers, key, timer| {
                let mut ctx = TimerContext::new(key, timers);
                function.on_timer(key, timer, state, &mut ctx, out)
            },
        )
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        let mut keyed = Vec::new();
        if let Some(state) = self.state.as_mut() {
            state.snapshot(&mut keyed);
        }
        if let Some(timers) = self.timers.as_mut() {
            timers.snapshot(&mut keyed);
        }
        let plan = self.base.plan(checkpoint.0, &keyed);
        Ok(OperatorSnapshot {
            keyed,
            operator: None,
            incremental: Some(plan),
        })
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        complete(
            &self.base,
            checkpoint,
            self.state.as_mut(),
            self.timers.as_mut(),
        );
        Ok(())
    }

    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        self.base.abort(checkpoint.0);
        Ok(())
    }
}
