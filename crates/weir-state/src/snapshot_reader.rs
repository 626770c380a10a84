//! `KeyedSnapshotReader`: validates keyed state snapshots and serves the key groups a restoring subtask owns.

use crate::chain::{Chain, ChainBlob};
use crate::entry_codec::take;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::snapshot_format::{
    Directory, BODY_OFFSET, CHECKSUM_OFFSET, KEYED_SNAPSHOT_FORMAT_VERSION, KEYED_SNAPSHOT_MAGIC,
    MIN_LEN,
};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use weir_core::KeyGroupRange;
use xxhash_rust::xxh3::xxh3_64;

/// One or more decoded keyed state snapshots, merged, ready for
/// [`KeyedStateSet::restore`](crate::KeyedStateSet::restore).
///
/// Decoding validates everything but the entries themselves: magic, format version, checksum,
/// the directory, and that every blob lies inside the buffer. Corrupt or truncated bytes are an
/// error, never a panic. Entries are decoded only for the key groups a restoring table owns.
///
/// When rescaling, a new subtask's key groups come from several old subtasks: merge their
/// snapshots ([`KeyedSnapshotReader::decode_many`] or [`KeyedSnapshotReader::merge`]), check that
/// they cover the new range ([`KeyedSnapshotReader::check_covers`]), then restore.
///
/// ```
/// use weir_state::*;
///
/// // Two old subtasks of parallelism 2 with 8 key groups...
/// let snapshots: Vec<Vec<u8>> = (0..2)
///     .map(|i| {
///         let range = KeyGroupRange::for_subtask(8, 2, i);
///         let mut s = ValueState::<u64, u64>::new("v");
///         s.init(8, range);
///         let mut frozen = Vec::new();
///         s.snapshot(&mut frozen);
///         encode_keyed_snapshot(&frozen, range).unwrap()
///     })
///     .collect();
/// // ...restored into subtask 0 of parallelism 1.
/// let reader = KeyedSnapshotReader::decode_many(snapshots.iter().map(Vec::as_slice)).unwrap();
/// reader.check_covers(KeyGroupRange::new(0, 8)).unwrap();
/// let mut s = ValueState::<u64, u64>::new("v");
/// s.init(8, KeyGroupRange::new(0, 8));
/// s.restore(&reader).unwrap();
/// ```
#[derive(Default)]
pub struct KeyedSnapshotReader {
    buffers: Vec<Arc<Vec<u8>>>,
    max_parallelism: Option<u32>,
    /// The key-group range of every merged snapshot, pairwise disjoint.
    covered: Vec<KeyGroupRange>,
    tables: Vec<TableIndex>,
}

pub(crate) struct TableIndex {
    pub(crate) name: String,
    pub(crate) kind: TableKind,
    /// Per key group, its chain: the full contents, then deltas in order.
    pub(crate) blobs: BTreeMap<u32, Vec<Blob>>,
}

/// A validated byte range of one buffer.
#[derive(Clone)]
pub(crate) struct Blob {
    pub(crate) buffer: usize,
    pub(crate) bytes: Range<usize>,
    pub(crate) delta: bool,
    /// Where the blob lies in a shared file, for blobs of incremental snapshots.
    pub(crate) origin: Option<ChainBlob>,
}

/// One blob of a key group's chain, as [`KeyedSnapshotReader::key_group_blobs`] serves it.
pub struct KeyGroupBlob<'a> {
    /// The encoded entries: a full key group, or a delta (see
    /// [`FrozenTable::encode_key_group_delta`](crate::FrozenTable::encode_key_group_delta)).
    pub bytes: &'a [u8],
    pub delta: bool,
}

impl KeyedSnapshotReader {
    /// Decodes and validates one snapshot made by
    /// [`encode_keyed_snapshot`](crate::encode_keyed_snapshot), copying the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        Self::decode_vec(bytes.to_vec())
    }

    /// Like [`KeyedSnapshotReader::decode`], taking ownership of the bytes instead of copying.
    pub fn decode_vec(bytes: Vec<u8>) -> Result<Self, StateError> {
        let (directory, body_len) = validate(&bytes)?;
        let mut tables: Vec<TableIndex> = Vec::with_capacity(directory.tables.len());
        for table in directory.tables {
            if tables.iter().any(|t| t.name == table.name) {
                return Err(corrupt(format!("table '{}' is listed twice", table.name)));
            }
            let mut blobs = BTreeMap::new();
            for blob in table.blobs {
                if !directory.key_groups.contains(blob.key_group) {
                    return Err(corrupt(format!(
                        "table '{}' lists key group {} outside the snapshot's range {}",
                        table.name, blob.key_group, directory.key_groups
                    )));
                }
                let bytes = blob_range(blob.offset, blob.len, body_len).ok_or_else(|| {
                    corrupt(format!(
                        "table '{}', key group {}: blob {}+{} lies outside the {body_len} bytes of blobs",
                        table.name, blob.key_group, blob.offset, blob.len
                    ))
                })?;
                let blob_ref = Blob {
                    buffer: 0,
                    bytes,
                    delta: false,
                    origin: None,
                };
                if blobs.insert(blob.key_group, vec![blob_ref]).is_some() {
                    return Err(corrupt(format!(
                        "table '{}' lists key group {} twice",
                        table.name, blob.key_group
                    )));
                }
            }
            if blobs.len() != directory.key_groups.len() as usize {
                return Err(corrupt(format!(
                    "table '{}' has {} of the {} key groups of the snapshot's range {}",
                    table.name,
                    blobs.len(),
                    directory.key_groups.len(),
                    directory.key_groups
                )));
            }
            tables.push(TableIndex {
                name: table.name,
                kind: table.kind,
                blobs,
            });
        }
        Ok(KeyedSnapshotReader {
            buffers: vec![Arc::new(bytes)],
            max_parallelism: (directory.max_parallelism != 0).then_some(directory.max_parallelism),
            covered: vec![directory.key_groups],
            tables,
        })
    }

    /// Decodes several snapshots (for example those of every old subtask whose key groups
    /// overlap a new subtask's range) and merges them.
    pub fn decode_many<'a>(
        snapshots: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Self, StateError> {
        let readers = snapshots
            .into_iter()
            .map(Self::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Self::merge(readers)
    }

    /// Merges snapshots of distinct key groups into one reader. Errors if two snapshots hold the
    /// same key group, use different max parallelisms, or declare one table as different kinds.
    pub fn merge(readers: Vec<KeyedSnapshotReader>) -> Result<Self, StateError> {
        let mut merged = KeyedSnapshotReader::default();
        for reader in readers {
            merged.absorb(reader)?;
        }
        Ok(merged)
    }

    /// Adds the tables of `other`, a snapshot of *other* tables of the same subtask (the heap
    /// tables beside a RocksDB snapshot), keeping only the key groups this reader covers.
    pub fn add_tables(&mut self, mut other: KeyedSnapshotReader) -> Result<(), StateError> {
        for table in &mut other.tables {
            if self.tables.iter().any(|t| t.name == table.name) {
                return Err(corrupt(format!(
                    "table '{}' is in the snapshot twice",
                    table.name
                )));
            }
            let covered = &self.covered;
            table
                .blobs
                .retain(|key_group, _| covered.iter().any(|r| r.contains(*key_group)));
        }
        other.covered.clear();
        self.absorb(other)
    }

    fn absorb(&mut self, other: KeyedSnapshotReader) -> Result<(), StateError> {
        match (self.max_parallelism, other.max_parallelism) {
            (Some(expected), Some(snapshot)) if expected != snapshot => {
                return Err(StateError::MaxParallelismMismatch { snapshot, expected })
            }
            (None, found) => self.max_parallelism = found,
            _ => {}
        }
        for range in &other.covered {
            let overlap = self.covered.iter().find_map(|mine| {
                let start = mine.start.max(range.start);
                (start < mine.end.min(range.end)).then_some(start)
            });
            if let Some(key_group) = overlap {
                return Err(StateError::OverlappingSnapshots { key_group });
            }
        }
        let buffer_base = self.buffers.len();
        self.buffers.extend(other.buffers);
        self.covered.extend(other.covered);
        for table in other.tables {
            let blobs = table.blobs.into_iter().map(|(key_group, chain)| {
                let chain = chain
                    .into_iter()
                    .map(|blob| Blob {
                        buffer: blob.buffer + buffer_base,
                        ..blob
                    })
                    .collect();
                (key_group, chain)
            });
            match self.tables.iter_mut().find(|t| t.name == table.name) {
                Some(mine) if mine.kind != table.kind => {
                    return Err(StateError::KindMismatch {
                        table: table.name,
                        expected: mine.kind,
                        found: table.kind,
                    })
                }
                // Key groups are disjoint: the covered ranges are, and blobs lie inside them.
                Some(mine) => mine.blobs.extend(blobs),
                None => self.tables.push(TableIndex {
                    name: table.name,
                    kind: table.kind,
                    blobs: blobs.collect(),
                }),
            }
        }
        Ok(())
    }

    /// The max parallelism the snapshots were written with; `None` if they hold no tables.
    pub fn max_parallelism(&self) -> Option<u32> {
        self.max_parallelism
    }

    /// The key-group ranges of the merged snapshots.
    pub fn key_group_ranges(&self) -> &[KeyGroupRange] {
        &self.covered
    }

    /// Whether one of the merged snapshots holds `key_group`.
    pub fn covers(&self, key_group: u32) -> bool {
        self.covered.iter().any(|r| r.contains(key_group))
    }

    /// Errors with the first key group of `range` that no merged snapshot holds. The runtime
    /// calls it before a restore, so that a missing subtask snapshot is not mistaken for empty
    /// state.
    pub fn check_covers(&self, range: KeyGroupRange) -> Result<(), StateError> {
        match range.iter().find(|&g| !self.covers(g)) {
            Some(key_group) => Err(StateError::MissingKeyGroup { key_group, range }),
            None => Ok(()),
        }
    }

    /// The name and kind of every table, in the order of the first snapshot that has it.
    pub fn tables(&self) -> impl Iterator<Item = (&str, TableKind)> {
        self.tables.iter().map(|t| (t.name.as_str(), t.kind))
    }

    /// The kind of table `name`, if the snapshots have it.
    pub fn table_kind(&self, name: &str) -> Option<TableKind> {
        self.table(name).map(|t| t.kind)
    }

    /// The chain of `key_group` of table `name`: its full contents as
    /// [`FrozenTable::encode_key_group`](crate::FrozenTable::encode_key_group) wrote them, then
    /// the deltas of later incremental checkpoints, in order. Empty if the snapshots lack it.
    pub fn key_group_blobs(
        &self,
        name: &str,
        key_group: u32,
    ) -> impl Iterator<Item = KeyGroupBlob<'_>> {
        self.table(name)
            .and_then(|t| t.blobs.get(&key_group))
            .into_iter()
            .flatten()
            .map(|blob| KeyGroupBlob {
                bytes: &self.buffers[blob.buffer][blob.bytes.clone()],
                delta: blob.delta,
            })
    }

    /// The chain of shared-file blobs that holds `key_group` of table `name`, if the snapshot
    /// came from an incremental checkpoint: what a later checkpoint may reference instead of
    /// writing the key group again.
    pub fn key_group_chain(&self, name: &str, key_group: u32) -> Option<Chain> {
        let chain = self.table(name)?.blobs.get(&key_group)?;
        chain
            .iter()
            .map(|b| b.origin.clone())
            .collect::<Option<Vec<ChainBlob>>>()
            .filter(|c| !c.is_empty())
            .map(Chain::from)
    }

    /// Forgets where the blobs lie in shared files: [`key_group_chain`](Self::key_group_chain)
    /// then returns `None` everywhere, and a subtask restored from this reader writes its first
    /// incremental checkpoint in full. For a restore from a snapshot the job does not own (a
    /// savepoint, or another job's retained checkpoint): the job's checkpoints must never
    /// depend on its files.
    pub fn detach_from_shared_files(&mut self) {
        for table in &mut self.tables {
            for chain in table.blobs.values_mut() {
                for blob in chain {
                    blob.origin = None;
                }
            }
        }
    }

    /// Builds a reader from parts validated by the incremental snapshot format.
    pub(crate) fn from_parts(
        buffers: Vec<Arc<Vec<u8>>>,
        max_parallelism: u32,
        covered: KeyGroupRange,
        tables: Vec<TableIndex>,
    ) -> Self {
        KeyedSnapshotReader {
            buffers,
            max_parallelism: (max_parallelism != 0).then_some(max_parallelism),
            covered: vec![covered],
            tables,
        }
    }

    fn table(&self, name: &str) -> Option<&TableIndex> {
        self.tables.iter().find(|t| t.name == name)
    }
}

impl fmt::Debug for KeyedSnapshotReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedSnapshotReader")
            .field("max_parallelism", &self.max_parallelism)
            .field("key_groups", &self.covered)
            .field("tables", &self.tables().collect::<Vec<_>>())
            .field(
                "bytes",
                &self.buffers.iter().map(|b| b.len()).sum::<usize>(),
            )
            .finish()
    }
}

/// Checks the preamble and checksum and decodes the directory; returns it with the length of
/// the blob section, which ends where the directory starts.
fn validate(bytes: &[u8]) -> Result<(Directory, usize), StateError> {
    if bytes.len() < MIN_LEN {
        return Err(corrupt(format!(
            "{} bytes is shorter than the smallest snapshot ({MIN_LEN} bytes); truncated?",
            bytes.len()
        )));
    }
    if bytes[..8] != KEYED_SNAPSHOT_MAGIC {
        return Err(corrupt(
            "not a Weir keyed state snapshot (bad magic)".to_string(),
        ));
    }
    let version = u32::from_le_bytes(array(&bytes[8..CHECKSUM_OFFSET]));
    if version != KEYED_SNAPSHOT_FORMAT_VERSION {
        return Err(StateError::UnsupportedVersion {
            found: version,
            supported: KEYED_SNAPSHOT_FORMAT_VERSION,
        });
    }
    let stored = u64::from_le_bytes(array(&bytes[CHECKSUM_OFFSET..BODY_OFFSET]));
    let actual = xxh3_64(&bytes[BODY_OFFSET..]);
    if stored != actual {
        return Err(corrupt(format!(
            "checksum mismatch (stored {stored:#018x}, computed {actual:#018x}); truncated or damaged"
        )));
    }
    let len_at = bytes.len() - 4;
    let directory_len = u32::from_le_bytes(array(&bytes[len_at..])) as usize;
    let directory_start = len_at
        .checked_sub(directory_len)
        .filter(|&s| s >= BODY_OFFSET)
        .ok_or_else(|| {
            corrupt(format!(
                "directory length {directory_len} exceeds the snapshot"
            ))
        })?;
    let (directory, rest): (Directory, _) = take(&bytes[directory_start..len_at])
        .map_err(|e| corrupt(format!("unreadable directory: {e}")))?;
    if !rest.is_empty() {
        return Err(corrupt("trailing bytes after the directory".to_string()));
    }
    let range = directory.key_groups;
    let fits = match directory.max_parallelism {
        0 => directory.tables.is_empty() && range.start <= range.end,
        mp => range.start <= range.end && range.end <= mp,
    };
    if !fits {
        return Err(corrupt(format!(
            "key-group range [{}, {}) does not fit max parallelism {}",
            range.start, range.end, directory.max_parallelism
        )));
    }
    Ok((directory, directory_start - BODY_OFFSET))
}

fn blob_range(offset: u64, len: u64, body_len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= body_len).then_some(BODY_OFFSET + start..BODY_OFFSET + end)
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(bytes);
    out
}

fn corrupt(reason: String) -> StateError {
    StateError::Corrupt(reason)
}
