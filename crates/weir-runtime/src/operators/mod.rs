//! The built-in operators: stateless transformations, keyed processing with keyed state and
//! timers, two-input processing, event-time windows and joins, and sinks.

pub mod co_process;
pub mod keyed;
pub mod keyed_backend;
pub mod sink;
pub mod stateless;
pub mod window;

pub use co_process::{
    CoProcessFunction, CoProcessOperator, KeyedCoProcessFunction, KeyedCoProcessOperator,
};
pub use keyed::{KeyedProcessFunction, KeyedProcessOperator};
pub use sink::{SinkFunction, SinkOperator};
pub use stateless::{FilterOperator, FlatMapOperator, MapOperator};
