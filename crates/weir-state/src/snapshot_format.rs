//! The byte format of a keyed state snapshot, and its encoder (run on the asynchronous snapshot worker).
//!
//! One snapshot holds every keyed table of one subtask's operator for a range of key groups:
//!
//! ```text
//! offset 0   magic              8 bytes  "WEIRKEYS"
//!        8   format version     u32 LE   (FORMAT_VERSION)
//!       12   checksum           u64 LE   xxh3_64 of every byte from offset 20 to the end
//!       20   key-group blobs    the entries of each (table, key group), back to back
//!        …   directory          postcard: max parallelism, key-group range, and per table its
//!                               name, kind and (key group, offset, length) of every blob
//!  end - 4   directory length   u32 LE
//! ```
//!
//! The directory sits at the end so that blobs stream straight into the output buffer. Every
//! table has one blob for every key group of the range (an empty group is a short blob), so a
//! reader can take exactly the key groups it owns and knows which key groups a snapshot covers.
//! The checksum makes corruption an error rather than wrong state; the storage layer's own file
//! checksum guards the bytes at rest, this one guards the format's internal offsets.

use crate::encode_buffer::EncodeBuffer;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use serde::{Deserialize, Serialize};
use weir_core::KeyGroupRange;
use xxhash_rust::xxh3::xxh3_64;

/// The first eight bytes of every keyed state snapshot.
pub const KEYED_SNAPSHOT_MAGIC: [u8; 8] = *b"WEIRKEYS";

/// The keyed snapshot format version this build writes and reads.
pub const KEYED_SNAPSHOT_FORMAT_VERSION: u32 = 1;

/// Offset of the checksum field, and of the first blob.
pub(crate) const CHECKSUM_OFFSET: usize = 12;
pub(crate) const BODY_OFFSET: usize = 20;
/// The smallest valid snapshot: preamble plus directory length.
pub(crate) const MIN_LEN: usize = BODY_OFFSET + 4;

/// The table of contents at the end of a snapshot.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct Directory {
    /// 0 when the snapshot holds no tables (an operator without keyed state).
    pub(crate) max_parallelism: u32,
    pub(crate) key_groups: KeyGroupRange,
    pub(crate) tables: Vec<TableEntry>,
}

#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct TableEntry {
    pub(crate) name: String,
    pub(crate) kind: TableKind,
    pub(crate) blobs: Vec<BlobEntry>,
}

/// Where the entries of one key group of one table lie, relative to the first blob.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
pub(crate) struct BlobEntry {
    pub(crate) key_group: u32,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Serialises frozen tables into one self-describing snapshot holding the key groups `range`.
///
/// Runs on the asynchronous snapshot worker, from the views that
/// [`KeyedStateSet::snapshot`](crate::KeyedStateSet::snapshot) produced. Every table must hold
/// all of `range` (normally `range` is the subtask's range) and use the same max parallelism;
/// table names must be unique. Decode the result with
/// [`KeyedSnapshotReader::decode`](crate::KeyedSnapshotReader::decode).
///
/// ```
/// use weir_state::*;
///
/// let range = KeyGroupRange::new(0, 8);
/// let mut counts = ValueState::<u64, u64>::new("counts");
/// counts.init(8, range);
/// counts.set(&CurrentKey::new(&1, 8), 10);
/// let mut frozen = Vec::new();
/// counts.snapshot(&mut frozen);
///
/// let bytes = encode_keyed_snapshot(&frozen, range).unwrap();
/// assert_eq!(&bytes[..8], b"WEIRKEYS");
/// let reader = KeyedSnapshotReader::decode(&bytes).unwrap();
/// assert_eq!(reader.table_kind("counts"), Some(TableKind::Value));
/// ```
pub fn encode_keyed_snapshot(
    tables: &[Box<dyn FrozenTable>],
    range: KeyGroupRange,
) -> Result<Vec<u8>, StateError> {
    let max_parallelism = check_tables(tables, range)?;
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&KEYED_SNAPSHOT_MAGIC);
    out.extend_from_slice(&KEYED_SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // checksum, patched in last

    let mut directory = Directory {
        max_parallelism,
        key_groups: range,
        tables: Vec::with_capacity(tables.len()),
    };
    let mut body = EncodeBuffer::contiguous(out);
    for table in tables {
        let mut blobs = Vec::with_capacity(range.len() as usize);
        for key_group in range.iter() {
            let start = body.len();
            table.encode_key_group(key_group, &mut body)?;
            blobs.push(BlobEntry {
                key_group,
                offset: start - BODY_OFFSET as u64,
                len: body.len() - start,
            });
        }
        directory.tables.push(TableEntry {
            name: table.name().to_string(),
            kind: table.kind(),
            blobs,
        });
    }

    let mut out = body.into_bytes();
    let directory_start = out.len();
    crate::entry_codec::append(&directory, &mut out)
        .map_err(|e| StateError::Encode(format!("snapshot directory: {e}")))?;
    let directory_len = u32::try_from(out.len() - directory_start).map_err(|_| {
        StateError::Encode("snapshot directory exceeds 4 GiB; too many tables".to_string())
    })?;
    out.extend_from_slice(&directory_len.to_le_bytes());

    let checksum = xxh3_64(&out[BODY_OFFSET..]);
    out[CHECKSUM_OFFSET..BODY_OFFSET].copy_from_slice(&checksum.to_le_bytes());
    Ok(out)
}

/// Checks that the tables can share one snapshot of `range`; returns their max parallelism.
fn check_tables(tables: &[Box<dyn FrozenTable>], range: KeyGroupRange) -> Result<u32, StateError> {
    let Some(first) = tables.first() else {
        return Ok(0);
    };
    let max_parallelism = first.max_parallelism();
    if max_parallelism == 0 {
        return Err(StateError::NotInitialised {
            table: first.name().to_string(),
        });
    }
    if range.start > range.end || range.end > max_parallelism {
        return Err(StateError::Encode(format!(
            "key-group range {range} does not fit max parallelism {max_parallelism}"
        )));
    }
    let mut names: Vec<&str> = Vec::with_capacity(tables.len());
    for table in tables {
        if table.max_parallelism() != max_parallelism {
            return Err(StateError::Encode(format!(
                "state table '{}' uses max parallelism {} but '{}' uses {max_parallelism}",
                table.name(),
                table.max_parallelism(),
                first.name()
            )));
        }
        let held = table.key_groups();
        if !range.is_empty() && (range.start < held.start || range.end > held.end) {
            return Err(StateError::Encode(format!(
                "state table '{}' holds key groups {held}, not all of the snapshot's range {range}",
                table.name()
            )));
        }
        if names.contains(&table.name()) {
            return Err(StateError::DuplicateTable {
                name: table.name().to_string(),
            });
        }
        names.push(table.name());
    }
    Ok(max_parallelism)
}
