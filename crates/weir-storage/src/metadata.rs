//! The `_metadata` format: what a completed checkpoint is, framed so that a torn or corrupt
//! file is always detected.
//!
//! A metadata file is `WEIRMETA`, a format version (u32 LE), the payload length (u64 LE), the
//! payload (postcard), and the CRC-32C of the payload (u32 LE).

use crate::StorageError;
use serde::{Deserialize, Serialize};
use weir_checkpoint::CompletedCheckpoint;
use weir_core::OperatorId;

const MAGIC: &[u8; 8] = b"WEIRMETA";
/// Bumped on every incompatible change; readers refuse versions they do not know.
pub const FORMAT_VERSION: u32 = 1;
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
        if version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {version}, this Weir reads version {FORMAT_VERSION}"
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
        postcard::from_bytes(payload).map_err(|e| corrupt(format!("undecodable payload: {e}")))
    }
}
