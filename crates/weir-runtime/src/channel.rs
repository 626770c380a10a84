//! Channels between subtasks: bounded queues of [`Element`]s, one per producer/consumer pair.
//!
//! A bounded queue is the credit: a producer that finds its consumer's queue full blocks, and
//! back-pressure travels upstream. Capacity is counted in batches, so a barrier never waits
//! behind more than `capacity` batches.

use crossbeam_channel::{Receiver, Sender};
use weir_core::Element;

use crate::error::TaskError;

/// The record type of a two-input operator's channels: which input a batch came from.
#[derive(Debug, Clone)]
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// The sending end of one channel, typed by what the producer emits. A producer's records may
/// need wrapping on the way (into [`Either`] for a two-input consumer); that happens once per
/// batch here, never per record in the producer.
pub trait ChannelSink<T>: Send {
    fn send(&self, element: Element<T>) -> Result<(), TaskError>;
}

impl<T: Send> ChannelSink<T> for Sender<Element<T>> {
    fn send(&self, element: Element<T>) -> Result<(), TaskError> {
        Sender::send(self, element).map_err(|_| TaskError::ChannelClosed)
    }
}

/// Sends a producer's elements into the left input of a two-input consumer.
pub struct LeftSink<A, B> {
    sender: Sender<Element<Either<A, B>>>,
}

impl<A: Send, B: Send> ChannelSink<A> for LeftSink<A, B> {
    fn send(&self, element: Element<A>) -> Result<(), TaskError> {
        let element = match element {
            Element::Records(batch) => {
                Element::Records(batch.into_iter().map(Either::Left).collect())
            }
            other => convert_control(other),
        };
        self.sender
            .send(element)
            .map_err(|_| TaskError::ChannelClosed)
    }
}

/// The right-input twin of [`LeftSink`].
pub struct RightSink<A, B> {
    sender: Sender<Element<Either<A, B>>>,
}

impl<A: Send, B: Send> ChannelSink<B> for RightSink<A, B> {
    fn send(&self, element: Element<B>) -> Result<(), TaskError> {
        let element = match element {
            Element::Records(batch) => {
                Element::Records(batch.into_iter().map(Either::Right).collect())
            }
            other => convert_control(other),
        };
        self.sender
            .send(element)
            .map_err(|_| TaskError::ChannelClosed)
    }
}

fn convert_control<T, U>(element: Element<T>) -> Element<U> {
    match element {
        Element::Records(_) => unreachable!("records are converted by the caller"),
        Element::Watermark(w) => Element::Watermark(w),
        Element::WatermarkStatus(s) => Element::WatermarkStatus(s),
        Element::Barrier(b) => Element::Barrier(b),
        Element::EndOfInput => Element::EndOfInput,
    }
}

/// The receiving end of a two-input consumer's channel.
pub type EitherReceiver<A, B> = Receiver<Element<Either<A, B>>>;

/// A channel whose producer emits `A` into a one-input consumer of `A`.
pub fn direct<A: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<A>>, Receiver<Element<A>>) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    (Box::new(tx), rx)
}

/// A channel into the left input of a two-input consumer.
pub fn left<A: Send + 'static, B: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<A>>, EitherReceiver<A, B>) {
    let (sender, rx) = crossbeam_channel::bounded(capacity);
    (Box::new(LeftSink { sender }), rx)
}

/// A channel into the right input of a two-input consumer.
pub fn right<A: Send + 'static, B: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<B>>, EitherReceiver<A, B>) {
    let (sender, rx) = crossbeam_channel::bounded(capacity);
    (Box::new(RightSink { sender }), rx)
}
