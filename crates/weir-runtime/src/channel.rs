//! Channels between subtasks: bounded queues of [`Element`]s, one per producer/consumer pair.
//!
//! A bounded queue is the credit: a producer that finds its consumer's queue full blocks, and
//! back-pressure travels upstream. Capacity is counted in batches, so a barrier never waits
//! behind more than `capacity` batches.

use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use weir_core::{Barrier, Element};

use crate::error::TaskError;

/// The record type of a two-input operator's channels: which input a batch came from.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// The sending end of one channel, typed by what the producer emits. A producer's records may
/// need wrapping on the way (into [`Either`] for a two-input consumer); that happens once per
/// batch here, never per record in the producer.
pub trait ChannelSink<T>: Send {
    fn send(&self, element: Element<T>) -> Result<(), TaskError>;
    /// Whether a send now would not wait: the consumer's queue has room beyond what the
    /// consumer holds back (see [`Backlog`]).
    fn has_room(&self) -> bool {
        true
    }
    /// Tells the consumer, ahead of the data queued for it, that `barrier` follows it (an
    /// unaligned checkpoint's barrier, see [`Barrier::announced`]). A consumer in this
    /// process hears it through its control channel instead, so this does nothing here; a
    /// channel to another process sends it as a priority frame.
    fn announce(&self, _barrier: Barrier) -> Result<(), TaskError> {
        Ok(())
    }
    /// Sends on what the consumer holds back for a fuller batch. Only an operator chained
    /// behind its producer (see the runtime's `chain` module) holds any: a channel's consumer
    /// flushes on its own loop.
    fn flush(&self) -> Result<(), TaskError> {
        Ok(())
    }
}

thread_local! {
    /// Nanoseconds this thread (one subtask's task loop) spent blocked on full output
    /// channels: its back-pressure.
    static BACKPRESSURED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The back-pressure of the calling subtask thread so far, in nanoseconds.
pub fn backpressured_ns() -> u64 {
    BACKPRESSURED_NS.with(|c| c.get())
}

/// Counts `ns` of waiting (for room in a channel, or for credit from a remote consumer) as the
/// calling subtask thread's back-pressure.
pub fn add_backpressure(ns: u64) {
    BACKPRESSURED_NS.with(|c| c.set(c.get() + ns));
}

/// Sends without waiting when the consumer has room; otherwise waits, and counts the wait as
/// back-pressure. Once per batch, never per record.
fn send_counting_backpressure<T>(
    sender: &Sender<Element<T>>,
    element: Element<T>,
) -> Result<(), TaskError> {
    match sender.try_send(element) {
        Ok(()) => Ok(()),
        Err(crossbeam_channel::TrySendError::Full(element)) => {
            let start = std::time::Instant::now();
            let sent = sender.send(element).map_err(|_| TaskError::ChannelClosed);
            add_backpressure(start.elapsed().as_nanos() as u64);
            sent
        }
        Err(crossbeam_channel::TrySendError::Disconnected(_)) => Err(TaskError::ChannelClosed),
    }
}

impl<T: Send> ChannelSink<T> for Sender<Element<T>> {
    fn send(&self, element: Element<T>) -> Result<(), TaskError> {
        send_counting_backpressure(self, element)
    }
    fn has_room(&self) -> bool {
        !self.is_full()
    }
}

/// How many elements a consumer took out of a channel and has not handed on yet (what an
/// unaligned checkpoint captured, see the input gate): they still count against the channel's
/// capacity when its producer asks for room, so that captures cannot grow the data in flight.
pub type Backlog = Arc<AtomicUsize>;

/// Whether a channel holding `queued` elements, with `backlog` more taken out but not handed
/// on, has room below `capacity`.
fn room(queued: usize, backlog: &Backlog, capacity: usize) -> bool {
    queued + backlog.load(Ordering::Relaxed) < capacity
}

/// Sends a producer's elements into a one-input consumer in this process.
pub struct LocalSink<T> {
    sender: Sender<Element<T>>,
    backlog: Backlog,
    capacity: usize,
}

impl<T: Send> ChannelSink<T> for LocalSink<T> {
    fn send(&self, element: Element<T>) -> Result<(), TaskError> {
        send_counting_backpressure(&self.sender, element)
    }
    fn has_room(&self) -> bool {
        room(self.sender.len(), &self.backlog, self.capacity)
    }
}

/// Sends a producer's elements into the left input of a two-input consumer.
pub struct LeftSink<A, B> {
    sender: Sender<Element<Either<A, B>>>,
    backlog: Backlog,
    capacity: usize,
}

impl<A: Send, B: Send> ChannelSink<A> for LeftSink<A, B> {
    fn send(&self, element: Element<A>) -> Result<(), TaskError> {
        let element = match element {
            Element::Records(batch) => {
                Element::Records(batch.into_iter().map(Either::Left).collect())
            }
            other => convert_control(other),
        };
        send_counting_backpressure(&self.sender, element)
    }
    fn has_room(&self) -> bool {
        room(self.sender.len(), &self.backlog, self.capacity)
    }
}

/// The right-input twin of [`LeftSink`].
pub struct RightSink<A, B> {
    sender: Sender<Element<Either<A, B>>>,
    backlog: Backlog,
    capacity: usize,
}

impl<A: Send, B: Send> ChannelSink<B> for RightSink<A, B> {
    fn send(&self, element: Element<B>) -> Result<(), TaskError> {
        let element = match element {
            Element::Records(batch) => {
                Element::Records(batch.into_iter().map(Either::Right).collect())
            }
            other => convert_control(other),
        };
        send_counting_backpressure(&self.sender, element)
    }
    fn has_room(&self) -> bool {
        room(self.sender.len(), &self.backlog, self.capacity)
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

/// A channel whose producer emits `A` into a one-input consumer of `A`, with the backlog its
/// consumer keeps.
pub fn direct<A: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<A>>, Receiver<Element<A>>, Backlog) {
    let (sender, rx) = crossbeam_channel::bounded(capacity);
    let backlog = Backlog::default();
    let sink = LocalSink {
        sender,
        backlog: backlog.clone(),
        capacity,
    };
    (Box::new(sink), rx, backlog)
}

/// A channel into the left input of a two-input consumer.
pub fn left<A: Send + 'static, B: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<A>>, EitherReceiver<A, B>, Backlog) {
    let (sender, rx) = crossbeam_channel::bounded(capacity);
    let backlog = Backlog::default();
    let sink = LeftSink {
        sender,
        backlog: backlog.clone(),
        capacity,
    };
    (Box::new(sink), rx, backlog)
}

/// A channel into the right input of a two-input consumer.
pub fn right<A: Send + 'static, B: Send + 'static>(
    capacity: usize,
) -> (Box<dyn ChannelSink<B>>, EitherReceiver<A, B>, Backlog) {
    let (sender, rx) = crossbeam_channel::bounded(capacity);
    let backlog = Backlog::default();
    let sink = RightSink {
        sender,
        backlog: backlog.clone(),
        capacity,
    };
    (Box::new(sink), rx, backlog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_blocked_on_a_full_channel_counts_as_back_pressure_and_free_sends_do_not() {
        let (sink, rx, _) = direct::<u32>(1);
        let before = backpressured_ns();
        sink.send(Element::Records(vec![1])).unwrap(); // room: no wait
        assert_eq!(backpressured_ns(), before);
        let consumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let first = rx.recv().unwrap();
            let second = rx.recv().unwrap();
            (first, second)
        });
        sink.send(Element::Records(vec![2])).unwrap(); // full until the consumer reads
        let blocked = backpressured_ns() - before;
        assert!(blocked >= 10_000_000, "blocked {blocked} ns");
        let (first, second) = consumer.join().unwrap();
        assert!(matches!(first, Element::Records(b) if b == vec![1]));
        assert!(matches!(second, Element::Records(b) if b == vec![2]));
    }
}
