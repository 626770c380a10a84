//! Channels to and from subtasks in other processes (cluster mode).
//!
//! A job graph's edges know their record type; the transport between processes knows bytes.
//! This module is where the two meet: a [`Network`] (the cluster's data plane) moves frames
//! with credit-based flow control, and each edge's channel factory (in the job graph) turns a
//! frame writer into a typed [`ChannelSink`] (encoding one [`Element`] per frame in the
//! [`wire_format`](crate::wire_format)) and a typed receiver into a frame decoder. A frame is
//! one batch, a barrier, a watermark or the end of input; the batches a producer sends one
//! remote channel in a row are merged into frames of about [`FRAME_TARGET`] bytes, each one
//! batch to the consumer (and one credit), so that a frame, not each batch of the producer,
//! pays for the system calls, the consumer's wake-up and the credits.
//!
//! Flow control: the consumer's queue of a remote channel holds `capacity` elements, and the
//! producer may only send as many frames as the consumer granted credits. The consumer's gate
//! earns a credit each time it takes an element out of the queue ([`ConsumerCredits::taken`];
//! they go back a few at a time, all of them by the time the queue is empty), so a full queue
//! stops its producer across the network, as a full in-process queue does, and
//! a barrier never waits behind more than `capacity` batches.
//!
//! Unaligned checkpoints work across processes as they do in one. A barrier that overtakes the
//! data ([`Barrier::announced`]) first goes out as a *priority frame* ([`ChannelSink::announce`]),
//! which spends no credit: it leaves at once, ahead of what the producer still has to flush
//! before the barrier, and the consumer's process, which reads its connections without ever
//! waiting on a queue, hands it to the consumer subtask's control channel as
//! [`TaskControl::PriorityBarrier`] ([`priority_receiver`]), ahead of every batch queued there.
//! The gate then captures the channel up to the barrier's place: it takes the elements out of
//! the queue and returns their credits at once, so a producer blocked on a send (flushing ahead
//! of the barrier, or in the middle of a batch) always gets through to the barrier. What the
//! gate holds back in its replay queue it reports as well ([`ConsumerCredits::held`]); the
//! producer counts it against its credits when it asks for room ([`FrameWriter::has_room`]), as
//! [`crate::channel::Backlog`] does in one process, so captures cannot grow the data in flight:
//! a back-pressured producer with unaligned checkpoints on waits, outside a send, until the
//! consumer has room beyond what it holds back.

use crossbeam_channel::{Sender, TrySendError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use weir_core::{Barrier, Data, Element, SubtaskId};

use crate::channel::{ChannelSink, Either};
use crate::channel_state::ChannelStateCodec;
use crate::control::TaskControl;
use crate::error::{JobError, TaskError};
use crate::wire_format::RecordsFrame;

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

/// The producer's end of one remote channel.
pub trait FrameWriter: Send {
    /// Blocks until the consumer granted a credit (the wait counts as back-pressure), then
    /// sends `frame`: [`FRAME_HEADER`] bytes for the writer to fill, then the payload. Fails
    /// once the connection is gone or the attempt was cancelled. The frame is borrowed: the
    /// sink encodes every frame of its channel into the same buffer.
    fn write(&mut self, frame: &mut [u8]) -> Result<(), TaskError>;
    /// Sends `frame` (laid out as for [`write`](Self::write), its payload an encoded
    /// [`Barrier`]) as a priority frame: at once, spending no credit, ahead of every frame
    /// still waiting for one. A channel whose connection is not up yet has carried nothing for
    /// the barrier to overtake: the frame is then dropped, and the barrier follows in-band.
    fn write_priority(&mut self, frame: &mut [u8]) -> Result<(), TaskError>;
    /// Whether the consumer has room: a credit beyond the elements it holds back (see
    /// [`ConsumerCredits::held`]).
    fn has_room(&self) -> bool;
}

/// The consumer's end of one remote channel: decodes a frame and queues its element (or, for a
/// priority frame, hands the barrier to the consumer subtask). It never blocks: flow control
/// guarantees room in the queue.
pub type FrameDecoder = Box<dyn FnMut(&[u8]) -> Result<(), String> + Send>;

/// The consumer's side of a remote channel's flow control, driven by its gate.
pub trait ConsumerCredits: Send + Sync {
    /// The gate took one element out of the channel's queue — to hand it on, or to capture it
    /// as channel state — and `still_queued` elements are left in it: the producer gets one
    /// more credit. Credits may go back a few at a time (one frame for several), but never
    /// later than when the queue is found empty: a consumer that waits for a channel has
    /// returned every credit of it, so its producer is never held back by credits owed.
    fn taken(&self, still_queued: usize);
    /// The gate now holds back `elements` of the channel's elements in its replay queue
    /// (captured by an unaligned checkpoint, or restored from one); the producer counts them
    /// against the channel's capacity when it asks for room.
    fn held(&self, elements: usize);
}

/// How a consumer's gate reports to the producer of a remote channel.
pub type CreditReturn = Arc<dyn ConsumerCredits>;

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
    /// its frames go to `decoder` and its priority frames to `priority`, and the producer gets
    /// `capacity` credits to start with.
    fn incoming(
        &self,
        key: ChannelKey,
        producer: SubtaskId,
        capacity: usize,
        decoder: FrameDecoder,
        priority: FrameDecoder,
    ) -> Result<CreditReturn, JobError>;
}

/// One input channel of a subtask: its queue, and for a remote channel, how to return credit.
pub struct InputChannel<T> {
    pub receiver: crossbeam_channel::Receiver<Element<T>>,
    pub credit: Option<CreditReturn>,
    /// How the channel's elements are stored as channel state by unaligned checkpoints.
    pub codec: ChannelStateCodec<T>,
    /// What the consumer took out of the channel and holds back, shared with the producer
    /// (in-process channels; a remote channel's producer learns it through [`Self::credit`]).
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
            codec: ChannelStateCodec::new(),
            backlog: Some(backlog),
        }
    }

    /// The consumer's end of a channel from another process: its queue, filled by the frame
    /// decoder, and how its gate reports to the producer.
    pub fn remote(
        receiver: crossbeam_channel::Receiver<Element<T>>,
        credit: CreditReturn,
    ) -> InputChannel<T> {
        InputChannel {
            receiver,
            credit: Some(credit),
            codec: ChannelStateCodec::new(),
            backlog: None,
        }
    }
}

/// How large a frame of records grows before it goes out: batches bound for the same remote
/// channel are merged into one frame up to about this many bytes, so that the producer's
/// system calls, the consumer's wake-ups and the credits returned are one per frame rather than
/// one per batch. A frame that stays smaller leaves with the next barrier, watermark or end of
/// input, or when the producer flushes its output (its buffer timeout, or when it goes idle),
/// so a record waits no longer than it waits in a partly filled batch.
pub const FRAME_TARGET: usize = 128 << 10;

/// The producer's end of a remote channel for elements of `T`. Batches of records are merged
/// into frames of about [`FRAME_TARGET`] bytes; every other element is a frame of its own,
/// after the records sent before it.
struct RemoteSink<T> {
    /// Uncontended: only the producer's own task loop uses its channel.
    out: std::sync::Mutex<Outgoing>,
    _records: std::marker::PhantomData<fn(T)>,
}

struct Outgoing {
    writer: Box<dyn FrameWriter>,
    /// Every frame is encoded here, after [`FRAME_HEADER`] bytes left for the writer: no
    /// allocation per frame.
    buffer: Vec<u8>,
    /// The frame of records being filled in `buffer`, if one is.
    filling: Option<RecordsFrame>,
}

impl Outgoing {
    /// Sends the frame of records being filled, if any.
    fn send_records(&mut self) -> Result<(), TaskError> {
        match self.filling.take() {
            Some(_) => self.write(),
            None => Ok(()),
        }
    }

    /// Sends the frame in the buffer. A buffer grown far beyond the target by one large batch
    /// is given back, not kept for the channel's lifetime.
    fn write(&mut self) -> Result<(), TaskError> {
        let sent = self.writer.write(&mut self.buffer);
        if self.buffer.capacity() > 4 * FRAME_TARGET {
            self.buffer = Vec::new();
        }
        sent
    }

    fn start_frame(&mut self) {
        self.buffer.clear();
        self.buffer.resize(FRAME_HEADER, 0);
    }
}

fn unserialisable(what: &str, e: crate::wire_format::WireError) -> TaskError {
    TaskError::user(format!("cannot serialise {what} for the network: {e}"))
}

impl<T> RemoteSink<T> {
    fn out(&self) -> Result<std::sync::MutexGuard<'_, Outgoing>, TaskError> {
        self.out.lock().map_err(|_| TaskError::ChannelClosed)
    }
}

impl<T: Data> ChannelSink<T> for RemoteSink<T> {
    fn send(&self, element: Element<T>) -> Result<(), TaskError> {
        let mut out = self.out()?;
        let out = &mut *out;
        if let Element::Records(batch) = &element {
            if batch.is_empty() {
                return Ok(());
            }
            if out.filling.is_none() {
                out.start_frame();
                out.filling = Some(
                    RecordsFrame::start::<T>(&mut out.buffer)
                        .map_err(|e| unserialisable("a batch", e))?,
                );
            }
            let frame = out.filling.as_mut().expect("a frame is being filled");
            if let Err(e) = frame.append(&mut out.buffer, batch) {
                // Part of the batch may be in the buffer: the frame is dropped, never sent (the
                // error fails the subtask, and its attempt restarts from a checkpoint).
                out.filling = None;
                return Err(unserialisable("a batch", e));
            }
            // Records that encode to nothing (unit structs) grow no frame: bound those by count.
            if out.buffer.len() >= FRAME_TARGET || frame.records() >= FRAME_TARGET as u32 {
                out.send_records()?;
            }
            return Ok(());
        }
        out.send_records()?;
        out.start_frame();
        crate::wire_format::encode_into(&element, &mut out.buffer)
            .map_err(|e| unserialisable("an element", e))?;
        out.write()
    }

    fn flush(&self) -> Result<(), TaskError> {
        self.out()?.send_records()
    }

    fn has_room(&self) -> bool {
        self.out().is_ok_and(|out| out.writer.has_room())
    }

    fn announce(&self, barrier: Barrier) -> Result<(), TaskError> {
        // Its own buffer: the records being filled stay where they are, behind the barrier's
        // in-band place.
        let mut frame = vec![0u8; FRAME_HEADER];
        crate::wire_format::encode_into(&barrier, &mut frame)
            .map_err(|e| unserialisable("a barrier", e))?;
        self.out()?.writer.write_priority(&mut frame)
    }
}

/// The producer end of a remote channel carrying `T`.
pub fn remote_sink<T: Data>(writer: Box<dyn FrameWriter>) -> Box<dyn ChannelSink<T>> {
    Box::new(RemoteSink::<T> {
        out: std::sync::Mutex::new(Outgoing {
            writer,
            buffer: Vec::new(),
            filling: None,
        }),
        _records: std::marker::PhantomData,
    })
}

/// The consumer end of a remote channel: a queue of `capacity` elements of `U` and the decoder
/// that fills it with elements of `T` (as sent), converted by `wrap` (identity, or into one side
/// of an [`Either`]). `wrap` is a type parameter, not a function pointer: it is inlined into the
/// loop over a batch, and the identity compiles to nothing (the batch keeps its allocation).
pub fn remote_receiver<T: Data, U: Send + 'static>(
    capacity: usize,
    wrap: impl Fn(T) -> U + Send + 'static,
) -> (crossbeam_channel::Receiver<Element<U>>, FrameDecoder) {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let decoder = move |frame: &[u8]| -> Result<(), String> {
        let element: Element<T> = crate::wire_format::decode(frame)
            .map_err(|e| format!("a frame of {} bytes does not decode: {e}", frame.len()))?;
        let element = match element {
            Element::Records(batch) => Element::Records(batch.into_iter().map(&wrap).collect()),
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

/// The decoder of a remote channel's priority frames: each carries a barrier announced ahead of
/// the data, which goes to the consumer subtask's `control` channel as
/// [`TaskControl::PriorityBarrier`], as an upstream subtask in the same process sends it.
pub fn priority_receiver(control: Sender<TaskControl>) -> FrameDecoder {
    Box::new(move |frame: &[u8]| {
        let barrier: Barrier = crate::wire_format::decode(frame).map_err(|e| {
            format!(
                "a priority frame of {} bytes is not a barrier: {e}",
                frame.len()
            )
        })?;
        if !barrier.announced() {
            return Err(format!(
                "checkpoint {}'s barrier came as a priority frame, but it does not overtake the data",
                barrier.id
            ));
        }
        // The consumer is gone (its attempt ended): nothing to deliver to.
        let _ = control.send(TaskControl::PriorityBarrier(barrier));
        Ok(())
    })
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

    /// What a sink wrote: its frames (priority frames marked), and the room it reports.
    #[derive(Default)]
    struct Loopback {
        frames: Vec<Vec<u8>>,
        priority: Vec<Vec<u8>>,
        room: bool,
    }
    struct Shared(Arc<std::sync::Mutex<Loopback>>);
    impl FrameWriter for Shared {
        fn write(&mut self, frame: &mut [u8]) -> Result<(), TaskError> {
            self.0.lock().unwrap().frames.push(frame.to_vec());
            Ok(())
        }
        fn write_priority(&mut self, frame: &mut [u8]) -> Result<(), TaskError> {
            self.0.lock().unwrap().priority.push(frame.to_vec());
            Ok(())
        }
        fn has_room(&self) -> bool {
            self.0.lock().unwrap().room
        }
    }

    fn checkpoint(id: u64, alignment: weir_core::BarrierAlignment) -> Barrier {
        Barrier {
            id: CheckpointId(id),
            timestamp_ms: 3,
            kind: CheckpointKind::Checkpoint,
            alignment,
        }
    }

    #[test]
    fn elements_cross_as_frames_and_arrive_wrapped_into_their_side() {
        let wire = Arc::new(std::sync::Mutex::new(Loopback::default()));
        let sink = remote_sink::<(String, u64)>(Box::new(Shared(wire.clone())));
        sink.send(Element::Records(vec![("a".into(), 1), ("b".into(), 2)]))
            .unwrap();
        let barrier = checkpoint(7, weir_core::BarrierAlignment::Aligned);
        sink.send(Element::Barrier(barrier)).unwrap();
        sink.send(Element::EndOfInput).unwrap();
        let (rx, mut decode) = remote_receiver::<(String, u64), Either<(String, u64), u8>>(4, left);
        for frame in &wire.lock().unwrap().frames {
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

    /// A record whose encoding fails when it is `Bad`.
    #[derive(Clone, Debug, serde::Deserialize)]
    enum Fussy {
        Fine(u64),
        Bad,
    }
    impl Serialize for Fussy {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Fussy::Fine(n) => s.serialize_newtype_variant("Fussy", 0, "Fine", n),
                Fussy::Bad => Err(serde::ser::Error::custom("this record does not serialise")),
            }
        }
    }

    #[test]
    fn a_batch_that_fails_to_serialise_is_an_error_and_leaves_no_half_frame_behind() {
        let wire = Arc::new(std::sync::Mutex::new(Loopback::default()));
        let sink = remote_sink::<Fussy>(Box::new(Shared(wire.clone())));
        sink.send(Element::Records(vec![Fussy::Fine(1)])).unwrap();
        let err = sink
            .send(Element::Records(vec![Fussy::Fine(2), Fussy::Bad]))
            .unwrap_err();
        assert!(err.to_string().contains("does not serialise"), "{err}");
        sink.send(Element::Records(vec![Fussy::Fine(3)])).unwrap();
        sink.flush().unwrap();
        let wire = wire.lock().unwrap();
        assert_eq!(
            wire.frames.len(),
            1,
            "only the frame started after the failure"
        );
        let (rx, mut decode) = remote_receiver::<Fussy, Fussy>(1, same);
        decode(&wire.frames[0][FRAME_HEADER..]).unwrap();
        assert!(
            matches!(rx.try_recv().unwrap(), Element::Records(b) if matches!(b[..], [Fussy::Fine(3)]))
        );
    }

    #[test]
    fn a_garbled_frame_and_a_producer_beyond_its_credits_are_errors_not_panics() {
        let (_rx, mut decode) = remote_receiver::<u64, u64>(1, same);
        let err = decode(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
        let frame = crate::wire_format::encode(&Element::<u64>::Records(vec![1])).unwrap();
        decode(&frame).unwrap();
        let err = decode(&frame).unwrap_err();
        assert!(err.contains("credits"), "{err}");
    }

    #[test]
    fn an_announced_barrier_goes_out_as_a_priority_frame_to_the_consumers_control_channel() {
        let wire = Arc::new(std::sync::Mutex::new(Loopback::default()));
        let sink = remote_sink::<u64>(Box::new(Shared(wire.clone())));
        sink.send(Element::Records(vec![1, 2])).unwrap();
        let barrier = checkpoint(9, weir_core::BarrierAlignment::Unaligned);
        sink.announce(barrier).unwrap();
        {
            let wire = wire.lock().unwrap();
            assert!(
                wire.frames.is_empty(),
                "the records still fill their frame: the announcement is no data frame"
            );
            assert_eq!(wire.priority.len(), 1);
        }
        sink.flush().unwrap();
        let wire = wire.lock().unwrap();
        assert_eq!(wire.frames.len(), 1);
        let (control, controls) = crossbeam_channel::unbounded();
        let mut decode = priority_receiver(control);
        decode(&wire.priority[0][FRAME_HEADER..]).unwrap();
        assert!(matches!(
            controls.try_recv().unwrap(),
            TaskControl::PriorityBarrier(b) if b == barrier
        ));
    }

    #[test]
    fn a_priority_frame_that_is_no_announced_barrier_is_an_error_and_reaches_no_subtask() {
        let (control, controls) = crossbeam_channel::unbounded();
        let mut decode = priority_receiver(control);
        let err = decode(&[0xff, 0xff]).unwrap_err();
        assert!(err.contains("not a barrier"), "{err}");
        let aligned = checkpoint(4, weir_core::BarrierAlignment::Aligned);
        let err = decode(&crate::wire_format::encode(&aligned).unwrap()).unwrap_err();
        assert!(err.contains("does not overtake"), "{err}");
        assert!(controls.try_recv().is_err());
    }

    #[test]
    fn a_remote_sink_has_room_when_its_writer_says_the_consumer_has() {
        let wire = Arc::new(std::sync::Mutex::new(Loopback::default()));
        let sink = remote_sink::<u64>(Box::new(Shared(wire.clone())));
        assert!(!sink.has_room());
        wire.lock().unwrap().room = true;
        assert!(sink.has_room());
    }
}
