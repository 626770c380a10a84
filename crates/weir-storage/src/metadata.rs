//! The `_metadata` format: what a completed checkpoint is, framed so that a torn or corrupt
//! file is always detected.
//!
//! A metadata file is `WEIRMETA`, a format version (u32 LE), the payload length (u64 LE), the
//! payload (postcard), and the CRC-32C of the payload (u32 LE).
//!
//! Version 2 added inline state to the handles; version 1 files (no inline state) are still
//! read.

use crate::StorageError;
use serde::{Deserialize, Serialize};
use weir_checkpoint::CompletedCheckpoint;
use weir_core::OperatorId;

const MAGIC: &[u8; 8] = b"WEIRMETA";
/// Bumped on every incompatible change; readers refuse versions they do not know.
pub const FORMAT_VERSION: u32 = 2;
const HEADER_LEN: usize = 8 + 4 + 8;

/// One operator of the job as it was when the checkpoint was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorMetadata {
    pub uid: String,
    pub id: OperatorId,
    pub parallelism: u32,
}

/// Everything needed to restore a job from a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub job_name: String,
    pub max_parallelism: u32,
    pub operators: Vec<OperatorMetadata>,
    pub checkpoint: CompletedCheckpoint,
}

impl CheckpointMetadata {
    pub fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let payload = postcard::to_stdvec(self).map_err(|e| StorageError::Encode(e.to_string()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        Ok(out)
    }

    /// Decodes and verifies a metadata file's bytes; `path` only names the file in errors.
    pub fn decode(bytes: &[u8], path: &str) -> Result<CheckpointMetadata, StorageError> {
        let corrupt = |reason: String| StorageError::Corrupt {
            path: path.to_string(),
            reason,
        };
        if bytes.len() < HEADER_LEN + 4 {
            return Err(corrupt(format!("truncated ({} bytes)", bytes.len())));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("not a Weir metadata file (bad magic)".into()));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION && version != v1::VERSION {
            return Err(corrupt(format!(
                "format version {version}, this Weir reads versions {} and {FORMAT_VERSION}",
                v1::VERSION
            )));
        }
        let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let expected = (HEADER_LEN as u64).saturating_add(len).saturating_add(4);
        if bytes.len() as u64 != expected {
            return Err(corrupt(format!(
                "truncated or torn: {} bytes, header says {expected}",
                bytes.len()
            )));
        }
        let payload = &bytes[HEADER_LEN..HEADER_LEN + len as usize];
        let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        let actual = crc32c::crc32c(payload);
        if stored != actual {
            return Err(corrupt(format!(
                "checksum mismatch (stored {stored:08x}, computed {actual:08x})"
            )));
        }
        let undecodable = |e: postcard::Error| corrupt(format!("undecodable payload: {e}"));
        if version == v1::VERSION {
            return postcard::from_bytes::<v1::CheckpointMetadata>(payload)
                .map(CheckpointMetadata::from)
                .map_err(undecodable);
        }
        postcard::from_bytes(payload).map_err(undecodable)
    }
}

/// The version 1 payload: the same structures, without inline state in the handles.
pub(crate) mod v1 {
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;
    use weir_core::{CheckpointId, CheckpointKind, HandleKind, JobId, SubtaskId};

    pub const VERSION: u32 = 1;

    #[derive(Serialize, Deserialize)]
    pub struct CheckpointMetadata {
        pub job_name: String,
        pub max_parallelism: u32,
        pub operators: Vec<super::OperatorMetadata>,
        pub checkpoint: CompletedCheckpoint,
    }

    #[derive(Serialize, Deserialize)]
    pub struct CompletedCheckpoint {
        pub job: JobId,
        pub id: CheckpointId,
        pub kind: CheckpointKind,
        pub trigger_timestamp_ms: u64,
        pub completion_timestamp_ms: u64,
        pub subtask_states: BTreeMap<SubtaskId, SubtaskState>,
    }

    #[derive(Serialize, Deserialize)]
    pub struct SubtaskState {
        pub handles: Vec<StateHandle>,
        pub state_size: u64,
        pub persisted_size: u64,
    }

    #[derive(Serialize, Deserialize)]
    pub struct StateHandle {
        pub path: String,
        pub size: u64,
        pub checksum: u32,
        pub kind: HandleKind,
        pub shared: bool,
    }

    impl From<CheckpointMetadata> for super::CheckpointMetadata {
        fn from(m: CheckpointMetadata) -> Self {
            let c = m.checkpoint;
            let subtask_states = c
                .subtask_states
                .into_iter()
                .map(|(subtask, s)| {
                    let handles = s
                        .handles
                        .into_iter()
                        .map(|h| weir_core::StateHandle {
                            path: h.path,
                            size: h.size,
                            checksum: h.checksum,
                            kind: h.kind,
                            shared: h.shared,
                            inline: None,
                        })
                        .collect();
                    let state = weir_core::SubtaskState {
                        handles,
                        state_size: s.state_size,
                        persisted_size: s.persisted_size,
                    };
                    (subtask, state)
                })
                .collect();
            super::CheckpointMetadata {
                job_name: m.job_name,
                max_parallelism: m.max_parallelism,
                operators: m.operators,
                checkpoint: weir_checkpoint::CompletedCheckpoint {
                    job: c.job,
                    id: c.id,
                    kind: c.kind,
                    trigger_timestamp_ms: c.trigger_timestamp_ms,
                    completion_timestamp_ms: c.completion_timestamp_ms,
                    subtask_states,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_core::{
        CheckpointId, CheckpointKind, HandleKind, JobId, KeyGroupRange, SubtaskId, SubtaskState,
    };

    fn framed(version: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        out
    }

    #[test]
    fn version_1_metadata_is_still_read_as_state_in_files() {
        let operator = OperatorId::from_uid("count");
        let subtask = SubtaskId::new(operator, 1);
        let kind = HandleKind::Keyed {
            key_groups: KeyGroupRange::new(64, 128),
        };
        let old = v1::CheckpointMetadata {
            job_name: "job".into(),
            max_parallelism: 128,
            operators: vec![OperatorMetadata {
                uid: "count".into(),
                id: operator,
                parallelism: 2,
            }],
            checkpoint: v1::CompletedCheckpoint {
                job: JobId(7),
                id: CheckpointId(3),
                kind: CheckpointKind::Checkpoint,
                trigger_timestamp_ms: 10,
                completion_timestamp_ms: 20,
                subtask_states: BTreeMap::from([(
                    subtask,
                    v1::SubtaskState {
                        handles: vec![v1::StateHandle {
                            path: "chk-3/count-1.keyed".into(),
                            size: 42,
                            checksum: 0xdead_beef,
                            kind,
                            shared: false,
                        }],
                        state_size: 42,
                        persisted_size: 42,
                    },
                )]),
            },
        };
        let bytes = framed(1, &postcard::to_stdvec(&old).unwrap());
        let read = CheckpointMetadata::decode(&bytes, "_metadata").unwrap();
        let expected = CheckpointMetadata {
            job_name: "job".into(),
            max_parallelism: 128,
            operators: old.operators.clone(),
            checkpoint: CompletedCheckpoint {
                job: JobId(7),
                id: CheckpointId(3),
                kind: CheckpointKind::Checkpoint,
                trigger_timestamp_ms: 10,
                completion_timestamp_ms: 20,
                subtask_states: BTreeMap::from([(
                    subtask,
                    SubtaskState {
                        handles: vec![weir_core::StateHandle {
                            path: "chk-3/count-1.keyed".into(),
                            size: 42,
                            checksum: 0xdead_beef,
                            kind,
                            shared: false,
                            inline: None,
                        }],
                        state_size: 42,
                        persisted_size: 42,
                    },
                )]),
            },
        };
        assert_eq!(read, expected);
        // Written again, it is the current version and reads back the same.
        let again = expected.encode().unwrap();
        assert_eq!(&again[8..12], &FORMAT_VERSION.to_le_bytes());
        assert_eq!(
            CheckpointMetadata::decode(&again, "_metadata").unwrap(),
            expected
        );
    }

    #[test]
    fn an_unknown_format_version_is_refused_naming_the_ones_this_build_reads() {
        let err = CheckpointMetadata::decode(&framed(3, b"x"), "chk-1/_metadata")
            .unwrap_err()
            .to_string();
        assert!(err.contains("chk-1/_metadata"), "{err}");
        assert!(err.contains("format version 3"), "{err}");
        assert!(err.contains("reads versions 1 and 2"), "{err}");
    }
}
