//! q0, pass-through: every bid, unchanged — the cost of reading and moving events.

use weir_api::DataStream;

use crate::nexmark::model::{Bid, Event};

/// `SELECT * FROM bid`.
pub fn q0(events: DataStream<Event>) -> DataStream<Bid> {
    super::bids(events, "q0-bids")
}
