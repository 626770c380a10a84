//! The Nexmark benchmark: a deterministic generator of its three event streams — people,
//! auctions and bids of an online auction site — a replayable source of them, and its queries
//! as Weir jobs.
//!
//! ```
//! use weir_api::prelude::*;
//! use weir_connectors::nexmark::{self, NexmarkConfig, NexmarkSource};
//!
//! let env = StreamEnv::new("nexmark-q5");
//! let events = env.source_with_watermarks(
//!     "nexmark",
//!     NexmarkSource::new(NexmarkConfig::default()).with_limit(100_000),
//!     nexmark::watermarks(),
//! );
//! nexmark::queries::q5(events).sink("out", CollectSink::default());
//! assert!(env.build().is_ok());
//! ```

mod generator;
mod model;
pub mod queries;
mod source;

pub use generator::{NexmarkConfig, NexmarkGenerator};
pub use model::{Auction, Bid, Channel, Event, Person, CHANNELS};
pub use source::NexmarkSource;

use std::time::Duration;
use weir_runtime::watermark::{BoundedOutOfOrderness, WatermarkStrategy};

/// The watermark strategy of a Nexmark source.
pub type NexmarkWatermarks = WatermarkStrategy<BoundedOutOfOrderness<fn(&Event) -> i64>>;

/// How far (in event time) a Nexmark source subtask may run ahead of the slowest one.
///
/// Nexmark's events are one sequence, numbered, whose event time follows from the number: a
/// bid names an auction a few hundred events older or newer. Subtasks that each generate their
/// share of the sequence as fast as they can are apart by as much as alignment lets them be,
/// and everything the one ahead emits waits downstream for the one behind (q4's open auctions,
/// the windows of q5 and q8). At the default 10 M events per second of event time, 100 ms lets
/// one million events lie between two subtasks, about two of the sources' watermark intervals
/// at full speed: a source pauses rarely, and state stays near what one ordered sequence gives.
pub const MAX_WATERMARK_DRIFT: Duration = Duration::from_millis(100);

/// How a Nexmark source makes watermarks: each subtask's events are in event-time order, so
/// its watermark trails the latest event by one millisecond. The subtasks are aligned
/// ([`MAX_WATERMARK_DRIFT`]): each generates its own share of the events as fast as it can, and
/// without alignment one that runs faster fills the windows downstream with events that wait for
/// the slower one — state growing for as long as the run lasts.
pub fn watermarks() -> NexmarkWatermarks {
    watermarks_with_drift(MAX_WATERMARK_DRIFT)
}

/// [`watermarks`] with the subtasks at most `max_drift` of event time apart.
pub fn watermarks_with_drift(max_drift: Duration) -> NexmarkWatermarks {
    WatermarkStrategy::for_monotonous_timestamps(Event::date_time as fn(&Event) -> i64)
        .with_watermark_alignment("nexmark", max_drift)
}
