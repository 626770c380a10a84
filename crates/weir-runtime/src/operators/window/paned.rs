//! The operator of tumbling and sliding event-time windows over a keyed stream.
//!
//! State is one entry per key and *pane* (see [`PaneGeometry`]): a record updates the single
//! pane it falls in, however many windows that pane belongs to, so sliding windows share their
//! panes' aggregates instead of repeating per-record work in every window. Each entry is keyed
//! by `(key, pane start)` in the key's key group: a checkpoint writes only the panes that
//! changed since the last one, and finished panes are removed.
//!
//! Timers (keyed state too) drive firing, one per key at a time however many windows overlap:
//! a new pane registers an event-time timer at the max timestamp of its first window that has
//! not fired; when the timer at `t` fires, the window ending at `t + 1` fires if it holds any
//! pane of the key, and registers the timer of the next window if one of its panes lies in it
//! too. Panes whose last window (plus the allowed lateness) ended at `t` are then dropped; with
//! an allowed lateness, a new pane also registers a timer for its cleanup.
//!
//! Lateness follows Flink: a record is late for a window once the watermark reached the window's
//! max timestamp plus the allowed lateness. A record late for every window of its pane goes to
//! the late-data policy (dropped or side output); a record that arrives after some of its
//! windows fired, but within their allowed lateness, fires those windows again at once with the
//! record included.
//!
//! Invariant: a window fires on time exactly once per key — from the one timer at its max
//! timestamp — and late firings happen only within the allowed lateness.

use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::{CheckpointId, Clock};
use weir_state::{key_group_of, CurrentKey, Key, ValueState};

use super::functions::{LatePolicy, WindowFunction};
use super::time_window::{PaneGeometry, TimeWindow};
use crate::error::TaskError;
use crate::operator::{OneInputOperator, OperatorContext, OperatorSnapshot, RestoredState};
use crate::operators::keyed_backend::KeyedBackend;
use crate::output::Output;
use crate::timer_service::{fire_due, TimeDomain, TimedKey, TimerService};

/// The state of the panes: `(key, pane start) → accumulator`.
type Panes<K, A> = ValueState<TimedKey<K>, A>;

/// Tumbling or sliding windows; see the module documentation.
pub struct PanedWindowOperator<K: Key, T, O, KF, TF, W: WindowFunction<K, T, O>, P> {
    key: KF,
    timestamp: TF,
    function: W,
    geometry: PaneGeometry,
    allowed_lateness: i64,
    clock: Option<Arc<dyn Clock>>,
    panes: Option<Panes<K, W::Acc>>,
    backend: Option<KeyedBackend<K>>,
    results: Vec<O>,
    _types: PhantomData<fn(T) -> P>,
}

impl<K: Key, T, O, KF: Clone, TF: Clone, W: WindowFunction<K, T, O>, P> Clone
    for PanedWindowOperator<K, T, O, KF, TF, W, P>
{
    fn clone(&self) -> Self {
        PanedWindowOperator {
            key: self.key.clone(),
            timestamp: self.timestamp.clone(),
            function: self.function.clone(),
            geometry: self.geometry,
            allowed_lateness: self.allowed_lateness,
            clock: self.clock.clone(),
            panes: None,
            backend: None,
            results: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<K: Key, T, O, KF, TF, W: WindowFunction<K, T, O>, P>
    PanedWindowOperator<K, T, O, KF, TF, W, P>
{
    /// Windows of `geometry` over records keyed by `key` at event time `timestamp`.
    pub fn new(key: KF, timestamp: TF, geometry: PaneGeometry, function: W) -> Self {
        PanedWindowOperator {
            key,
            timestamp,
            function,
            geometry,
            allowed_lateness: 0,
            clock: None,
            panes: None,
            backend: None,
            results: Vec::new(),
            _types: PhantomData,
        }
    }

    /// Keeps windows this long after they fired, re-firing them for late records.
    pub fn with_allowed_lateness(mut self, lateness_ms: i64) -> Self {
        self.allowed_lateness = lateness_ms.max(0);
        self
    }
}

/// Fires the window ending at `end` for `key` if it holds any pane; returns whether any of its
/// panes also lies in the next window.
#[allow(clippy::too_many_arguments)]
fn fire_window<K: Key, T, O, W: WindowFunction<K, T, O>>(
    function: &mut W,
    panes: &Panes<K, W::Acc>,
    geometry: &PaneGeometry,
    key: &K,
    key_group: u32,
    end: i64,
    results: &mut Vec<O>,
) -> Result<bool, TaskError> {
    let mut held = Vec::with_capacity((geometry.size / geometry.pane) as usize);
    let next_start = end - geometry.size + geometry.slide;
    let mut continues = false;
    for start in geometry.panes_of_window(end) {
        let entry = TimedKey {
            key: key.clone(),
            time: start,
        };
        if let Some(acc) = panes.get(&CurrentKey {
            key: &entry,
            key_group,
        }) {
            held.push(acc);
            continues |= start >= next_start;
        }
    }
    if held.is_empty() {
        return Ok(false);
    }
    let window = TimeWindow::new(end - geometry.size, end);
    function.fire(key, window, &held, results)?;
    Ok(continues)
}

fn emit_results<O, L, P: LatePolicy<O, L>>(results: &mut Vec<O>, out: &mut Output<P::Out>) {
    for result in results.drain(..) {
        out.emit(P::result(result));
    }
}

impl<K, T, O, KF, TF, W, P> OneInputOperator<T, P::Out>
    for PanedWindowOperator<K, T, O, KF, TF, W, P>
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
        let (backend, panes) = KeyedBackend::open(
            Panes::<K, W::Acc>::new("window.panes"),
            self.clock.clone(),
            ctx,
            &mut restored,
        )?;
        self.backend = Some(backend);
        self.panes = Some(panes);
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Output<P::Out>) -> Result<(), TaskError> {
        let panes = self.panes.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.maintain(panes)?;
        let g = self.geometry;
        let lateness = self.allowed_lateness;
        for record in batch {
            let ts = (self.timestamp)(&record);
            let watermark = backend.timers.watermark();
            let pane = g.pane_start(ts);
            if g.last_end(pane) - 1 + lateness <= watermark {
                if let Some(late) = P::late(record) {
                    out.emit(late);
                }
                continue;
            }
            let key = (self.key)(&record);
            let key_group = key_group_of(&key, backend.max_parallelism);
            let entry = TimedKey {
                key: key.clone(),
                time: pane,
            };
            let current = CurrentKey {
                key: &entry,
                key_group,
            };
            let mut created = false;
            let acc = panes.get_or_insert_with(&current, || {
                created = true;
                self.function.create()
            });
            self.function.add(acc, record);
            if created {
                register_pane_timers(&mut backend.timers, &g, lateness, &key, key_group, pane);
            }
            if g.first_end(pane) - 1 <= watermark {
                // Some windows of the pane already fired: fire again those still within the
                // allowed lateness.
                for window in g.windows_of_pane(pane) {
                    let fired = window.max_timestamp() <= watermark;
                    if fired && window.max_timestamp() + lateness > watermark {
                        let function = &mut self.function;
                        fire_window(
                            function,
                            panes,
                            &g,
                            &key,
                            key_group,
                            window.end,
                            &mut self.results,
                        )?;
                    }
                }
                emit_results::<O, T, P>(&mut self.results, out);
            }
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: i64, out: &mut Output<P::Out>) -> Result<(), TaskError> {
        let panes = self.panes.as_mut().expect("opened before processing");
        let backend = self.backend.as_mut().expect("opened before processing");
        backend.timers.advance_watermark(watermark);
        let g = self.geometry;
        let lateness = self.allowed_lateness;
        let function = &mut self.function;
        let results = &mut self.results;
        fire_due(
            &mut backend.timers,
            TimeDomain::EventTime,
            watermark,
            |timers, key, timer| {
                let end = timer.timestamp + 1;
                if g.is_window_end(end)
                    && fire_window(function, panes, &g, key.key, key.key_group, end, results)?
                {
                    // Invariant: the windows of a key fire in a chain, each registering the
                    // next while one of its panes lies in it.
                    timers.register_in_group(
                        TimeDomain::EventTime,
                        key.key,
                        key.key_group,
                        timer.timestamp + g.slide,
                    );
                }
                emit_results::<O, T, P>(results, out);
                // The panes whose last window, plus the allowed lateness, ends here are done.
                for start in g.panes_last_in(end - lateness) {
                    let entry = TimedKey {
                        key: key.key.clone(),
                        time: start,
                    };
                    panes.clear(&CurrentKey {
                        key: &entry,
                        key_group: key.key_group,
                    });
                }
                Ok(())
            },
        )
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorSnapshot, TaskError> {
        match (self.backend.as_mut(), self.panes.as_mut()) {
            (Some(backend), Some(panes)) => backend.snapshot(checkpoint, panes),
            _ => Ok(OperatorSnapshot::default()),
        }
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        if let (Some(backend), Some(panes)) = (self.backend.as_mut(), self.panes.as_mut()) {
            backend.complete(checkpoint, panes);
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

/// Registers the timers of a new pane: its first window that has not fired yet (the later ones
/// follow in a chain), and with an allowed lateness its cleanup.
fn register_pane_timers<K: Key>(
    timers: &mut TimerService<K>,
    g: &PaneGeometry,
    lateness: i64,
    key: &K,
    key_group: u32,
    pane: i64,
) {
    let watermark = timers.watermark();
    if let Some(window) = g
        .windows_of_pane(pane)
        .find(|w| w.max_timestamp() > watermark)
    {
        timers.register_in_group(
            TimeDomain::EventTime,
            key,
            key_group,
            window.max_timestamp(),
        );
    }
    if lateness > 0 {
        let cleanup = g.last_end(pane) - 1 + lateness;
        timers.register_in_group(TimeDomain::EventTime, key, key_group, cleanup);
    }
}
