//! Partitioners: how one producer subtask's batches are spread over the consumer subtasks of
//! an edge — forward, rebalance, hash by key group, broadcast.
//!
//! Writers work a batch at a time: one dynamic call per batch, and inside it a monomorphised
//! loop over the records.

use std::marker::PhantomData;
use weir_core::{Barrier, Element, WatermarkStatus};
use weir_state::{key_group_for_hash, StableHash};

use crate::channel::ChannelSink;
use crate::error::TaskError;

/// How an edge connects producer subtasks to consumer subtasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    /// Forward if both sides have the same parallelism, otherwise rebalance (Flink's default).
    Default,
    /// Producer `i` sends to consumer `i` only.
    Forward,
    /// Batches go round-robin to every consumer.
    Rebalance,
    /// Each record goes to the consumer that owns its key's key group.
    Hash,
    /// Every record goes to every consumer.
    Broadcast,
}

/// The writing side of one edge for one producer subtask.
pub trait EdgeWriter<T>: Send {
    /// Routes a batch. Writers may buffer per consumer until a batch is full.
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError>;
    /// Sends every buffered record.
    fn flush(&mut self) -> Result<(), TaskError>;
    /// Flushes, then sends a barrier to every consumer.
    fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError>;
    /// Tells every consumer, ahead of the data queued for it, that `barrier` follows
    /// ([`ChannelSink::announce`]).
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError>;
    /// Flushes, then tells every consumer that nothing more will come.
    fn end_of_input(&mut self) -> Result<(), TaskError>;
    /// Flushes, then sends a watermark to every consumer.
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError>;
    /// Flushes, then tells every consumer that this producer became idle or active.
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError>;
    /// Whether a batch written now would not wait for a full channel: every channel it may go
    /// to has room.
    fn has_room(&self) -> bool;
}

/// Sends control elements to all channels of a writer.
fn send_all<T>(
    channels: &[Box<dyn ChannelSink<T>>],
    make: impl Fn() -> Element<T>,
) -> Result<(), TaskError> {
    channels.iter().try_for_each(|c| c.send(make()))
}

/// Forward and rebalance: whole batches, to one channel or round-robin over all.
pub struct RoundRobinWriter<T> {
    channels: Vec<Box<dyn ChannelSink<T>>>,
    next: usize,
}

impl<T> RoundRobinWriter<T> {
    pub fn new(channels: Vec<Box<dyn ChannelSink<T>>>, first: usize) -> RoundRobinWriter<T> {
        let next = first % channels.len().max(1);
        RoundRobinWriter { channels, next }
    }
}

impl<T: Send> EdgeWriter<T> for RoundRobinWriter<T> {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.channels[self.next].send(Element::Records(batch))?;
        self.next = (self.next + 1) % self.channels.len();
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        self.channels.iter().try_for_each(|c| c.flush())
    }
    fn has_room(&self) -> bool {
        self.channels[self.next].has_room()
    }
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.channels.iter().try_for_each(|c| c.announce(barrier))
    }
    fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::Barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::EndOfInput)
    }
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::Watermark(watermark))
    }
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::WatermarkStatus(status))
    }
}

/// Broadcast: every batch to every channel.
pub struct BroadcastWriter<T> {
    channels: Vec<Box<dyn ChannelSink<T>>>,
}

impl<T> BroadcastWriter<T> {
    pub fn new(channels: Vec<Box<dyn ChannelSink<T>>>) -> BroadcastWriter<T> {
        BroadcastWriter { channels }
    }
}

impl<T: Clone + Send> EdgeWriter<T> for BroadcastWriter<T> {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        if batch.is_empty() {
            return Ok(());
        }
        let (last, rest) = self.channels.split_last().expect("an edge has channels");
        for c in rest {
            c.send(Element::Records(batch.clone()))?;
        }
        last.send(Element::Records(batch))
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        self.channels.iter().try_for_each(|c| c.flush())
    }
    fn has_room(&self) -> bool {
        self.channels.iter().all(|c| c.has_room())
    }
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.channels.iter().try_for_each(|c| c.announce(barrier))
    }
    fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::Barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::EndOfInput)
    }
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::Watermark(watermark))
    }
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        send_all(&self.channels, || Element::WatermarkStatus(status))
    }
}

/// Hash partitioning: each record to the consumer owning its key group, buffered per consumer
/// and sent when a buffer holds a full batch.
pub struct HashWriter<T, K, F> {
    channels: Vec<Box<dyn ChannelSink<T>>>,
    buffers: Vec<Vec<T>>,
    /// Consumer index of every key group, precomputed so routing is one table lookup.
    owner: Vec<u32>,
    max_parallelism: u32,
    batch_size: usize,
    key: F,
    _key: PhantomData<fn() -> K>,
}

impl<T, K, F> HashWriter<T, K, F> {
    pub fn new(
        channels: Vec<Box<dyn ChannelSink<T>>>,
        key: F,
        max_parallelism: u32,
        batch_size: usize,
    ) -> HashWriter<T, K, F> {
        let p = channels.len() as u32;
        let owner = (0..max_parallelism)
            .map(|kg| weir_core::key_group::subtask_for_key_group(max_parallelism, p, kg))
            .collect();
        HashWriter {
            buffers: (0..channels.len())
                .map(|_| Vec::with_capacity(batch_size))
                .collect(),
            channels,
            owner,
            max_parallelism,
            batch_size,
            key,
            _key: PhantomData,
        }
    }
}

impl<T, K, F> EdgeWriter<T> for HashWriter<T, K, F>
where
    T: Send,
    K: StableHash,
    F: Fn(&T) -> K + Send,
{
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        for record in batch {
            let kg = key_group_for_hash((self.key)(&record).stable_hash(), self.max_parallelism);
            let target = self.owner[kg as usize] as usize;
            let buffer = &mut self.buffers[target];
            buffer.push(record);
            if buffer.len() >= self.batch_size {
                let full = std::mem::replace(buffer, Vec::with_capacity(self.batch_size));
                self.channels[target].send(Element::Records(full))?;
            }
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), TaskError> {
        for (buffer, channel) in self.buffers.iter_mut().zip(&self.channels) {
            if !buffer.is_empty() {
                let batch = std::mem::replace(buffer, Vec::with_capacity(self.batch_size));
                channel.send(Element::Records(batch))?;
            }
            channel.flush()?;
        }
        Ok(())
    }
    fn has_room(&self) -> bool {
        self.channels.iter().all(|c| c.has_room())
    }
    fn announce(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.channels.iter().try_for_each(|c| c.announce(barrier))
    }
    fn barrier(&mut self, barrier: Barrier) -> Result<(), TaskError> {
        self.flush()?;
        send_all(&self.channels, || Element::Barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), TaskError> {
        self.flush()?;
        send_all(&self.channels, || Element::EndOfInput)
    }
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        self.flush()?;
        send_all(&self.channels, || Element::Watermark(watermark))
    }
    fn watermark_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        self.flush()?;
        send_all(&self.channels, || Element::WatermarkStatus(status))
    }
}
