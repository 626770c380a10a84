//! What travels on a channel between subtasks: record batches and in-band control elements.

use crate::ids::CheckpointId;
use serde::{Deserialize, Serialize};

/// A checkpoint or a savepoint. Savepoints are never subsumed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum CheckpointKind {
    Checkpoint,
    /// A savepoint in the canonical format: every key of every state table, written alike by
    /// every state backend and restored by either (Flink's `--type canonical`, the default).
    Savepoint,
    /// A savepoint in the state backend's native format (Flink's `--type native`): a RocksDB
    /// subtask's table files as they are, streamed to storage a part at a time and opened in
    /// place on restore, so that neither side holds the state in memory. Heap state is written
    /// as in a canonical savepoint.
    NativeSavepoint,
}

/// The format of a savepoint a user asks for (Flink's `formatType`, `--type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum SavepointFormat {
    #[default]
    Canonical,
    Native,
}

impl SavepointFormat {
    /// The format Flink's REST API names `name` (`CANONICAL` or `NATIVE`).
    pub fn from_flink(name: &str) -> Option<SavepointFormat> {
        match name {
            "CANONICAL" => Some(SavepointFormat::Canonical),
            "NATIVE" => Some(SavepointFormat::Native),
            _ => None,
        }
    }

    /// Flink's REST API's name of the format.
    pub fn flink_name(self) -> &'static str {
        match self {
            SavepointFormat::Canonical => "CANONICAL",
            SavepointFormat::Native => "NATIVE",
        }
    }

    /// The kind of checkpoint a savepoint of this format is.
    pub fn kind(self) -> CheckpointKind {
        match self {
            SavepointFormat::Canonical => CheckpointKind::Savepoint,
            SavepointFormat::Native => CheckpointKind::NativeSavepoint,
        }
    }
}

impl CheckpointKind {
    /// A savepoint of either format.
    pub fn is_savepoint(self) -> bool {
        matches!(
            self,
            CheckpointKind::Savepoint | CheckpointKind::NativeSavepoint
        )
    }
}

/// The marker a source injects into its output when a checkpoint starts. Everything before it
/// belongs to the checkpoint's state; everything after it does not.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Barrier {
    pub id: CheckpointId,
    /// Trigger time, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    pub kind: CheckpointKind,
    /// Whether the barrier waits behind the data queued ahead of it or overtakes it.
    pub alignment: BarrierAlignment,
}

/// How a barrier passes the data queued ahead of it in a channel (see the runtime's input gate).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum BarrierAlignment {
    /// Waits behind the data; a subtask snapshots once the barrier arrived on all its inputs.
    /// Savepoints and a job's final checkpoint always are.
    Aligned,
    /// Overtakes the data, which is stored with the checkpoint as channel state.
    Unaligned,
    /// Starts aligned, and turns unaligned at a subtask once `timeout_ms` passed since the
    /// trigger without the subtask having aligned it.
    AlignedWithTimeout { timeout_ms: u64 },
}

impl Barrier {
    /// Whether the barrier is announced ahead of the data queued for the subtasks it goes to:
    /// it overtakes that data, or may once its timeout passes.
    pub fn announced(&self) -> bool {
        self.alignment != BarrierAlignment::Aligned
    }
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
