//! Timers of keyed process functions, driven directly (no threads, a manual clock): event-time
//! timers fire when the watermark passes them, processing-time timers when the clock does, and
//! both are keyed state — a restored operator fires exactly the timers that had not fired
//! before its snapshot, each once.

mod common;

use common::{emitted, output, restored_from};
use std::sync::Arc;
use std::time::Duration;
use weir_core::{CheckpointId, ManualClock};
use weir_runtime::operator::{OneInputOperator, OperatorContext, RestoredState};
use weir_runtime::operators::{KeyedProcessFunction, KeyedProcessOperator};
use weir_runtime::timer_service::{TimeDomain, Timer, TimerContext};
use weir_runtime::{Output, TaskError};
use weir_state::{CurrentKey, ValueState};

fn ctx() -> OperatorContext {
    common::ctx("reminders")
}

/// Per key: remembers the first record's value; registers an event-time timer at the record's
/// time and a processing-time timer 1 s of clock later; emits `(key, domain, time, value)` when
/// one fires.
#[derive(Clone)]
struct Reminders;

type Fired = (u64, &'static str, i64, u64);

impl KeyedProcessFunction<u64, (u64, i64), Fired> for Reminders {
    type State = ValueState<u64, u64>;

    fn state(&self) -> Self::State {
        ValueState::new("first")
    }

    fn process_element(
        &mut self,
        key: &CurrentKey<'_, u64>,
        (k, time): (u64, i64),
        state: &mut Self::State,
        ctx: &mut TimerContext<'_, u64>,
        _out: &mut Output<Fired>,
    ) -> Result<(), TaskError> {
        state.get_or_insert_with(key, || k * 10);
        ctx.register_event_time_timer(time);
        let now = ctx.current_processing_time();
        ctx.register_processing_time_timer(now + 1_000);
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &CurrentKey<'_, u64>,
        timer: Timer,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, u64>,
        out: &mut Output<Fired>,
    ) -> Result<(), TaskError> {
        let domain = match timer.domain {
            TimeDomain::EventTime => "event",
            TimeDomain::ProcessingTime => "processing",
        };
        let value = state.get(key).copied().unwrap_or(0);
        out.emit((*key.key, domain, timer.timestamp, value));
        Ok(())
    }
}

type Operator = KeyedProcessOperator<u64, (u64, i64), Fired, Reminders, fn(&(u64, i64)) -> u64>;

fn operator(clock: &ManualClock) -> Operator {
    KeyedProcessOperator::new(Reminders, (|r: &(u64, i64)| r.0) as fn(&(u64, i64)) -> u64)
        .with_clock(Arc::new(clock.clone()))
}

#[test]
fn event_time_timers_fire_once_when_the_watermark_passes_them() {
    let clock = ManualClock::new(0);
    let mut op = operator(&clock);
    let (mut out, rx) = output();
    op.open(&ctx(), RestoredState::default()).unwrap();
    op.process_batch(vec![(1, 100), (2, 200), (1, 100), (3, 300)], &mut out)
        .unwrap();
    op.watermark(99, &mut out).unwrap();
    assert_eq!(emitted(&rx), []);
    op.watermark(200, &mut out).unwrap();
    op.watermark(250, &mut out).unwrap();
    assert_eq!(emitted(&rx), [(1, "event", 100, 10), (2, "event", 200, 20)]);
    op.watermark(i64::MAX, &mut out).unwrap();
    assert_eq!(emitted(&rx), [(3, "event", 300, 30)]);
}

#[test]
fn processing_time_timers_fire_from_the_task_loop_when_the_clock_reaches_them() {
    let clock = ManualClock::new(5_000);
    let mut op = operator(&clock);
    let (mut out, rx) = output();
    op.open(&ctx(), RestoredState::default()).unwrap();
    assert_eq!(op.next_processing_timer(), None);
    op.process_batch(vec![(7, 0)], &mut out).unwrap();
    assert_eq!(op.next_processing_timer(), Some(Duration::from_secs(1)));
    clock.advance(400);
    op.on_processing_time(&mut out).unwrap();
    assert_eq!(emitted(&rx), []);
    assert_eq!(op.next_processing_timer(), Some(Duration::from_millis(600)));
    clock.advance(600);
    op.on_processing_time(&mut out).unwrap();
    assert_eq!(emitted(&rx), [(7, "processing", 6_000, 70)]);
    assert_eq!(op.next_processing_timer(), None);
}

#[test]
fn a_restored_operator_fires_exactly_the_timers_that_had_not_fired_at_its_snapshot() {
    let clock = ManualClock::new(0);
    let mut op = operator(&clock);
    let (mut out, rx) = output();
    op.open(&ctx(), RestoredState::default()).unwrap();
    let records: Vec<(u64, i64)> = (0..200).map(|k| (k, 1_000 + k as i64)).collect();
    op.process_batch(records, &mut out).unwrap();
    op.watermark(1_099, &mut out).unwrap(); // keys 0..100 fire before the snapshot
    let before = emitted(&rx);
    assert_eq!(before.len(), 100);
    let snapshot = op.snapshot(CheckpointId(1)).unwrap();
    op.watermark(1_149, &mut out).unwrap(); // fired after the snapshot: lost in the failure

    let mut restored = operator(&clock);
    let (mut out, rx) = output();
    restored.open(&ctx(), restored_from(&snapshot)).unwrap();
    restored.watermark(i64::MAX, &mut out).unwrap();
    let mut after: Vec<Fired> = emitted(&rx);
    after.sort();
    let expected: Vec<Fired> = (100..200)
        .map(|k| (k, "event", 1_000 + k as i64, k * 10))
        .collect();
    assert_eq!(after, expected);
    // The processing-time timers of all 200 keys survived too, and fire once the clock says so.
    clock.advance(1_000);
    restored.on_processing_time(&mut out).unwrap();
    assert_eq!(emitted(&rx).len(), 200);
}
