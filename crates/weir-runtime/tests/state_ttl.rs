//! State time-to-live in a keyed process function, driven directly with a manual clock: the
//! runtime hands the state the operator's processing time before each batch, so a key not
//! updated for the TTL starts over, before and after a restore (the stamps are in the
//! snapshot). Run once per state backend, like the timer tests.

mod common;

use common::{emitted, output, restored_from};
use std::sync::Arc;
use std::time::Duration;
use weir_core::{CheckpointId, ManualClock};
use weir_runtime::operator::{OneInputOperator, OperatorContext, RestoredState};
use weir_runtime::operators::{KeyedProcessFunction, KeyedProcessOperator};
use weir_runtime::timer_service::{Timer, TimerContext};
use weir_runtime::{Output, TaskError};
use weir_state::{CurrentKey, StateTtlConfig, TtlValueState};

fn ctx() -> OperatorContext {
    common::ctx("expiring-counts")
}

/// Counts records per key in state that expires a second after the key's last record;
/// emits `(key, count)` for every record.
#[derive(Clone)]
struct ExpiringCounts;

impl KeyedProcessFunction<u64, u64, (u64, u64)> for ExpiringCounts {
    type State = TtlValueState<u64, u64>;

    fn state(&self) -> Self::State {
        TtlValueState::new("counts", StateTtlConfig::new(Duration::from_secs(1)))
    }

    fn process_element(
        &mut self,
        key: &CurrentKey<'_, u64>,
        _record: u64,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, u64>,
        out: &mut Output<(u64, u64)>,
    ) -> Result<(), TaskError> {
        let count = state.get_or_insert_with(key, || 0);
        *count += 1;
        out.emit((*key.key, *count));
        Ok(())
    }

    fn on_timer(
        &mut self,
        _key: &CurrentKey<'_, u64>,
        _timer: Timer,
        _state: &mut Self::State,
        _ctx: &mut TimerContext<'_, u64>,
        _out: &mut Output<(u64, u64)>,
    ) -> Result<(), TaskError> {
        Ok(())
    }
}

type Operator = KeyedProcessOperator<u64, u64, (u64, u64), ExpiringCounts, fn(&u64) -> u64>;

fn operator(clock: &ManualClock) -> Operator {
    KeyedProcessOperator::new(ExpiringCounts, (|k: &u64| *k) as fn(&u64) -> u64)
        .with_clock(Arc::new(clock.clone()))
}

#[test]
fn a_key_not_updated_for_its_ttl_starts_over_before_and_after_a_restore() {
    let clock = ManualClock::new(10_000);
    let mut op = operator(&clock);
    let (mut out, rx) = output();
    op.open(&ctx(), RestoredState::default()).unwrap();
    op.process_batch(vec![1, 2, 1], &mut out).unwrap();
    clock.advance(600);
    op.process_batch(vec![1], &mut out).unwrap();
    clock.advance(400); // key 2 was last counted 1 s ago, key 1 0.4 s ago
    op.process_batch(vec![1, 2], &mut out).unwrap();
    assert_eq!(
        emitted(&rx),
        [(1, 1), (2, 1), (1, 2), (1, 3), (1, 4), (2, 1)]
    );

    let snapshot = op.snapshot(CheckpointId(1)).unwrap();
    let mut restored = operator(&clock);
    let (mut out, rx) = output();
    restored.open(&ctx(), restored_from(&snapshot)).unwrap();
    clock.advance(999); // both keys were last counted at 11,000
    restored.process_batch(vec![1], &mut out).unwrap();
    clock.advance(1); // key 2 expires now, key 1 lives until 12,999
    restored.process_batch(vec![1, 2], &mut out).unwrap();
    clock.advance(1_000); // key 1 expires
    restored.process_batch(vec![1], &mut out).unwrap();
    assert_eq!(emitted(&rx), [(1, 5), (1, 6), (2, 1), (1, 1)]);
}
