//! Side outputs: a second stream out of one operator, named by an [`OutputTag`] — for example
//! the records a window received too late.
//!
//! ```
//! use std::time::Duration;
//! use weir_api::prelude::*;
//! use weir_api::{OutputTag, TumblingEventTimeWindows};
//! use weir_runtime::operators::window::Count;
//!
//! let env = StreamEnv::new("late");
//! let late = OutputTag::<(u64, i64)>::new("late-clicks");
//! let counts = env
//!     .source("clicks", VecSource::new(vec![(1u64, 5i64), (2, 7)]))
//!     .key_by(|c: &(u64, i64)| c.0)
//!     .window(TumblingEventTimeWindows::of(Duration::from_secs(1)), |c: &(u64, i64)| c.1)
//!     .allowed_lateness(Duration::from_secs(1))
//!     .side_output_late_data(&late)
//!     .aggregate("count", Count);
//! counts.side_output(&late).sink("late", CollectSink::default());
//! counts.sink("counts", CollectSink::default());
//! assert!(env.build().is_ok());
//! ```

use std::any::TypeId;
use std::marker::PhantomData;
use weir_core::Data;
use weir_runtime::side_output::side_half;

use crate::stream::DataStream;

/// Names a side output and the type of its records.
#[derive(Debug)]
pub struct OutputTag<T> {
    id: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            id: self.id.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: 'static> OutputTag<T> {
    pub fn new(id: &str) -> OutputTag<T> {
        OutputTag {
            id: id.to_string(),
            _t: PhantomData,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn type_id(&self) -> TypeId {
        TypeId::of::<T>()
    }
}

impl<T: Data> DataStream<T> {
    /// The side output `tag` of the operator that produced this stream. The job fails to build
    /// if that operator has no such side output.
    pub fn side_output<U: Data>(&self, tag: &OutputTag<U>) -> DataStream<U> {
        let node = self.last_node("side_output()").unwrap_or(usize::MAX);
        let registered = self.env.inner.borrow().side_outputs.get(&node).cloned();
        match registered {
            Some((id, type_id)) if id == tag.id && type_id == tag.type_id() => {}
            _ => {
                let name = self
                    .env
                    .inner
                    .borrow()
                    .nodes
                    .get(node)
                    .map(|n| n.uid.clone())
                    .unwrap_or_default();
                self.env.inner.borrow_mut().errors.push(format!(
                    "operator '{name}' has no side output '{}' of that type",
                    tag.id
                ));
            }
        }
        DataStream::adapted(self.env.clone(), node, side_half::<T, U>)
    }
}

impl<A, B> DataStream<weir_runtime::channel::Either<A, B>>
where
    A: Data,
    B: Data,
{
    /// Splits a stream of `Either` into its left and right records, at the writers of the
    /// operator that produced it: no operator is added, and each record goes only to the
    /// half it belongs to. The job fails to build if this stream is a union or a side output.
    pub fn split(self) -> (DataStream<A>, DataStream<B>) {
        use weir_runtime::side_output::main_half;
        let node = match (self.nodes.as_slice(), self.adapters.as_slice()) {
            ([node], [None]) => *node,
            _ => {
                self.env.inner.borrow_mut().errors.push(
                    "split() applies to the output of one operator, not to a union or a side output"
                        .to_string(),
                );
                usize::MAX
            }
        };
        (
            DataStream::adapted(self.env.clone(), node, main_half::<A, B>),
            DataStream::adapted(self.env, node, side_half::<A, B>),
        )
    }
}
