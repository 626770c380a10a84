//! What travels on a channel between subtasks: record batches and in-band control elements.

use crate::ids::CheckpointId;
use serde::{Deserialize, Serialize};

/// A checkpoint or a savepoint. Savepoints are never subsumed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum CheckpointKind {
    Checkpoint,
    Savepoint,
}

/// The marker a source injects into its output when a checkpoint starts. Everything before it
/// belongs to the checkpoint's state; everything after it does not.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Barrier {
    pub id: CheckpointId,
    /// Trigger time, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    pub kind: CheckpointKind,
    /// An unaligned checkpoint's barrier: it overtakes the data queued ahead of it, and that
    /// data is stored with the checkpoint (see the runtime's input gate). Savepoints never are.
    pub unaligned: bool,
}

/// Whether a channel's producer currently holds back the event time of its consumers.
///
/// An *idle* producer (a source with nothing to read for a while) is left out of its consumers'
/// minimum over their inputs, so it does not stall their watermark; it becomes *active* again
/// before it sends anything more that carries event time.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum WatermarkStatus {
    Active,
    Idle,
}

/// One element of a channel. Records always travel in batches.
#[derive(Debug, Serialize, Deserialize)]
pub enum Element<T> {
    Records(Vec<T>),
    /// Event-time watermark, milliseconds: the producer will send no record with an earlier
    /// event time (records that do are *late*).
    Watermark(i64),
    /// The producer became idle or active again (see [`WatermarkStatus`]).
    WatermarkStatus(WatermarkStatus),
    Barrier(Barrier),
    /// The producer will send nothing more on this channel.
    EndOfInput,
}

/// What a stream's records must be: cloneable (a broadcast or a side output copies them),
/// sendable to another thread, and serialisable, so that a channel between two processes can
/// carry them (serde; the wire format is postcard). Every type that meets the bounds is `Data`.
pub trait Data: Clone + Send + Serialize + serde::de::DeserializeOwned + 'static {}

impl<T: Clone + Send + Serialize + serde::de::DeserializeOwned + 'static> Data for T {}
