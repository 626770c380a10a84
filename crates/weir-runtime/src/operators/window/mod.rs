//! Event-time windows over keyed streams — tumbling, sliding and session — and the joins built
//! on them: the windowed join (co-group) and the interval join.
//!
//! Every window operator keeps its contents as keyed state in its key's key group (so
//! checkpoints take it copy-on-write and write only what changed) and is driven by event-time
//! timers, which are keyed state too. Windows fire when the watermark passes their end; a
//! bounded input ends with the watermark `i64::MAX`, which fires every window left.

pub mod functions;
pub mod interval_join;
pub mod join;
pub mod paned;
pub mod session;
pub mod time_window;

pub use functions::{
    AggregateFunction, Aggregating, Buffering, Count, DropLate, LatePolicy, LateToSideOutput, Max,
    ProcessWindowFunction, ReduceAggregate, WindowElements, WindowFunction, WindowResult,
};
pub use interval_join::IntervalJoinOperator;
pub use join::{CoGroup, CoGroupFunction, InnerJoin, JoinBuffers, Joining};
pub use paned::PanedWindowOperator;
pub use session::SessionWindowOperator;
pub use time_window::{
    EventTimeSessionWindows, PaneGeometry, SlidingEventTimeWindows, TimeWindow,
    TumblingEventTimeWindows,
};
