//! q5, hot items: in each 10 s window sliding every 2 s, the auctions with the most bids.
//!
//! A sliding window count per auction — each bid updates one 2 s pane, shared by the five
//! windows holding it — then, keyed by window, the maximum: an event-time timer at the window's
//! end fires once every count of that window has arrived.

use weir_api::prelude::*;

use super::{HOT_ITEMS_SLIDE_MS, WINDOW_MS};
use crate::nexmark::model::{Bid, Event};
use std::time::Duration;
use weir_runtime::operators::window::Count;

/// A result of q5: one of the auctions with the most bids in `window`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct HotItem {
    pub window: TimeWindow,
    pub auction: u64,
    pub bids: u64,
}

/// Keyed by window end: the largest count so far and the auctions that have it.
#[derive(Clone)]
struct Hottest;

impl KeyedProcessFunction<i64, WindowResult<u64, u64>, HotItem> for Hottest {
    type State = ValueState<i64, (i64, u64, Vec<u64>)>; // (window start, max, auctions)

    fn state(&self) -> Self::State {
        ValueState::new("hottest")
    }

    fn process_element(
        &mut self,
        key: &CurrentKey<'_, i64>,
        count: WindowResult<u64, u64>,
        state: &mut Self::State,
        ctx: &mut TimerContext<'_, i64>,
        _out: &mut Output<HotItem>,
    ) -> Result<(), TaskError> {
        let entry = state.get_or_insert_with(key, || (count.window.start, 0, Vec::new()));
        if count.value > entry.1 {
            entry.1 = count.value;
            entry.2.clear();
        }
        if count.value == entry.1 {
            entry.2.push(count.key);
        }
        ctx.register_event_time_timer(count.window.max_timestamp());
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &CurrentKey<'_, i64>,
        _timer: Timer,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, i64>,
        out: &mut Output<HotItem>,
    ) -> Result<(), TaskError> {
        if let Some((start, bids, auctions)) = state.take(key) {
            for auction in auctions {
                out.emit(HotItem {
                    window: TimeWindow::new(start, *key.key),
                    auction,
                    bids,
                });
            }
        }
        Ok(())
    }
}

/// ```sql
/// SELECT auction, num FROM (counts per auction and HOP(dateTime, 2 s, 10 s) window)
/// WHERE num >= (the maximum count of the same window)
/// ```
pub fn q5(events: DataStream<Event>) -> DataStream<HotItem> {
    super::bids(events, "q5-bids")
        .key_by(|b: &Bid| b.auction)
        .window(
            SlidingEventTimeWindows::of(
                Duration::from_millis(WINDOW_MS as u64),
                Duration::from_millis(HOT_ITEMS_SLIDE_MS as u64),
            ),
            |b: &Bid| b.date_time,
        )
        .aggregate("q5-bids-per-auction", Count)
        .key_by(|c: &WindowResult<u64, u64>| c.window.end)
        .process("q5-hottest", Hottest)
}
