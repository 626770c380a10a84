//! Side outputs: a second stream out of one operator (late records of a window, for example).
//!
//! An operator with a side output emits `Either<Main, Side>` into one [`Output`](crate::Output);
//! every outgoing edge then takes its half at the writer — main records on the main stream's
//! edges, side records on the side stream's — once per batch, with no extra operator (and no
//! extra thread or channel hop) in between. Watermarks, idleness, barriers and end of input go
//! to both halves unchanged.

use std::marker::PhantomData;
use std::sync::Arc;
use weir_core::{Barrier, WatermarkStatus};

use crate::channel::Either;
use crate::error::TaskError;
use crate::graph::{Erased, WriterFactory};
use crate::partition::EdgeWriter;

/// Which half of an `Either` an edge carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// `Either::Left`: the main output.
    Main,
    /// `Either::Right`: the side output.
    Side,
}

/// A writer of `Either<A, B>` batches that keeps one half and hands it to a writer of that
/// half's type.
pub struct SelectWriter<A, B, X> {
    inner: Box<dyn EdgeWriter<X>>,
    half: Half,
    _types: PhantomData<fn(A, B)>,
}

impl<A, B, X> SelectWriter<A, B, X> {
    fn new(inner: Box<dyn EdgeWriter<X>>, half: Half) -> SelectWriter<A, B, X> {
        SelectWriter {
            inner,
            half,
            _types: PhantomData,
        }
    }
}

macro_rules! forward_control {
    () => {
        fn flush(&mut self) -> Result<(), TaskError> {
            self.inner.flush()
        }
        fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
            self.inner.barrier(barrier)
        }
        fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
            self.inner.announce(barrier)
        }
        fn end_of_input(&mut self) -> Result<(), TaskError> {
            self.inner.end_of_input()
        }
        fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
            self.inner.watermark(watermark)
        }
        fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
            self.inner.watermark_status(status)
        }
        fn has_room(&self) -> bool {
            self.inner.has_room()
        }
    };
}

impl<A: Send, B: Send> EdgeWriter<Either<A, B>> for SelectWriter<A, B, A> {
    fn write_batch(&mut self, batch: Vec<Either<A, B>>) -> Result<(), TaskError> {
        debug_assert_eq!(self.half, Half::Main);
        let kept: Vec<A> = batch
            .into_iter()
            .filter_map(|e| match e {
                Either::Left(a) => Some(a),
                Either::Right(_) => None,
            })
            .collect();
        if kept.is_empty() {
            return Ok(());
        }
        self.inner.write_batch(kept)
    }
    forward_control!();
}

/// The side half, as its own type so that `A == B` stays unambiguous.
pub struct SideWriter<A, B>(SelectWriter<A, B, B>);

impl<A: Send, B: Send> EdgeWriter<Either<A, B>> for SideWriter<A, B> {
    fn write_batch(&mut self, batch: Vec<Either<A, B>>) -> Result<(), TaskError> {
        let kept: Vec<B> = batch
            .into_iter()
            .filter_map(|e| match e {
                Either::Left(_) => None,
                Either::Right(b) => Some(b),
            })
            .collect();
        if kept.is_empty() {
            return Ok(());
        }
        self.0.inner.write_batch(kept)
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        self.0.inner.flush()
    }
    fn has_room(&self) -> bool {
        self.0.inner.has_room()
    }
    fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.0.inner.barrier(barrier)
    }
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.0.inner.announce(barrier)
    }
    fn end_of_input(&mut self) -> Result<(), TaskError> {
        self.0.inner.end_of_input()
    }
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        self.0.inner.watermark(watermark)
    }
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        self.0.inner.watermark_status(status)
    }
}

fn unerase<T: 'static>(writer: Erased) -> Box<dyn EdgeWriter<T>> {
    *writer
        .downcast::<Box<dyn EdgeWriter<T>>>()
        .expect("a writer factory makes writers of its edge's type")
}

/// Wraps a writer factory for `A` edges into one for an operator emitting `Either<A, B>`,
/// keeping the main half.
pub fn main_half<A: Send + 'static, B: Send + 'static>(inner: WriterFactory) -> WriterFactory {
    Arc::new(
        move |partition, channels, index, max_parallelism, batch_size| {
            let writer = unerase::<A>(inner(
                partition,
                channels,
                index,
                max_parallelism,
                batch_size,
            ));
            let select: Box<dyn EdgeWriter<Either<A, B>>> =
                Box::new(SelectWriter::<A, B, A>::new(writer, Half::Main));
            Box::new(select) as Erased
        },
    )
}

/// Wraps a writer factory for `B` edges into one for an operator emitting `Either<A, B>`,
/// keeping the side half.
pub fn side_half<A: Send + 'static, B: Send + 'static>(inner: WriterFactory) -> WriterFactory {
    Arc::new(
        move |partition, channels, index, max_parallelism, batch_size| {
            let writer = unerase::<B>(inner(
                partition,
                channels,
                index,
                max_parallelism,
                batch_size,
            ));
            let select: Box<dyn EdgeWriter<Either<A, B>>> =
                Box::new(SideWriter(SelectWriter::<A, B, B>::new(writer, Half::Side)));
            Box::new(select) as Erased
        },
    )
}
