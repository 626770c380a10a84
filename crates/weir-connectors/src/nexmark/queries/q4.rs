//! q4, average closing price per category: each auction closes at its expiry with its
//! highest bid placed while it was open; then a running average per category.
//!
//! Auctions and bids reach one keyed process function (keyed by auction id) as one stream.
//! An auction registers an event-time timer at its expiry; when the watermark passes it, every
//! bid placed before the expiry has arrived, and the auction's winning price goes downstream.
//! Bids that arrive before their auction wait in keyed state until it comes, or until the
//! watermark shows it cannot come in time for them.

use weir_api::prelude::*;

use crate::nexmark::model::{Auction, Bid, Event};

/// The running result of q4 for one category: `total / count` is its average closing price.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct CategoryAverage {
    pub category: u64,
    /// The sum of the closing prices of the category's auctions closed so far (cents).
    pub total: u64,
    /// How many of its auctions closed with a bid.
    pub count: u64,
}

impl CategoryAverage {
    /// The average closing price (cents), rounded down as SQL's `AVG` over integers.
    pub fn average(&self) -> u64 {
        self.total / self.count.max(1)
    }
}

/// What q4 keeps of an auction.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Open {
    date_time: i64,
    expires: i64,
    category: u64,
    /// The highest price bid while it is open.
    best: Option<u64>,
}

/// Closes auctions: `(category, closing price)` at each auction's expiry.
#[derive(Clone)]
struct ClosingPrices;

impl KeyedProcessFunction<u64, Either<Auction, Bid>, (u64, u64)> for ClosingPrices {
    /// The open auction; the bids that came before it, as `(time, price)`.
    type State = (ValueState<u64, Open>, ListState<u64, (i64, u64)>);

    fn state(&self) -> Self::State {
        (
            ValueState::new("open-auction"),
            ListState::new("early-bids"),
        )
    }

    fn process_element(
        &mut self,
        key: &CurrentKey<'_, u64>,
        record: Either<Auction, Bid>,
        (open, early): &mut Self::State,
        ctx: &mut TimerContext<'_, u64>,
        _out: &mut Output<(u64, u64)>,
    ) -> Result<(), TaskError> {
        match record {
            Either::Left(a) => {
                let best = early
                    .take(key)
                    .into_iter()
                    .filter(|(t, _)| a.date_time <= *t && *t <= a.expires)
                    .map(|(_, price)| price)
                    .max();
                open.set(
                    key,
                    Open {
                        date_time: a.date_time,
                        expires: a.expires,
                        category: a.category,
                        best,
                    },
                );
                ctx.register_event_time_timer(a.expires);
            }
            Either::Right(b) => match open.get(key) {
                // Written only when the bid is the best so far: an unchanged auction is not
                // written again by the next incremental checkpoint.
                Some(o)
                    if o.date_time <= b.date_time
                        && b.date_time <= o.expires
                        && o.best < Some(b.price) =>
                {
                    if let Some(o) = open.get_mut(key) {
                        o.best = Some(b.price);
                    }
                }
                Some(_) => {}
                None if b.date_time > ctx.current_watermark() => {
                    // Its auction may still come (with an earlier time): wait until the
                    // watermark passes the bid, when it no longer can.
                    early.add(key, (b.date_time, b.price));
                    ctx.register_event_time_timer(b.date_time);
                }
                None => {}
            },
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &CurrentKey<'_, u64>,
        timer: Timer,
        (open, early): &mut Self::State,
        _ctx: &mut TimerContext<'_, u64>,
        out: &mut Output<(u64, u64)>,
    ) -> Result<(), TaskError> {
        if open.get(key).is_some_and(|o| o.expires == timer.timestamp) {
            if let Some(closed) = open.take(key) {
                if let Some(price) = closed.best {
                    out.emit((closed.category, price));
                }
            }
        } else if open.get(key).is_none() {
            let waiting: Vec<(i64, u64)> = early
                .take(key)
                .into_iter()
                .filter(|(t, _)| *t > timer.timestamp)
                .collect();
            early.update(key, waiting);
        }
        Ok(())
    }
}

/// A running sum and count per category.
#[derive(Clone)]
struct Averages;

impl KeyedProcessFunction<u64, (u64, u64), CategoryAverage> for Averages {
    type State = ValueState<u64, (u64, u64)>;

    fn state(&self) -> Self::State {
        ValueState::new("total-and-count")
    }

    fn process(
        &mut self,
        key: &CurrentKey<'_, u64>,
        (category, price): (u64, u64),
        state: &mut Self::State,
        out: &mut Output<CategoryAverage>,
    ) -> Result<(), TaskError> {
        let (total, count) = state.get_or_insert_with(key, || (0, 0));
        *total += price;
        *count += 1;
        out.emit(CategoryAverage {
            category,
            total: *total,
            count: *count,
        });
        Ok(())
    }
}

/// ```sql
/// SELECT Q.category, AVG(Q.final) FROM (
///   SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
///   WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
///   GROUP BY A.id, A.category) Q
/// GROUP BY Q.category
/// ```
/// emitted as a running [`CategoryAverage`] per category, updated as auctions close.
pub fn q4(events: DataStream<Event>) -> DataStream<CategoryAverage> {
    events
        .flat_map("q4-select", |e: Event| match e {
            Event::Auction(a) => Some(Either::Left(*a)),
            Event::Bid(b) => Some(Either::Right(b)),
            Event::Person(_) => None,
        })
        .key_by(|e: &Either<Auction, Bid>| match e {
            Either::Left(a) => a.id,
            Either::Right(b) => b.auction,
        })
        .process("q4-closing-prices", ClosingPrices)
        .key_by(|(category, _): &(u64, u64)| *category)
        .process("q4-averages", Averages)
}
