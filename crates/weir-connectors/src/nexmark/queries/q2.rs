//! q2, selection: the bids on a few auctions.

use weir_api::DataStream;

use crate::nexmark::model::Event;

/// The auctions q2 selects: ids that are multiples of this.
pub const AUCTION_MODULUS: u64 = 123;

/// `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`, as `(auction, price)`.
pub fn q2(events: DataStream<Event>) -> DataStream<(u64, u64)> {
    events.flat_map("q2-select", |e: Event| match e {
        Event::Bid(b) if b.auction % AUCTION_MODULUS == 0 => Some((b.auction, b.price)),
        _ => None,
    })
}
