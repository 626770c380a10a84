//! The manifest of a RocksDB keyed snapshot written natively (an incremental checkpoint of the
//! RocksDB backend): which immutable RocksDB files, in which shared files of checkpoint
//! storage, make up one subtask's tables, and RocksDB's own small files beside them.
//!
//! The database's table files (`*.sst`) never change once written, so a checkpoint uploads only
//! those no earlier completed checkpoint uploaded and references the others; shared files are
//! reference-counted by the checkpoint coordinator like every shared file of keyed state.
//! RocksDB's small files (`CURRENT`, `MANIFEST-*`, `OPTIONS-*`) change with every checkpoint and
//! travel inside the manifest. The tables kept on the heap beside RocksDB (timers) are
//! checkpointed like any heap table, in a keyed snapshot of their own beside this manifest.
//!
//! ```text
//! offset 0   magic           8 bytes  "WEIRKLSM"
//!        8   format version  u32 LE
//!       12   checksum        u64 LE   xxh3_64 of the body
//!       20   body            postcard: max parallelism, key-group range, tables (name, kind),
//!                            table files (name, shared file), small files (name, bytes)
//! ```
//!
//! Decoding is ungated: a build without the RocksDB backend still recognises such a manifest,
//! describes it, and refuses to restore it with a clear error.

use crate::chain::SharedStateFile;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use serde::{Deserialize, Serialize};
use weir_core::KeyGroupRange;

/// The first eight bytes of a native RocksDB snapshot's manifest.
pub const LSM_MANIFEST_MAGIC: [u8; 8] = *b"WEIRKLSM";
/// The format version of the manifests this build writes and reads.
pub const LSM_MANIFEST_VERSION: u32 = 1;
/// How errors name a manifest.
const WHAT: &str = "RocksDB snapshot manifest";

/// One immutable RocksDB file of a snapshot.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LsmFile {
    /// Its name in the database's directory (`000042.sst`).
    pub name: String,
    /// Where it lies in checkpoint storage.
    pub file: SharedStateFile,
}

/// One subtask's RocksDB tables as of one checkpoint (see the [module](self) documentation).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LsmManifest {
    pub max_parallelism: u32,
    pub key_groups: KeyGroupRange,
    /// The tables RocksDB holds, each in the column family named after it.
    pub tables: Vec<(String, TableKind)>,
    /// The database's table files.
    pub files: Vec<LsmFile>,
    /// RocksDB's small files, whole.
    pub small_files: Vec<(String, Vec<u8>)>,
}

/// Whether `bytes` start like a native RocksDB snapshot's manifest.
pub fn is_lsm_manifest(bytes: &[u8]) -> bool {
    bytes.starts_with(&LSM_MANIFEST_MAGIC)
}

impl LsmManifest {
    pub fn encode(&self) -> Result<Vec<u8>, StateError> {
        crate::envelope::seal(&LSM_MANIFEST_MAGIC, LSM_MANIFEST_VERSION, self, WHAT)
    }

    /// Decodes and validates a manifest; corrupt or truncated bytes are an error, and so is a
    /// file name that is not a plain name in one directory.
    pub fn decode(bytes: &[u8]) -> Result<LsmManifest, StateError> {
        let manifest: LsmManifest =
            crate::envelope::open(bytes, &LSM_MANIFEST_MAGIC, LSM_MANIFEST_VERSION, WHAT)?;
        let names = manifest
            .files
            .iter()
            .map(|f| &f.name)
            .chain(manifest.small_files.iter().map(|(n, _)| n));
        for name in names {
            if !is_plain_name(name) {
                return Err(corrupt(format!("'{name}' is not a RocksDB file name")));
            }
        }
        if manifest.key_groups.end > manifest.max_parallelism
            || manifest.key_groups.start > manifest.key_groups.end
        {
            return Err(corrupt(format!(
                "key groups {} do not fit max parallelism {}",
                manifest.key_groups, manifest.max_parallelism
            )));
        }
        Ok(manifest)
    }

    /// The bytes of the shared files the manifest references.
    pub fn referenced_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.file.size).sum()
    }
}

/// A name RocksDB gives its files: letters, digits, `.`, `-` and `_`, never `.` or `..`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

fn corrupt(reason: String) -> StateError {
    StateError::Corrupt(format!("{WHAT}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> LsmManifest {
        LsmManifest {
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 64),
            tables: vec![("counts".into(), TableKind::Value)],
            files: vec![LsmFile {
                name: "000012.sst".into(),
                file: SharedStateFile {
                    path: "shared/op-0-3-00ff.sst".into(),
                    size: 4096,
                    checksum: 7,
                },
            }],
            small_files: vec![("CURRENT".into(), b"MANIFEST-000005\n".to_vec())],
        }
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let bytes = manifest().encode().unwrap();
        assert!(is_lsm_manifest(&bytes));
        assert_eq!(LsmManifest::decode(&bytes).unwrap(), manifest());
        for cut in [0, 10, 20, bytes.len() - 1] {
            assert!(LsmManifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let err = LsmManifest::decode(&flipped).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
    }

    #[test]
    fn a_file_name_leaving_the_directory_is_refused() {
        for name in ["../x.sst", "a/b.sst", "..", ""] {
            let mut m = manifest();
            m.files[0].name = name.into();
            let err = LsmManifest::decode(&m.encode().unwrap())
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a RocksDB file name"), "{name}: {err}");
        }
    }
}
