//! The built-in operators: stateless transformations, keyed processing with keyed state,
//! two-input processing, and sinks.

pub mod co_process;
pub mod keyed;
pub mod sink;
pub mod stateless;

pub use co_process::{
    CoProcessFunction, CoProcessOperator, KeyedCoProcessFunction, KeyedCoProcessOperator,
};
pub use keyed::{KeyedProcessFunction, KeyedProcessOperator};
pub use sink::{SinkFunction, SinkOperator};
pub use stateless::{FilterOperator, FlatMapOperator, MapOperator};
