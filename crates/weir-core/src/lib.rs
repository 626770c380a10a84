//! Weir's shared vocabulary, used by every other crate.
//!
//! Nothing here depends on the rest of Weir. It holds the ids that name jobs, operators,
//! subtasks and checkpoints ([`ids`]), what travels on a channel ([`element`]), pointers to
//! persisted state ([`state_handle`]), key-group ranges ([`key_group`]), the clock the
//! coordinator is driven by ([`clock`]), and configuration with Flink's option names
//! ([`config`]).

pub mod clock;
pub mod config;
pub mod element;
pub mod guarantee;
pub mod ids;
pub mod key_group;
pub mod state_handle;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{CheckpointingMode, Config, ConfigError, S3Options};
pub use element::{
    Barrier, BarrierAlignment, CheckpointKind, Data, Element, SavepointFormat, WatermarkStatus,
};
pub use guarantee::DeliveryGuarantee;
pub use ids::{CheckpointId, JobId, OperatorId, SubtaskId};
pub use key_group::KeyGroupRange;
pub use state_handle::{HandleKind, StateHandle, SubtaskState};
