//! The Nexmark queries as Weir jobs: each takes the stream of [`Event`]s and returns its
//! results.
//!
//! | query | what | how |
//! |---|---|---|
//! | [`q0`] | pass-through: every bid | project bids |
//! | [`q1`] | bids with prices in euros (× 0.908) | map |
//! | [`q2`] | bids on auctions whose id is a multiple of 123 | filter |
//! | [`q3`] | people in OR, ID or CA selling in category 10 | keyed join of people and auctions, both kept in keyed state |
//! | [`q4`] | average closing price per category | a keyed process function over auctions and bids closes each auction with an event-time timer at its expiry; then a running average per category |
//! | [`q5`] | hot items: the auctions with the most bids in each 10 s window, every 2 s | sliding window count (panes shared) per auction, then the maximum per window |
//! | [`q7`] | the highest bids of each 10 s window | tumbling window maximum per auction, then per window |
//! | [`q8`] | people who opened an auction in the 10 s window they registered in | windowed join (co-group) of people and auctions |
//!
//! Results are exact: the generator's streams are in event-time order per source subtask, the
//! source's watermarks trail them by one millisecond, and a bounded run ends with the
//! watermark `i64::MAX`, so every window and timer fires with all its records, at any
//! parallelism and whatever the scheduling.

mod q0;
mod q1;
mod q2;
mod q3;
mod q4;
mod q5;
mod q7;
mod q8;

pub use q0::q0;
pub use q1::q1;
pub use q2::q2;
pub use q3::{q3, LocalItem};
pub use q4::{q4, CategoryAverage};
pub use q5::{q5, HotItem};
pub use q7::{q7, HighestBid};
pub use q8::{q8, NewSeller};

use weir_api::DataStream;

use super::model::{Bid, Event};

/// The queries this crate implements, by name (`q0` … `q8`).
pub const QUERIES: [&str; 8] = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8"];

/// The size of the windows of q5, q7 and q8, and the slide of q5 (nexmark-flink's values).
pub const WINDOW_MS: i64 = 10_000;
pub const HOT_ITEMS_SLIDE_MS: i64 = 2_000;

/// The bids of the stream.
pub fn bids(events: DataStream<Event>, name: &str) -> DataStream<Bid> {
    events.flat_map(name, |e: Event| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}
