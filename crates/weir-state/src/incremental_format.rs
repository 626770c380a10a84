//! The byte formats of incremental keyed snapshots: shared data files of key-group blobs, and the per-subtask manifest that chains them.
//!
//! A *data file* (shared, written once, referenced by later checkpoints while they reuse its
//! blobs):
//!
//! ```text
//! offset 0   magic           8 bytes  "WEIRKDAT"
//!        8   format version  u32 LE
//!       12   blobs           full key groups and deltas, back to back
//!  end - 8   checksum        u64 LE   xxh3_64 of every byte before it
//! ```
//!
//! A *manifest* (private to one checkpoint, one per subtask) says, for every table and key
//! group of the subtask's range, which blobs of which data files make up its contents:
//!
//! ```text
//! offset 0   magic           8 bytes  "WEIRKMAN"
//!        8   format version  u32 LE
//!       12   checksum        u64 LE   xxh3_64 of the body
//!       20   body            postcard: max parallelism, key-group range, the data files
//!                            (path, size, CRC-32C), and per table its name, kind and chains
//! ```

use crate::chain::{Chain, ChainBlob, SharedStateFile};
use crate::encode_buffer::EncodeBuffer;
use crate::entry_codec::TableKind;
use crate::error::StateError;
use crate::frozen_table::FrozenTable;
use crate::incremental::{GroupPlan, KeyedSnapshotPlan};
use crate::snapshot_reader::{Blob, KeyedSnapshotReader, TableIndex};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_core::KeyGroupRange;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Data files are encoded in chunks of about this many bytes, reused from one checkpoint to the
/// next (see [`EncodeBuffer`]).
const CHUNK_BYTES: usize = 256 << 10;

/// The first eight bytes of a shared data file of keyed state.
pub const DATA_FILE_MAGIC: [u8; 8] = *b"WEIRKDAT";
/// The first eight bytes of an incremental snapshot's manifest.
pub const MANIFEST_MAGIC: [u8; 8] = *b"WEIRKMAN";
/// The format version of data files and manifests this build writes and reads.
pub const INCREMENTAL_FORMAT_VERSION: u32 = 1;

const DATA_HEADER_LEN: usize = 12;

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
struct BlobEntry {
    file: u32,
    offset: u64,
    len: u64,
    delta: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
struct ManifestTable {
    name: String,
    kind: TableKind,
    /// One chain per key group of the range, in order.
    chains: Vec<Vec<BlobEntry>>,
}

/// The decoded manifest of one subtask's incremental keyed snapshot.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct KeyedManifest {
    max_parallelism: u32,
    key_groups: KeyGroupRange,
    files: Vec<SharedStateFile>,
    tables: Vec<ManifestTable>,
}

/// The encoded blobs of one incremental snapshot, before the data file has a name.
pub struct IncrementalEncoding {
    /// The data file's bytes in chunks (to be written back to back), or `None` when every key
    /// group was reused. Chunks spare the copies of one growing buffer.
    pub data: Option<Vec<Vec<u8>>>,
    /// Per table, per key group: the new blob's (offset, len, delta), if one was written.
    written: Vec<Vec<Option<(u64, u64, bool)>>>,
    max_parallelism: u32,
    range: KeyGroupRange,
    tables: Vec<(String, TableKind)>,
}

/// Serialises the key groups that `plan` writes (full or delta) into one data file's bytes.
///
/// Runs on the asynchronous snapshot worker. Then name and write the data file, and call
/// [`IncrementalEncoding::finish`] with its [`SharedStateFile`] for the chains and the manifest.
/// [`encode_incremental_releasing`] does the same and lets go of each key group as soon as it
/// is done with it.
pub fn encode_incremental(
    tables: &[Box<dyn FrozenTable>],
    range: KeyGroupRange,
    plan: &KeyedSnapshotPlan,
) -> Result<IncrementalEncoding, StateError> {
    let mut sources: Vec<Keep<'_>> = tables.iter().map(|t| Keep(&**t)).collect();
    encode(&mut sources, range, plan)
}

/// [`encode_incremental`], releasing every key group of `tables` once encoded (or at once if
/// the plan reuses it): the task's writes to a key group stop taking the copy-on-write path
/// when its part of the snapshot is done, not when the whole snapshot is. `tables` cannot be
/// encoded again.
pub fn encode_incremental_releasing(
    tables: &mut [Box<dyn FrozenTable>],
    range: KeyGroupRange,
    plan: &KeyedSnapshotPlan,
) -> Result<IncrementalEncoding, StateError> {
    let mut sources: Vec<Release<'_>> = tables.iter_mut().map(Release).collect();
    encode(&mut sources, range, plan)
}

/// A frozen table to encode, and whether encoding lets go of its key groups.
trait Source {
    fn table(&self) -> &dyn FrozenTable;
    fn release(&mut self, key_group: u32);
}

struct Keep<'a>(&'a dyn FrozenTable);

impl Source for Keep<'_> {
    fn table(&self) -> &dyn FrozenTable {
        self.0
    }
    fn release(&mut self, _key_group: u32) {}
}

struct Release<'a>(&'a mut Box<dyn FrozenTable>);

impl Source for Release<'_> {
    fn table(&self) -> &dyn FrozenTable {
        &**self.0
    }
    fn release(&mut self, key_group: u32) {
        self.0.release_key_group(key_group);
    }
}

fn encode<S: Source>(
    tables: &mut [S],
    range: KeyGroupRange,
    plan: &KeyedSnapshotPlan,
) -> Result<IncrementalEncoding, StateError> {
    if plan.tables.len() != tables.len() {
        return Err(StateError::Encode(format!(
            "the plan covers {} tables, the snapshot has {}",
            plan.tables.len(),
            tables.len()
        )));
    }
    let max_parallelism = tables.first().map_or(0, |t| t.table().max_parallelism());
    let names = tables
        .iter()
        .map(|t| (t.table().name().to_string(), t.table().kind()))
        .collect();
    let mut data = EncodeBuffer::chunked(CHUNK_BYTES);
    data.bytes().extend_from_slice(&DATA_FILE_MAGIC);
    data.bytes()
        .extend_from_slice(&INCREMENTAL_FORMAT_VERSION.to_le_bytes());
    let mut written = Vec::with_capacity(tables.len());
    let mut any = false;
    for (source, table_plan) in tables.iter_mut().zip(&plan.tables) {
        let held = source.table().key_groups();
        if held != range || table_plan.groups.len() != range.len() as usize {
            return Err(StateError::Encode(format!(
                "state table '{}' holds key groups {held}, the snapshot's range is {range}",
                source.table().name(),
            )));
        }
        let mut blobs = Vec::with_capacity(range.len() as usize);
        for (key_group, group_plan) in range.iter().zip(&table_plan.groups) {
            let start = data.len();
            let delta = match group_plan {
                GroupPlan::Reuse(_) => None,
                GroupPlan::Full => {
                    source.table().encode_key_group(key_group, &mut data)?;
                    Some(false)
                }
                GroupPlan::Delta { since_epoch, .. } => {
                    let table = source.table();
                    table.encode_key_group_delta(key_group, *since_epoch, &mut data)?;
                    Some(true)
                }
            };
            source.release(key_group);
            any |= delta.is_some();
            blobs.push(delta.map(|delta| (start, data.len() - start, delta)));
        }
        written.push(blobs);
    }
    let data = any.then(|| {
        let mut chunks = data.into_chunks();
        let mut hasher = Xxh3::new();
        for chunk in &chunks {
            hasher.update(chunk);
        }
        let checksum = hasher.digest();
        if let Some(last) = chunks.last_mut() {
            last.extend_from_slice(&checksum.to_le_bytes());
        }
        chunks
    });
    Ok(IncrementalEncoding {
        data,
        written,
        max_parallelism,
        range,
        tables: names,
    })
}

impl IncrementalEncoding {
    /// The chains of every (table, key group) once the data file is `file` (ignored when no
    /// data file was needed), and the manifest's bytes.
    pub fn finish(
        self,
        plan: &KeyedSnapshotPlan,
        file: Option<Arc<SharedStateFile>>,
    ) -> Result<(Vec<Vec<Chain>>, Vec<u8>), StateError> {
        let mut chains = Vec::with_capacity(self.written.len());
        for (table_plan, blobs) in plan.tables.iter().zip(&self.written) {
            let mut table_chains = Vec::with_capacity(blobs.len());
            for (group_plan, blob) in table_plan.groups.iter().zip(blobs) {
                let new_blob = |(offset, len, delta): (u64, u64, bool)| {
                    file.clone()
                        .map(|file| ChainBlob {
                            file,
                            offset,
                            len,
                            delta,
                        })
                        .ok_or_else(|| {
                            StateError::Encode("blobs were written without a data file".into())
                        })
                };
                let chain: Chain = match (group_plan, blob) {
                    (GroupPlan::Reuse(base), _) => base.clone(),
                    (GroupPlan::Delta { base, .. }, Some(b)) => {
                        let mut c = base.to_vec();
                        c.push(new_blob(*b)?);
                        Chain::from(c)
                    }
                    (GroupPlan::Full, Some(b)) => Chain::from(vec![new_blob(*b)?]),
                    (_, None) => {
                        return Err(StateError::Encode(
                            "a planned key group was not written".into(),
                        ))
                    }
                };
                table_chains.push(chain);
            }
            chains.push(table_chains);
        }
        let manifest = encode_manifest(self.max_parallelism, self.range, &self.tables, &chains)?;
        Ok((chains, manifest))
    }
}

fn encode_manifest(
    max_parallelism: u32,
    range: KeyGroupRange,
    tables: &[(String, TableKind)],
    chains: &[Vec<Chain>],
) -> Result<Vec<u8>, StateError> {
    let mut files: Vec<SharedStateFile> = Vec::new();
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut manifest_tables = Vec::with_capacity(tables.len());
    for ((name, kind), table_chains) in tables.iter().zip(chains) {
        let mut entries = Vec::with_capacity(table_chains.len());
        for chain in table_chains {
            let mut blobs = Vec::with_capacity(chain.len());
            for blob in chain.iter() {
                let file = match index.get(&blob.file.path) {
                    Some(i) => *i,
                    None => {
                        let i = files.len() as u32;
                        files.push((*blob.file).clone());
                        index.insert(blob.file.path.clone(), i);
                        i
                    }
                };
                blobs.push(BlobEntry {
                    file,
                    offset: blob.offset,
                    len: blob.len,
                    delta: blob.delta,
                });
            }
            entries.push(blobs);
        }
        manifest_tables.push(ManifestTable {
            name: name.clone(),
            kind: *kind,
            chains: entries,
        });
    }
    let manifest = KeyedManifest {
        max_parallelism,
        key_groups: range,
        files,
        tables: manifest_tables,
    };
    crate::envelope::seal(
        &MANIFEST_MAGIC,
        INCREMENTAL_FORMAT_VERSION,
        &manifest,
        "manifest",
    )
}

/// Whether `bytes` start like a manifest (rather than a self-contained keyed snapshot).
pub fn is_manifest(bytes: &[u8]) -> bool {
    bytes.starts_with(&MANIFEST_MAGIC)
}

fn corrupt(what: &str, reason: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("{what}: {reason}"))
}

impl KeyedManifest {
    /// Decodes and validates a manifest; corrupt or truncated bytes are an error.
    pub fn decode(bytes: &[u8]) -> Result<KeyedManifest, StateError> {
        let manifest: KeyedManifest = crate::envelope::open(
            bytes,
            &MANIFEST_MAGIC,
            INCREMENTAL_FORMAT_VERSION,
            "manifest",
        )?;
        manifest.validate()?;
        Ok(manifest)
    }

    fn validate(&self) -> Result<(), StateError> {
        let range = self.key_groups;
        if range.start > range.end
            || (self.max_parallelism != 0 && range.end > self.max_parallelism)
        {
            return Err(corrupt("manifest", format!("bad key-group range {range}")));
        }
        for table in &self.tables {
            if table.chains.len() != range.len() as usize {
                return Err(corrupt(
                    "manifest",
                    format!("table '{}' lacks key groups of {range}", table.name),
                ));
            }
            for chain in &table.chains {
                if chain.iter().any(|b| b.file as usize >= self.files.len()) {
                    return Err(corrupt(
                        "manifest",
                        format!("table '{}' names an unknown file", table.name),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The key groups the manifest describes.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.key_groups
    }

    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// Every data file the manifest references.
    pub fn files(&self) -> &[SharedStateFile] {
        &self.files
    }

    /// The tables: name, kind, and per key group the number of blobs and their bytes.
    pub fn tables(&self) -> impl Iterator<Item = (&str, TableKind)> {
        self.tables.iter().map(|t| (t.name.as_str(), t.kind))
    }

    /// The bytes of state the manifest references (the full size of the snapshot).
    pub fn referenced_bytes(&self) -> u64 {
        self.tables
            .iter()
            .flat_map(|t| t.chains.iter().flatten())
            .map(|b| b.len)
            .sum()
    }

    /// The longest chain of any key group.
    pub fn longest_chain(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| t.chains.iter().map(Vec::len))
            .max()
            .unwrap_or(0)
    }

    /// The data files holding blobs of key groups in `range`.
    pub fn files_for(&self, range: KeyGroupRange) -> Vec<&SharedStateFile> {
        let mut used = vec![false; self.files.len()];
        for table in &self.tables {
            for (key_group, chain) in self.key_groups.iter().zip(&table.chains) {
                if range.contains(key_group) {
                    for blob in chain {
                        used[blob.file as usize] = true;
                    }
                }
            }
        }
        self.files
            .iter()
            .zip(used)
            .filter_map(|(f, u)| u.then_some(f))
            .collect()
    }

    /// A reader over the key groups of the manifest that lie in `range`, from the bytes of the
    /// data files they need (by path; see [`KeyedManifest::files_for`]). Validates every data
    /// file (magic, version, checksum) and that every blob lies inside its file.
    pub fn reader(
        &self,
        range: KeyGroupRange,
        mut files: HashMap<String, Vec<u8>>,
    ) -> Result<KeyedSnapshotReader, StateError> {
        // Blobs index into whole files: one buffer per file, never copied.
        let covered = KeyGroupRange::new(
            self.key_groups.start.max(range.start),
            self.key_groups
                .end
                .min(range.end)
                .max(self.key_groups.start.max(range.start)),
        );
        let mut buffers: Vec<Arc<Vec<u8>>> = Vec::new();
        let mut buffer_of: HashMap<u32, usize> = HashMap::new();
        let mut shared: HashMap<u32, Arc<SharedStateFile>> = HashMap::new();
        let mut tables = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            let mut blobs = BTreeMap::new();
            for (key_group, chain) in self.key_groups.iter().zip(&table.chains) {
                if !covered.contains(key_group) {
                    continue;
                }
                let mut out = Vec::with_capacity(chain.len());
                for blob in chain {
                    let file = &self.files[blob.file as usize];
                    let buffer = match buffer_of.get(&blob.file) {
                        Some(b) => *b,
                        None => {
                            let bytes = files.remove(&file.path).ok_or_else(|| {
                                corrupt(&file.path, "needed by the manifest but not given")
                            })?;
                            validate_data_file(&file.path, &bytes)?;
                            buffers.push(Arc::new(bytes));
                            buffer_of.insert(blob.file, buffers.len() - 1);
                            buffers.len() - 1
                        }
                    };
                    let body_end = buffers[buffer].len() - 8;
                    let start = usize::try_from(blob.offset).ok();
                    let end = start.and_then(|s| s.checked_add(usize::try_from(blob.len).ok()?));
                    let bytes = match (start, end) {
                        (Some(s), Some(e)) if s >= DATA_HEADER_LEN && e <= body_end => s..e,
                        _ => {
                            return Err(corrupt(
                                &file.path,
                                format!(
                                    "blob {}+{} of table '{}', key group {key_group} lies outside the file",
                                    blob.offset, blob.len, table.name
                                ),
                            ))
                        }
                    };
                    let origin = shared
                        .entry(blob.file)
                        .or_insert_with(|| Arc::new(file.clone()))
                        .clone();
                    out.push(Blob {
                        buffer,
                        bytes,
                        delta: blob.delta,
                        origin: Some(ChainBlob {
                            file: origin,
                            offset: blob.offset,
                            len: blob.len,
                            delta: blob.delta,
                        }),
                    });
                }
                blobs.insert(key_group, out);
            }
            tables.push(TableIndex {
                name: table.name.clone(),
                kind: table.kind,
                blobs,
            });
        }
        Ok(KeyedSnapshotReader::from_parts(
            buffers,
            self.max_parallelism,
            covered,
            tables,
        ))
    }
}

/// Checks a data file's magic, version and trailing checksum.
pub fn validate_data_file(path: &str, bytes: &[u8]) -> Result<(), StateError> {
    if bytes.len() < DATA_HEADER_LEN + 8 {
        return Err(corrupt(
            path,
            format!("{} bytes is too short; truncated?", bytes.len()),
        ));
    }
    if !bytes.starts_with(&DATA_FILE_MAGIC) {
        return Err(corrupt(
            path,
            "not a Weir keyed state data file (bad magic)",
        ));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != INCREMENTAL_FORMAT_VERSION {
        return Err(StateError::UnsupportedVersion {
            found: version,
            supported: INCREMENTAL_FORMAT_VERSION,
        });
    }
    let body_end = bytes.len() - 8;
    let mut stored = [0; 8];
    stored.copy_from_slice(&bytes[body_end..]);
    if u64::from_le_bytes(stored) != xxh3_64(&bytes[..body_end]) {
        return Err(corrupt(path, "checksum mismatch; truncated or damaged"));
    }
    Ok(())
}
