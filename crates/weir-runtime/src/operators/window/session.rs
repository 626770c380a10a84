//! The operator of event-time session windows over a keyed stream.
//!
//! Each key's open sessions are one state entry: a short list of `(window, accumulator)`,
//! disjoint and not touching. A record at `t` opens the window `[t, t + gap)`; every session it
//! overlaps or touches is merged into it (accumulators merged), so sessions grow as records
//! arrive and two sessions merge when a record bridges them. An event-time timer at the merged
//! session's max timestamp fires it; another at its max timestamp plus the allowed lateness
//! drops it. Timers of sessions absorbed by a merge are left to fire as no-ops: a timer at `t`
//! fires the sessions whose max timestamp is `t` and drops those whose cleanup time has come,
//! whatever registered it.
//!
//! A record whose merged session is already past its allowed lateness is late (dropped or sent
//! to the side output); one whose session already fired, but is within the lateness, fires the
//! session again at once.

use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::{CheckpointId, Clock};
use weir_state::{CurrentKey, Key, ValueState};

use super::functions::{LatePolicy, WindowFunction};
use super::time_window::{EventTimeSessionWindows, TimeWindow};
use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed_backend::KeyedBackend;
use crate::output::Output;
use crate::timer_service::{fire_due, TimeDomain};

/// One open session of a key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Session<A> {
    pub window: TimeWindow,
    pub acc: A,
}

/// Session windows; see the module documentation.
pub struct SessionWindowOperator<K: Key, T, O, KF, TF, W: WindowFunction<K, T, O>, P> {
    key: KF,
    timestamp: TF,
    function: W,
    sessions: EventTimeSessionWindows,
    allowed_lateness: i64,
    clock: Option<Arc<dyn Clock>>,
    state: Option<ValueState<K, Vec<Session<W::Acc>>>>,
    backend: Option<KeyedBackend<K>>,
    results: Vec<O>,
    _types: PhantomData<fn(T) -> P>,
}

impl<K: Key, T, O, KF: Clone, TF: Clone, W: WindowFunction<K, T, O>, P> Clone
    for SessionWindowOperator<K, T, O, KF, TF, W, P>
{
    fn clone(&self) -> Self {
        SessionWindowOperator {
            key: self.key.clone(),
            timestamp: self.timestamp.clone(),
            function: self.function.clone(),
            sessions: self.sessions,
            allowed_lateness: self.allowed_lateness,
            clock: self.clock.clone(),
            state: None,
            backend: None,
            results: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<K: Key, T, O, KF, TF, W: WindowFunction<K, T, O>, P>
    SessionWindowOperator<K, T, O, KF, TF, W, P>
{
    pub fn new(key: KF, timestamp: TF, sessions: EventTimeSessionWindows, function: W) -> Self {
        SessionWindowOperator {
            key,
            timestamp,
            function,
            sessions,
            allowed_lateness: 0,
            clock: None,
            state: None,
            backend: None,
            results: Vec::new(),
            _types: PhantomData,
        }
    }

    /// Keeps sessions this long after they fired, re-firing them for late records.
    pub fn with_allowed_lateness(mut self, lateness_ms: i64) -> Self {
        self.allowed_lateness = lateness_ms.max(0);
        self
    }
}

impl<K, T, O, KF, TF, W, P> OneInputOperator<T, P::Out>
    for SessionWindowOperator<K, T, O, KF, TF, W, P>
where
    K: Key,
    T: Send + 'static,
    O: Send + 'static,
    KF: Fn(&T) -> K + Send + 'static,
    TF: Fn(&T) -> i64 + Send + 'static,
    W: WindowFunction<K, T, O>,
    P: LatePolicy<O, T>,
{
    fn open(
        &mut self,
        ctx: &OperatorContext,
        mut restored: RestoredState,
    ) -> Result<(), TaskError> {
        let (backend, state) = KeyedBackend::open(
            ValueState::new("window.sessions"),
            self.clock.clone(),
            ctx,
            &mut restored,
        )?;
        self.backend = Some(backend);
        self.state = Some(state);
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Output<P::Out>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.maintain(state)?;
        let lateness = self.allowed_lateness;
        for record in batch {
            let watermark = backend.timers.watermark();
            let window = self.sessions.window_of((self.timestamp)(&record));
            let key = (self.key)(&record);
            let current = CurrentKey::new(&key, backend.max_parallelism);
            let existing = state.get(&current).map_or(&[][..], Vec::as_slice);
            let merged = existing
                .iter()
                .filter(|s| s.window.intersects(&window))
                .fold(window, |w, s| w.cover(&s.window));
            if merged.max_timestamp() + lateness <= watermark {
                if let Some(late) = P::late(record) {
                    out.emit(late);
                }
                continue;
            }
            let sessions = state.get_or_insert_with(&current, Vec::new);
            let mut acc = self.function.create();
            self.function.add(&mut acc, record);
            let mut i = 0;
            while i < sessions.len() {
                if sessions[i].window.intersects(&merged) {
                    let absorbed = sessions.swap_remove(i);
                    self.function.merge(&mut acc, absorbed.acc);
                } else {
                    i += 1;
                }
            }
            sessions.push(Session {
                window: merged,
                acc,
            });
            let timers = &mut backend.timers;
            if merged.max_timestamp() > watermark {
                timers.register_in_group(
                    TimeDomain::EventTime,
                    &key,
                    current.key_group,
                    merged.max_timestamp(),
                );
            } else {
                let last = sessions.last().expect("just pushed");
                self.function
                    .fire(&key, merged, &[&last.acc], &mut self.results)?;
                for result in self.results.drain(..) {
                    out.emit(P::result(result));
                }
            }
            timers.register_in_group(
                TimeDomain::EventTime,
                &key,
                current.key_group,
                merged.max_timestamp() + lateness,
            );
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, out: &mut Output<P::Out>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.timers.advance_watermark(watermark);
        let lateness = self.allowed_lateness;
        let function = &mut self.function;
        let results = &mut self.results;
        fire_due(
            &mut backend.timers,
            TimeDomain::EventTime,
            watermark,
            |_, key, timer| {
                let t = timer.timestamp;
                let Some(sessions) = state.get(key) else {
                    return Ok(());
                };
                let due = sessions.iter().any(|s| s.window.max_timestamp() == t);
                let done = sessions
                    .iter()
                    .any(|s| s.window.max_timestamp() + lateness <= t);
                for s in sessions.iter().filter(|s| s.window.max_timestamp() == t) {
                    function.fire(key.key, s.window, &[&s.acc], results)?;
                }
                for result in results.drain(..) {
                    out.emit(P::result(result));
                }
                if done || (due && lateness == 0) {
                    state.update(key, |sessions| {
                        let mut sessions = sessions?;
                        sessions.retain(|s| s.window.max_timestamp() + lateness > t);
                        (!sessions.is_empty()).then_some(sessions)
                    });
                }
                Ok(())
            },
        )
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        match (self.backend.as_mut(), self.state.as_mut()) {
            (Some(backend), Some(state)) => backend.snapshot(checkpoint, state),
            _ => Ok(OperatorSnapshot::default()),
        }
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        if let (Some(backend), Some(state)) = (self.backend.as_mut(), self.state.as_mut()) {
            backend.complete(checkpoint, state);
        }
        Ok(())
    }

    fn notify_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        if let Some(backend) = self.backend.as_mut() {
            backend.abort(checkpoint);
        }
        Ok(())
    }
}
