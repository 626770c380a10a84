//! q1, currency conversion: every bid with its price in euros.

use weir_api::DataStream;

use crate::nexmark::model::{Bid, Event};

/// Dollars to euros, as in the Nexmark specification.
pub const EUROS_PER_DOLLAR: f64 = 0.908;

/// A price in dollar cents, in euro cents (rounded).
pub fn to_euros(cents: u64) -> u64 {
    (cents as f64 * EUROS_PER_DOLLAR).round() as u64
}

/// `SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid`.
pub fn q1(events: DataStream<Event>) -> DataStream<Bid> {
    events.flat_map("q1-euros", |e: Event| match e {
        Event::Bid(mut b) => {
            b.price = to_euros(b.price);
            Some(b)
        }
        _ => None,
    })
}
