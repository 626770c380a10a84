//! q7, highest bid: the bids with the highest price in each 10 s tumbling window.
//!
//! Two steps, so the work spreads over every subtask: the highest bids per window and bucket of
//! auctions (an incremental window aggregate; [`BUCKETS`] buckets keep the partial state small
//! however many auctions there are), then the highest of those per window, fired by an
//! event-time timer at the window's end.

use weir_api::prelude::*;

use super::WINDOW_MS;
use crate::nexmark::model::{Bid, Event};
use std::time::Duration;

/// The auctions are spread over this many buckets (by id) for the first step.
pub const BUCKETS: u64 = 1024;

/// A result of q7: one of the bids with the highest price in `window`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct HighestBid {
    pub window: TimeWindow,
    pub bid: Bid,
}

/// The highest price and every bid with it.
#[derive(Clone)]
struct HighestBids;

impl AggregateFunction<Bid> for HighestBids {
    type Acc = (u64, Vec<Bid>);
    type Out = (u64, Vec<Bid>);

    fn create_accumulator(&self) -> (u64, Vec<Bid>) {
        (0, Vec::new())
    }

    fn add(&self, acc: &mut (u64, Vec<Bid>), bid: Bid) {
        if bid.price > acc.0 || acc.1.is_empty() {
            acc.0 = bid.price;
            acc.1.clear();
            acc.1.push(bid);
        } else if bid.price == acc.0 {
            acc.1.push(bid);
        }
    }

    fn merge(&self, acc: &mut (u64, Vec<Bid>), other: &(u64, Vec<Bid>)) {
        for bid in &other.1 {
            self.add(acc, bid.clone());
        }
    }

    fn get_result(&self, acc: &(u64, Vec<Bid>)) -> (u64, Vec<Bid>) {
        acc.clone()
    }
}

/// Keyed by window end: the highest bids of the window's partial results.
#[derive(Clone)]
struct Highest;

impl KeyedProcessFunction<i64, WindowResult<u64, (u64, Vec<Bid>)>, HighestBid> for Highest {
    type State = ValueState<i64, (i64, u64, Vec<Bid>)>; // (window start, price, bids)

    fn state(&self) -> Self::State {
        ValueState::new("highest")
    }

    fn process_element(
        &mut self,
        key: &CurrentKey<'_, i64>,
        partial: WindowResult<u64, (u64, Vec<Bid>)>,
        state: &mut Self::State,
        ctx: &mut TimerContext<'_, i64>,
        _out: &mut Output<HighestBid>,
    ) -> Result<(), TaskError> {
        let (price, bids) = partial.value;
        let entry = state.get_or_insert_with(key, || (partial.window.start, 0, Vec::new()));
        if price > entry.1 || entry.2.is_empty() {
            entry.1 = price;
            entry.2 = bids;
        } else if price == entry.1 {
            entry.2.extend(bids);
        }
        ctx.register_event_time_timer(partial.window.max_timestamp());
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &CurrentKey<'_, i64>,
        _timer: Timer,
        state: &mut Self::State,
        _ctx: &mut TimerContext<'_, i64>,
        out: &mut Output<HighestBid>,
    ) -> Result<(), TaskError> {
        if let Some((start, _, bids)) = state.take(key) {
            let window = TimeWindow::new(start, *key.key);
            for bid in bids {
                out.emit(HighestBid { window, bid });
            }
        }
        Ok(())
    }
}

/// ```sql
/// SELECT B.* FROM bid B JOIN (SELECT MAX(price) AS maxprice, window_end
///   FROM TUMBLE(bid, dateTime, 10 s) GROUP BY window_start, window_end) B1
/// ON B.price = B1.maxprice AND B.dateTime IN the window
/// ```
pub fn q7(events: DataStream<Event>) -> DataStream<HighestBid> {
    super::bids(events, "q7-bids")
        .key_by(|b: &Bid| b.auction % BUCKETS)
        .window(
            TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS as u64)),
            |b: &Bid| b.date_time,
        )
        .aggregate("q7-highest-per-bucket", HighestBids)
        .key_by(|r: &WindowResult<u64, (u64, Vec<Bid>)>| r.window.end)
        .process("q7-highest", Highest)
}
