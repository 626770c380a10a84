//! Channels to and from subtasks in other processes (cluster mode).
//!
//! A job graph's edges know their record type; the transport between processes knows bytes.
//! This module is where the two meet: a [`Network`] (the cluster's data plane) moves frames
//! with credit-based flow control, and each edge's channel factory (in the job graph) turns a
//! frame writer into a typed [`ChannelSink`] (encoding one [`Element`] per frame with postcard)
//! and a typed receiver into a frame decoder. Records still move in batches: one frame is one
//! batch, a barrier or a watermark.
//!
//! Flow control: the consumer's queue of a remote channel holds `capacity` elements, and the
//! producer may only send as many frames as the consumer granted credits. The consumer's gate
//! returns a credit each time it takes an element out of the queue ([`CreditReturn`]), so a
//! full queue stops its producer across the network, as a full in-process queue does, and a
//! barrier never waits behind more than `capacity` batches.

use crossbeam_channel::{Sender, TrySendError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use weir_core::{Data, Element, SubtaskId};

use crate::channel::{ChannelSink, Either};
use crate::error::{JobError, TaskError};

/// Names one channel of a job: an edge of the graph (its index), and the producer and consumer
/// subtasks' indexes. The same on every process, since every process builds the same graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelKey {
    pub edge: u32,
    pub producer: u32,
    pub consumer: u32,
}

/// Bytes a frame writer may fill in front of each frame's payload (its header), so that a frame
/// goes out in one write without a copy.
pub const FRAME_HEADER: usize = 17;

/// The producer's end of one remote channel: sends one frame, waiting for a credit first.
pub trait FrameWriter: Send {
    /// Blocks until the consumer granted a credit (the wait counts as back-pressure), then
    /// sends `frame`: [`FRAME_HEADER`] bytes for the writer to fill, then the payload. Fails
    /// once the connection is gone or the attempt was cancelled.
    fn write(&mut self, frame: Vec<u8>) -> Result<(), TaskError>;
}

/// The consumer's end of one remote channel: decodes a frame and queues its element. It never
/// blocks: flow control guarantees room in the queue.
pub type FrameDecoder = Box<dyn FnMut(&[u8]) -> Result<(), String> + Send>;

/// Called by the consumer's gate each time it takes an element of a remote channel out of its
/// queue: grants the producer one more credit.
pub type CreditReturn = Arc<dyn Fn() + Send + Sync>;

/// The cluster's data plane, as one deployment of one attempt sees it.
pub trait Network: Send + Sync {
    /// Whether `subtask` runs in this process.
    fn is_local(&self, subtask: SubtaskId) -> bool;
    /// The outgoing end of channel `key`, whose consumer `consumer` runs elsewhere.
    fn outgoing(
        &self,
        key: ChannelKey,
        consumer: SubtaskId,
    ) -> Result<Box<dyn FrameWriter>, JobError>;
    /// Registers the incoming end of channel `key`, whose producer `producer` runs elsewhere:
    /// its frames go to `decoder`, and the producer gets `capacity` credits to start with.
    fn incoming(
        &self,
        key: ChannelKey,
        producer: SubtaskId,
        capacity: usize,
        decoder: FrameDecoder,
    ) -> Result<CreditReturn, JobError>;
}

/// One input channel of a subtask: its queue, and for a remote channel, how to return credit.
pub struct InputChannel<T> {
    pub receiver: crossbeam_channel::Receiver<Element<T>>,
    pub credit: Option<CreditReturn>,
    /// How the channel's elements are stored as channel state by unaligned checkpoints
    /// (`None`: a channel from another process, which takes none yet).
    pub codec: Option<crate::channel_state::ChannelStateCodec<T>>,
    /// What the consumer took out of the channel and holds back, shared with the producer.
    pub backlog: Option<crate::channel::Backlog>,
}

impl<T: Data> InputChannel<T> {
    pub fn local(
        receiver: crossbeam_channel::Receiver<Element<T>>,
        backlog: crate::channel::Backlog,
    ) -> InputChannel<T> {
        InputChannel {
            receiver,
            credit: None,
            codec: Some(crate::channel_state::ChannelStateCodec::new()),
            backlog: Some(backlog),
        }
    }
}

/// A remote channel's producer end for elements of `T`: one frame per element.
struct RemoteSink<T> {
    writer: std::sync::Mutex<Box<dyn FrameWriter>>,
    /// The size of the largest frame so far: each buffer starts that large, so encoding a
    /// batch does not grow it step by step.
    largest_frame: std::sync::atomic::AtomicUsize,
    _records: std::marker::PhantomData<fn(T)>,
}

impl<T: Data> ChannelSink<T> for RemoteSink<T> {
    fn send(&self, element: Element<T>) -> Result<(), TaskError> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut frame = Vec::with_capacity(self.largest_frame.load(Relaxed).max(64));
        frame.resize(FRAME_HEADER, 0);
        weir_state::append_postcard(&element, &mut frame).map_err(|e| {
            TaskError::user(format!("cannot serialise a batch for the network: {e}"))
        })?;
        self.largest_frame.fetch_max(frame.len(), Relaxed);
        // Uncontended: only the producer's own task loop sends on its channel.
        let mut writer = self.writer.lock().map_err(|_| TaskError::ChannelClosed)?;
        writer.write(frame)
    }
}

/// The producer end of a remote channel carrying `T`.
pub fn remote_sink<T: Data>(writer: Box<dyn FrameWriter>) -> Box<dyn ChannelSink<T>> {
    Box::new(RemoteSink::<T> {
        writer: std::sync::Mutex::new(writer),
        largest_frame: std::sync::atomic::AtomicUsize::new(0),
        _records: std::marker::PhantomData,
    })
}

/// The consumer end of a remote channel: a queue of `capacity` elements of `U` and the decoder
/// that fills it with elements of `T` (as sent), converted by `wrap` (identity, or into one side
/// of an [`Either`]).
pub fn remote_receiver<T: Data, U: Send + 'static>(
    capacity: usize,
    wrap: fn(T) -> U,
) -> (crossbeam_channel::Receiver<Element<U>>, FrameDecoder) {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let decoder = move |frame: &[u8]| -> Result<(), String> {
        let element: Element<T> = postcard::from_bytes(frame)
            .map_err(|e| format!("a frame of {} bytes does not decode: {e}", frame.len()))?;
        let element = match element {
            Element::Records(batch) => Element::Records(batch.into_iter().map(wrap).collect()),
            Element::Watermark(w) => Element::Watermark(w),
            Element::WatermarkStatus(s) => Element::WatermarkStatus(s),
            Element::Barrier(b) => Element::Barrier(b),
            Element::EndOfInput => Element::EndOfInput,
        };
        deliver(&tx, element)
    };
    (rx, Box::new(decoder))
}

fn deliver<U>(tx: &Sender<Element<U>>, element: Element<U>) -> Result<(), String> {
    match tx.try_send(element) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(_)) => {
            Err("the producer sent more than its credits allow (flow-control violation)".into())
        }
        // The consumer is gone (its attempt ended): nothing to deliver to.
        Err(TrySendError::Disconnected(_)) => Ok(()),
    }
}

pub(crate) fn left<A, B>(a: A) -> Either<A, B> {
    Either::Left(a)
}

pub(crate) fn right<A, B>(b: B) -> Either<A, B> {
    Either::Right(b)
}

pub(crate) fn same<T>(t: T) -> T {
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{Barrier, CheckpointId, CheckpointKind};

    struct Loopback(Vec<Vec<u8>>);
    struct Shared(Arc<std::sync::Mutex<Loopback>>);
    impl FrameWriter for Shared {
        fn write(&mut self, frame: Vec<u8>) -> Result<(), TaskError> {
            self.0.lock().unwrap().0.push(frame);
            Ok(())
        }
    }

    #[test]
    fn elements_cross_as_frames_and_arrive_wrapped_into_their_side() {
        let wire = Arc::new(std::sync::Mutex::new(Loopback(Vec::new())));
        let sink = remote_sink::<(String, u64)>(Box::new(Shared(wire.clone())));
        sink.send(Element::Records(vec![("a".into(), 1), ("b".into(), 2)]))
            .unwrap();
        let barrier = Barrier {
            id: CheckpointId(7),
            timestamp_ms: 3,
            kind: CheckpointKind::Checkpoint,
            alignment: weir_core::BarrierAlignment::Aligned,
        };
        sink.send(Element::Barrier(barrier)).unwrap();
        sink.send(Element::EndOfInput).unwrap();
        let (rx, mut decode) = remote_receiver::<(String, u64), Either<(String, u64), u8>>(4, left);
        for frame in &wire.lock().unwrap().0 {
            decode(&frame[FRAME_HEADER..]).unwrap();
        }
        match rx.try_recv().unwrap() {
            Element::Records(b) => {
                assert_eq!(b.len(), 2);
                assert!(matches!(&b[1], Either::Left((k, 2)) if k == "b"));
            }
            other => panic!("expected records, got {other:?}"),
        }
        assert!(matches!(rx.try_recv().unwrap(), Element::Barrier(b) if b == barrier));
        assert!(matches!(rx.try_recv().unwrap(), Element::EndOfInput));
    }

    #[test]
    fn a_garbled_frame_and_a_producer_beyond_its_credits_are_errors_not_panics() {
        let (_rx, mut decode) = remote_receiver::<u64, u64>(1, same);
        let err = decode(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
        let frame = postcard::to_allocvec(&Element::<u64>::Records(vec![1])).unwrap();
        decode(&frame).unwrap();
        let err = decode(&frame).unwrap_err();
        assert!(err.contains("credits"), "{err}");
    }
}
