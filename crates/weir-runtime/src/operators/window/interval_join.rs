//! The interval join of two keyed streams: a left record at `t` joins every right record of the
//! same key at `t + lower ..= t + upper` (Flink's `IntervalJoinOperator`).
//!
//! Both inputs arrive at one operator as [`Either`]. Each key's buffered records of both sides
//! are one state entry; a record joins the other side's buffer, then waits in its own buffer for
//! as long as a future record of the other side could still match it: a left record at `t`
//! until the watermark passes `t + upper`, a right record at `t` until it passes `t - lower`.
//! An event-time timer then drops it. Records behind the watermark are late and dropped, as in
//! Flink.
//!
//! Invariant: each matching pair is emitted exactly once — by whichever of its two records
//! arrives second.

use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::{CheckpointId, Clock};
use weir_state::{CurrentKey, Key, Value, ValueState};

use crate::channel::Either;
use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed_backend::KeyedBackend;
use crate::output::Output;
use crate::timer_service::{fire_due, TimeDomain};

/// One key's buffered records, with their event times.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntervalBuffers<A, B> {
    pub left: Vec<(i64, A)>,
    pub right: Vec<(i64, B)>,
}

/// An interval join; see the module documentation.
pub struct IntervalJoinOperator<K, A, B, O, KA, KB, TA, TB, F> {
    key_left: KA,
    key_right: KB,
    time_left: TA,
    time_right: TB,
    lower: i64,
    upper: i64,
    join: F,
    clock: Option<Arc<dyn Clock>>,
    state: Option<ValueState<K, IntervalBuffers<A, B>>>,
    backend: Option<KeyedBackend<K>>,
    _out: PhantomData<fn() -> O>,
}

impl<K, A, B, O, KA: Clone, KB: Clone, TA: Clone, TB: Clone, F: Clone> Clone
    for IntervalJoinOperator<K, A, B, O, KA, KB, TA, TB, F>
{
    fn clone(&self) -> Self {
        IntervalJoinOperator {
            key_left: self.key_left.clone(),
            key_right: self.key_right.clone(),
            time_left: self.time_left.clone(),
            time_right: self.time_right.clone(),
            lower: self.lower,
            upper: self.upper,
            join: self.join.clone(),
            clock: self.clock.clone(),
            state: None,
            backend: None,
            _out: PhantomData,
        }
    }
}

impl<K, A, B, O, KA, KB, TA, TB, F> IntervalJoinOperator<K, A, B, O, KA, KB, TA, TB, F> {
    /// Joins left records at `t` with right records at `t + lower ..= t + upper` (milliseconds;
    /// `lower <= upper`, either may be negative).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key_left: KA,
        key_right: KB,
        time_left: TA,
        time_right: TB,
        lower: i64,
        upper: i64,
        join: F,
    ) -> Self {
        IntervalJoinOperator {
            key_left,
            key_right,
            time_left,
            time_right,
            lower,
            upper,
            join,
            clock: None,
            state: None,
            backend: None,
            _out: PhantomData,
        }
    }
}

impl<K, A, B, O, KA, KB, TA, TB, F> OneInputOperator<Either<A, B>, O>
    for IntervalJoinOperator<K, A, B, O, KA, KB, TA, TB, F>
where
    K: Key,
    A: Value,
    B: Value,
    O: Clone + Send + 'static,
    KA: Fn(&A) -> K + Send + 'static,
    KB: Fn(&B) -> K + Send + 'static,
    TA: Fn(&A) -> i64 + Send + 'static,
    TB: Fn(&B) -> i64 + Send + 'static,
    F: FnMut(&A, &B) -> O + Send + 'static,
{
    fn open(
        &mut self,
        ctx: &OperatorContext,
        mut restored: RestoredState,
    ) -> Result<(), TaskError> {
        let (backend, state) = KeyedBackend::open(
            ValueState::new("interval-join.buffers"),
            self.clock.clone(),
            ctx,
            &mut restored,
        )?;
        self.backend = Some(backend);
        self.state = Some(state);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Output<O>,
    ) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.maintain(state)?;
        let (lower, upper) = (self.lower, self.upper);
        for record in batch {
            let watermark = backend.timers.watermark();
            match record {
                Either::Left(a) => {
                    let t = (self.time_left)(&a);
                    if t < watermark {
                        continue; // late
                    }
                    let key = (self.key_left)(&a);
                    let current = CurrentKey::new(&key, backend.max_parallelism);
                    if let Some(buffers) = state.get(&current) {
                        for (rt, b) in &buffers.right {
                            if t + lower <= *rt && *rt <= t + upper {
                                out.emit((self.join)(&a, b));
                            }
                        }
                    }
                    let expiry = t.saturating_add(upper).saturating_add(1);
                    if expiry > watermark {
                        state.get_or_insert_with(&current, empty).left.push((t, a));
                        backend.timers.register_in_group(
                            TimeDomain::EventTime,
                            &key,
                            current.key_group,
                            expiry,
                        );
                    }
                }
                Either::Right(b) => {
                    let t = (self.time_right)(&b);
                    if t < watermark {
                        continue; // late
                    }
                    let key = (self.key_right)(&b);
                    let current = CurrentKey::new(&key, backend.max_parallelism);
                    if let Some(buffers) = state.get(&current) {
                        for (lt, a) in &buffers.left {
                            if *lt + lower <= t && t <= *lt + upper {
                                out.emit((self.join)(a, &b));
                            }
                        }
                    }
                    let expiry = t.saturating_sub(lower).saturating_add(1);
                    if expiry > watermark {
                        state.get_or_insert_with(&current, empty).right.push((t, b));
                        backend.timers.register_in_group(
                            TimeDomain::EventTime,
                            &key,
                            current.key_group,
                            expiry,
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, _out: &mut Output<O>) -> Result<(), TaskError> {
        let state = self.state.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.timers.advance_watermark(watermark);
        let (lower, upper) = (self.lower, self.upper);
        fire_due(
            &mut backend.timers,
            TimeDomain::EventTime,
            watermark,
            |_, key, timer| {
                let now = timer.timestamp;
                state.update(key, |buffers| {
                    let mut buffers = buffers?;
                    buffers
                        .left
                        .retain(|(t, _)| t.saturating_add(upper).saturating_add(1) > now);
                    buffers
                        .right
                        .retain(|(t, _)| t.saturating_sub(lower).saturating_add(1) > now);
                    (!buffers.left.is_empty() || !buffers.right.is_empty()).then_some(buffers)
                });
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

fn empty<A, B>() -> IntervalBuffers<A, B> {
    IntervalBuffers {
        left: Vec::new(),
        right: Vec::new(),
    }
}
