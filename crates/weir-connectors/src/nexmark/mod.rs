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
//!     nexmark::watermarks(&NexmarkConfig::default()),
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

/// How many events of the sequence a Nexmark source subtask may run ahead of the slowest one.
///
/// Nexmark's events are one sequence, numbered, whose event time follows from the number: a
/// bid names an auction a few hundred events older or newer. Subtasks that each generate their
/// share of the sequence as fast as they can are apart by as much as alignment lets them be,
/// and everything the one ahead emits waits downstream for the one behind (q4's open auctions,
/// the windows of q5 and q8): that state is counted in events, so the drift is too. One million
/// events is about a third of a second of a subtask's output at full speed, far longer than a
/// source takes to see the others' progress, so a source pauses rarely, and state stays near
/// what one ordered sequence gives.
pub const MAX_DRIFT_EVENTS: u64 = 1_000_000;

/// The event time [`MAX_DRIFT_EVENTS`] events take at `events_per_second`: 100 ms at the
/// default 10 M events per second, 10 s at 100,000. At least 1 ms, the unit of event time.
pub fn max_watermark_drift(events_per_second: u64) -> Duration {
    let ms = MAX_DRIFT_EVENTS.saturating_mul(1_000) / events_per_second.max(1);
    Duration::from_millis(ms.max(1))
}

/// How a Nexmark source of `config` makes watermarks: each subtask's events are in event-time
/// order, so its watermark trails the latest event by one millisecond. The subtasks are aligned
/// within [`max_watermark_drift`] of the event rate: each generates its own share of the events
/// as fast as it can, and without alignment one that runs faster fills the windows downstream
/// with events that wait for the slower one — state growing for as long as the run lasts.
pub fn watermarks(config: &NexmarkConfig) -> NexmarkWatermarks {
    watermarks_with_drift(max_watermark_drift(config.events_per_second))
}

/// [`watermarks`] with the subtasks at most `max_drift` of event time apart.
pub fn watermarks_with_drift(max_drift: Duration) -> NexmarkWatermarks {
    WatermarkStrategy::for_monotonous_timestamps(Event::date_time as fn(&Event) -> i64)
        .with_watermark_alignment("nexmark", max_drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drift_is_the_event_time_of_a_million_events() {
        let ms = |rate| max_watermark_drift(rate).as_millis();
        assert_eq!(ms(NexmarkConfig::default().events_per_second), 100);
        assert_eq!(ms(100_000), 10_000);
        assert_eq!(ms(1_000), 1_000_000);
        // Event time counts milliseconds: never less than one, and no rate divides by zero.
        assert_eq!(ms(u64::MAX), 1);
        assert_eq!(ms(0), ms(1));
    }
}
