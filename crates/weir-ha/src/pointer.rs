//! The data of a checkpoint pointer znode: which checkpoint, and where its metadata lives in
//! checkpoint storage. JSON, so that `zkCli.sh get` shows it to an operator as it is.
//!
//! ```text
//! {"version":1,"checkpoint":42,"storage":"s3://bucket/checkpoints/job","metadata":"chk-42/_metadata"}
//! ```

use serde::{Deserialize, Serialize};
use weir_core::CheckpointId;
use weir_storage::CheckpointLayout;

/// Bumped on every incompatible change; readers refuse versions they do not know.
const FORMAT_VERSION: u32 = 1;

/// A pointer from ZooKeeper to one completed checkpoint's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointPointer {
    pub version: u32,
    pub checkpoint: u64,
    /// The job's checkpoint storage root, as `CheckpointStorage::root` shows it.
    pub storage: String,
    /// The metadata file, relative to `storage`.
    pub metadata: String,
}

impl CheckpointPointer {
    pub fn new(checkpoint: CheckpointId, storage_root: String) -> CheckpointPointer {
        CheckpointPointer {
            version: FORMAT_VERSION,
            checkpoint: checkpoint.0,
            storage: storage_root,
            metadata: CheckpointLayout::metadata_file(checkpoint),
        }
    }

    /// Where the metadata is, for messages.
    pub fn location(&self) -> String {
        format!("{}/{}", self.storage, self.metadata)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a pointer of strings and numbers always serialises")
    }

    /// Decodes a pointer and checks it names checkpoint `id`; the error says what is wrong.
    pub fn decode(bytes: &[u8], id: CheckpointId) -> Result<CheckpointPointer, String> {
        let pointer: CheckpointPointer =
            serde_json::from_slice(bytes).map_err(|e| format!("not a checkpoint pointer: {e}"))?;
        if pointer.version != FORMAT_VERSION {
            return Err(format!(
                "pointer format version {}, this Weir reads version {FORMAT_VERSION}",
                pointer.version
            ));
        }
        if pointer.checkpoint != id.0 {
            return Err(format!(
                "the pointer of checkpoint {id} names checkpoint {}",
                pointer.checkpoint
            ));
        }
        if pointer.metadata != CheckpointLayout::metadata_file(id) {
            return Err(format!(
                "unexpected metadata path '{}' for checkpoint {id}",
                pointer.metadata
            ));
        }
        Ok(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_as_readable_json() {
        let p = CheckpointPointer::new(CheckpointId(42), "/ckpt/job".into());
        let bytes = p.encode();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"version":1,"checkpoint":42,"storage":"/ckpt/job","metadata":"chk-42/_metadata"}"#
        );
        assert_eq!(
            CheckpointPointer::decode(&bytes, CheckpointId(42)).unwrap(),
            p
        );
        assert_eq!(p.location(), "/ckpt/job/chk-42/_metadata");
    }

    #[test]
    fn a_pointer_for_another_id_or_in_another_format_is_refused() {
        let bytes = CheckpointPointer::new(CheckpointId(42), "/c".into()).encode();
        let e = CheckpointPointer::decode(&bytes, CheckpointId(43)).unwrap_err();
        assert!(e.contains("names checkpoint 42"), "{e}");
        assert!(CheckpointPointer::decode(b"garbage", CheckpointId(1))
            .unwrap_err()
            .contains("not a checkpoint pointer"));
        let future = br#"{"version":9,"checkpoint":1,"storage":"/c","metadata":"chk-1/_metadata"}"#;
        assert!(CheckpointPointer::decode(future, CheckpointId(1))
            .unwrap_err()
            .contains("version 9"));
    }
}
