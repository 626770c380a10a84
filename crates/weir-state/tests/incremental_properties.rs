//! Properties of incremental keyed snapshots: whatever the interleaving of writes, snapshots,
//! completions, aborts and lost notifications, every completed checkpoint restores exactly the
//! contents as of its snapshot, and never references a file that reference counting over the
//! retained checkpoints would have deleted.

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use weir_state::*;

#[derive(Clone, Debug)]
enum Step {
    Write(Vec<Op>),
    /// Take a snapshot (checkpoint ids ascend); its worker writes the data file at once.
    Snapshot,
    /// The oldest unacknowledged snapshot acknowledges: the coordinator learns its files.
    Ack,
    /// The oldest pending snapshot completes; the task hears of it or not.
    Complete {
        notify: bool,
    },
    /// The oldest pending snapshot is aborted; the task hears of it or not.
    Abort {
        notify: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop::collection::vec(op(), 0..30).prop_map(Step::Write),
        3 => Just(Step::Snapshot),
        2 => Just(Step::Ack),
        2 => Just(Step::Complete { notify: true }),
        1 => any::<bool>().prop_map(|notify| Step::Complete { notify }),
        1 => any::<bool>().prop_map(|notify| Step::Abort { notify }),
    ]
}

/// A checkpoint store as the coordinator keeps it: retained manifests and the shared files
/// they reference, deleted when no retained or pending checkpoint references them.
struct Store {
    files: HashMap<String, Vec<u8>>,
    /// Files some acknowledgement named: the only ones the coordinator ever deletes.
    known: BTreeSet<String>,
    retained: Vec<(u64, Vec<u8>, Contents)>,
    num_retained: usize,
}

impl Store {
    fn referenced(manifest: &[u8]) -> BTreeSet<String> {
        KeyedManifest::decode(manifest)
            .expect("manifest")
            .files()
            .iter()
            .map(|f| f.path.clone())
            .collect()
    }

    fn collect_garbage(&mut self, pending: &[Pending]) {
        let mut live = BTreeSet::new();
        for (_, manifest, _) in &self.retained {
            live.extend(Self::referenced(manifest));
        }
        for p in pending.iter().filter(|p| p.acked) {
            live.extend(Self::referenced(&p.manifest));
        }
        let known = &self.known;
        self.files
            .retain(|path, _| live.contains(path) || !known.contains(path));
    }
}

/// A snapshot taken and not yet completed or aborted.
struct Pending {
    id: u64,
    manifest: Vec<u8>,
    contents: Contents,
    acked: bool,
}

/// A snapshot taken and not yet written: the worker holds its frozen tables while the task
/// keeps writing.
struct InFlight {
    id: u64,
    frozen: Vec<Box<dyn FrozenTable>>,
    plan: KeyedSnapshotPlan,
    contents: Contents,
}

/// The worker: encode, "write" the data file, record the chains.
fn write_snapshot(
    s: InFlight,
    range: KeyGroupRange,
    base: &IncrementalBase,
    files: &mut HashMap<String, Vec<u8>>,
) -> Pending {
    let encoding = encode_incremental(&s.frozen, range, &s.plan).expect("encode");
    let file = encoding.data.as_ref().map(|chunks| {
        let data = chunks.concat();
        let path = format!("shared/{}", s.id);
        let (size, checksum) = (data.len() as u64, crc32c_of(&data));
        files.insert(path.clone(), data);
        Arc::new(SharedStateFile {
            path,
            size,
            checksum,
        })
    });
    let (chains, manifest) = encoding.finish(&s.plan, file).expect("finish");
    base.record_written(&s.plan, chains);
    Pending {
        id: s.id,
        manifest,
        contents: s.contents,
        acked: false,
    }
}

fn restore(manifest: &[u8], files: &HashMap<String, Vec<u8>>, range: KeyGroupRange) -> Contents {
    let manifest = KeyedManifest::decode(manifest).expect("manifest decodes");
    let needed: HashMap<String, Vec<u8>> = manifest
        .files_for(range)
        .into_iter()
        .map(|f| {
            let bytes = files
                .get(&f.path)
                .unwrap_or_else(|| panic!("{} was deleted while referenced", f.path));
            assert_eq!(crc32c_of(bytes), f.checksum);
            (f.path.clone(), bytes.clone())
        })
        .collect();
    let reader = manifest.reader(range, needed).expect("reader");
    reader.check_covers(range).expect("covers");
    let mut t = tables();
    t.init(manifest.max_parallelism().max(1), range);
    t.restore(&reader).expect("restore");
    Contents::of(&t)
}

/// Not the real CRC-32C, but a stand-in checksum the test gives the files it "writes".
fn crc32c_of(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0u32, |h, b| h.rotate_left(5) ^ *b as u32)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn every_completed_incremental_checkpoint_restores_its_snapshot_and_keeps_its_files(
        max_parallelism in 4u32..24,
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let range = KeyGroupRange::new(0, max_parallelism);
        let mut live = tables();
        live.init(max_parallelism, range);
        let mut model = Contents::default();
        let base = IncrementalBase::new();
        let mut store = Store {
            files: HashMap::new(),
            known: BTreeSet::new(),
            retained: Vec::new(),
            num_retained: 1,
        };
        let mut pending: Vec<Pending> = Vec::new();
        // Written when the next step is not a write: writes meanwhile go on while the frozen
        // tables are held, as they do while the worker encodes.
        let mut in_flight: Vec<InFlight> = Vec::new();
        let mut next_id = 1;
        for step in steps {
            if !matches!(step, Step::Write(_) | Step::Snapshot) {
                for s in in_flight.drain(..) {
                    pending.push(write_snapshot(s, range, &base, &mut store.files));
                }
            }
            match step {
                Step::Write(ops) => {
                    for op in &ops {
                        apply(&mut live, op, max_parallelism);
                        model.apply(op);
                    }
                }
                Step::Snapshot => {
                    let id = next_id;
                    next_id += 1;
                    let mut frozen = Vec::new();
                    // Taken while the previous snapshot, if any, is still held.
                    live.snapshot(&mut frozen);
                    let plan = base.plan(id, &frozen);
                    for s in in_flight.drain(..) {
                        pending.push(write_snapshot(s, range, &base, &mut store.files));
                    }
                    in_flight.push(InFlight { id, frozen, plan, contents: model.clone() });
                }
                Step::Ack => {
                    if let Some(p) = pending.iter_mut().find(|p| !p.acked) {
                        p.acked = true;
                        store.known.extend(Store::referenced(&p.manifest));
                    }
                }
                Step::Complete { notify } => {
                    if pending.first().is_none_or(|p| !p.acked) { continue; }
                    let Pending { id, manifest, contents, .. } = pending.remove(0);
                    // Completion subsumes nothing older here (we complete the oldest).
                    store.retained.push((id, manifest, contents));
                    while store.retained.len() > store.num_retained {
                        store.retained.remove(0);
                    }
                    store.collect_garbage(&pending);
                    if notify {
                        base.complete(id);
                        // As the runtime does: the tables forget removals older than the base.
                        live.forget_removals(&|table| base.confirmed_epoch(table));
                    }
                }
                Step::Abort { notify } => {
                    if pending.is_empty() { continue; }
                    let id = pending.remove(0).id;
                    store.collect_garbage(&pending);
                    if notify { base.abort(id); }
                }
            }
            // The live tables read what was written, snapshots held or not.
            prop_assert_eq!(&Contents::of(&live), &model);
            // Every retained checkpoint is intact and restores what it snapshotted.
            for (_, manifest, contents) in &store.retained {
                prop_assert_eq!(&restore(manifest, &store.files, range), contents);
            }
        }
        // Restore at another parallelism from the newest retained checkpoint, and keep going
        // incrementally from the restored base.
        if let Some((id, manifest, contents)) = store.retained.last().cloned() {
            let mut merged = Contents::default();
            for index in 0..2 {
                let r = KeyGroupRange::for_subtask(max_parallelism, 2, index);
                merged.extend(restore(&manifest, &store.files, r));
            }
            prop_assert_eq!(&merged, &contents);

            let m = KeyedManifest::decode(&manifest).unwrap();
            let needed = m.files_for(range).into_iter()
                .map(|f| (f.path.clone(), store.files[&f.path].clone())).collect();
            let reader = m.reader(range, needed).unwrap();
            let mut restored = tables();
            restored.init(max_parallelism, range);
            restored.restore(&reader).unwrap();
            let base = IncrementalBase::restored(&reader, range);
            let mut frozen = Vec::new();
            restored.snapshot(&mut frozen);
            let plan = base.plan(id + 1, &frozen);
            let encoding = encode_incremental(&frozen, range, &plan).unwrap();
            prop_assert!(encoding.data.is_none(), "an unchanged restored subtask writes no data");
            let (_, again) = encoding.finish(&plan, None).unwrap();
            prop_assert_eq!(restore(&again, &store.files, range), contents);
        }
    }
}

/// A checkpoint taken, written and completed in one go, outside the property test.
struct Completed {
    manifest: Vec<u8>,
    /// The data file's chunks as encoded, and its size.
    chunks: usize,
    bytes: usize,
}

/// Snapshots `s` as checkpoint `id`, "writes" its data file into `files`, and completes it.
fn checkpoint<V: Value>(
    s: &mut ValueState<u64, V>,
    id: u64,
    base: &IncrementalBase,
    files: &mut HashMap<String, Vec<u8>>,
) -> Completed {
    let mut frozen = Vec::new();
    s.snapshot(&mut frozen);
    let range = frozen[0].key_groups();
    let plan = base.plan(id, &frozen);
    let encoding = encode_incremental(&frozen, range, &plan).unwrap();
    let chunks = encoding.data.clone().unwrap();
    let data = chunks.concat();
    let file = Arc::new(SharedStateFile {
        path: format!("shared/{id}"),
        size: data.len() as u64,
        checksum: crc32c_of(&data),
    });
    let bytes = data.len();
    files.insert(file.path.clone(), data);
    let (chains, manifest) = encoding.finish(&plan, Some(file)).unwrap();
    base.record_written(&plan, chains);
    base.complete(id);
    Completed {
        manifest,
        chunks: chunks.len(),
        bytes,
    }
}

/// Restores a fresh table named `name` from a completed checkpoint's manifest.
fn restored<V: Value>(
    name: &str,
    completed: &Completed,
    files: HashMap<String, Vec<u8>>,
) -> ValueState<u64, V> {
    let m = KeyedManifest::decode(&completed.manifest).unwrap();
    assert_eq!(m.longest_chain(), 2, "the checkpoint wrote deltas");
    let mut table = ValueState::new(name);
    table.init(m.max_parallelism(), m.key_groups());
    table
        .restore(&m.reader(m.key_groups(), files).unwrap())
        .unwrap();
    table
}

/// A table "v" over all of `mp` key groups holding `k → k` for `k` in `0..keys`.
fn identity_table(mp: u32, keys: u64) -> ValueState<u64, u64> {
    let mut s = ValueState::new("v");
    s.init(mp, KeyGroupRange::new(0, mp));
    for k in 0..keys {
        s.set(&CurrentKey::new(&k, mp), k);
    }
    s
}

#[test]
fn one_changed_key_in_many_writes_a_delta_much_smaller_than_the_full_snapshot() {
    let mp = 16;
    let mut s = identity_table(mp, 10_000);
    let (base, mut files) = (IncrementalBase::new(), HashMap::new());
    let full = checkpoint(&mut s, 1, &base, &mut files);
    s.set(&CurrentKey::new(&7, mp), 0);
    let delta = checkpoint(&mut s, 2, &base, &mut files);
    assert!(
        delta.bytes * 100 < full.bytes,
        "{} vs {}",
        delta.bytes,
        full.bytes
    );
}

#[test]
fn key_groups_larger_than_an_encoding_chunk_restore_from_full_blobs_and_deltas() {
    // Two key groups of ~100,000 entries each: every blob spans many of the data file's chunks.
    let mp = 2;
    let mut s = ValueState::<u64, String>::new("names");
    s.init(mp, KeyGroupRange::new(0, mp));
    let mut expected = std::collections::BTreeMap::new();
    let mut set = |s: &mut ValueState<u64, String>, k: u64, v: String| {
        s.set(&CurrentKey::new(&k, mp), v.clone());
        expected.insert(k, v);
    };
    for k in 0..200_000u64 {
        set(&mut s, k, format!("name {k}"));
    }
    let (base, mut files) = (IncrementalBase::new(), HashMap::new());
    let full = checkpoint(&mut s, 1, &base, &mut files);
    // Half of the keys change before the second checkpoint, written as deltas.
    for k in (0..200_000u64).step_by(2) {
        set(&mut s, k, format!("renamed {k}"));
    }
    let delta = checkpoint(&mut s, 2, &base, &mut files);
    assert!(
        full.chunks > 4 && delta.chunks > 4,
        "{} and {} chunks",
        full.chunks,
        delta.chunks
    );
    let restored = restored::<String>("names", &delta, files);
    let got: std::collections::BTreeMap<u64, String> =
        restored.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(got.len(), 200_000);
    assert_eq!(got, expected);
}

#[test]
fn a_key_removed_and_written_again_since_the_base_restores_as_written() {
    let mp = 4;
    let mut s = identity_table(mp, 100);
    let (base, mut files) = (IncrementalBase::new(), HashMap::new());
    checkpoint(&mut s, 1, &base, &mut files);
    // Removed, written again, removed again and written again; and one only removed.
    let (seven, eight) = (CurrentKey::new(&7, mp), CurrentKey::new(&8, mp));
    for round in 0..2 {
        s.clear(&seven);
        s.set(&seven, 700 + round);
    }
    s.clear(&eight);
    let delta = checkpoint(&mut s, 2, &base, &mut files);
    let restored = restored::<u64>("v", &delta, files);
    assert_eq!(restored.get(&seven), Some(&701));
    assert_eq!(restored.get(&eight), None);
    assert_eq!(restored.len(), 99);
}
