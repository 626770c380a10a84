//! `weir bench checkpoint`: the state backend and checkpoint storage measured directly — the
//! synchronous snapshot phase, full and incremental checkpoint sizes, write and restore
//! throughput — beside the machine's sequential disk bandwidth (`dd … oflag=direct conv=fsync`
//! and `dd … iflag=direct`, run right before and after the full write and the restore; the
//! median of the samples is reported, and the samples).
//!
//! The state is one `ValueState<u64, String>` of `--keys` keys split over two subtasks (key
//! groups `[0, 64)` and `[64, 128)`), written and restored by two threads, as the runtime's
//! two snapshot workers do. Between checkpoints `--changed` of the keys get new values.
//!
//! After the full checkpoint the bench takes a savepoint of the same state the way the runtime
//! does: each subtask encodes its state in the canonical full format and writes it as a state
//! file, then `write_savepoint` copies the files into a self-contained directory (each file
//! fsynced). It is restored the way `--from-savepoint` restores one: opened, its keyed state
//! read through the runtime's restore path and decoded into fresh state.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use weir_checkpoint::CompletedCheckpoint;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, JobId, KeyGroupRange, OperatorId, S3Options,
    StateHandle, SubtaskId, SubtaskState,
};
use weir_state::{
    encode_incremental_releasing, CurrentKey, IncrementalBase, KeyedManifest, KeyedStateSet,
    SharedStateFile, ValueState, DEFAULT_MAX_PARALLELISM,
};
use weir_storage::{
    CheckpointLayout, CheckpointMetadata, CheckpointStorage, Location, OperatorMetadata,
};

use super::BenchArgs;
use crate::CliError;

const SUBTASKS: u32 = 2;
const SYNC_SAMPLES: usize = 200;
const INCREMENTAL_CHECKPOINTS: usize = 10;

/// One subtask's state and incremental base.
struct Subtask {
    index: u32,
    range: KeyGroupRange,
    state: ValueState<u64, String>,
    base: IncrementalBase,
}

/// What one checkpoint of one subtask wrote.
struct Written {
    manifest: StateHandle,
    shared: Vec<StateHandle>,
    written_bytes: u64,
}

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    if args.keys == 0 || !(0.0..=1.0).contains(&args.changed) {
        return Err(CliError::usage(
            "--keys must be at least 1 and --changed a fraction between 0 and 1",
        ));
    }
    let scratch =
        std::env::temp_dir().join(format!("weir-bench-checkpoint-{}", std::process::id()));
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| scratch.to_string_lossy().into_owned());
    let s3 = S3Options::from_env().map_err(|e| CliError::usage(e.to_string()))?;
    let job = format!("bench-{}", std::process::id());
    let storage = CheckpointStorage::open_location(&dir, &job, &s3)
        .map_err(|e| CliError::usage(e.to_string()))?;
    // Savepoints go to a local directory: beside the checkpoints when those are local.
    let savepoints = match Location::parse(&dir) {
        Ok(Location::Local(path)) => path.join(format!("savepoints-{job}")),
        _ => scratch.join("savepoints"),
    };
    let mut disk = match Location::parse(&dir) {
        Ok(Location::Local(path)) => Disk::new(&path),
        _ => None,
    };
    let result = measure(args, &storage, &savepoints, &mut disk);
    let _ = storage.discard_all();
    let _ = std::fs::remove_dir_all(&savepoints);
    let (disk_write, disk_read) = disk
        .as_ref()
        .map_or((0.0, 0.0), |d| (median(&d.writes), median(&d.reads)));
    let samples = |of: fn(&Disk) -> &Vec<f64>| {
        let s: Vec<String> = disk.as_ref().map_or(Vec::new(), |d| {
            of(d).iter().map(|v| format!("{v:.0}")).collect()
        });
        format!("[{}]", s.join(","))
    };
    let (write_samples, read_samples) = (samples(|d| &d.writes), samples(|d| &d.reads));
    let disk_source = disk.as_ref().map_or("none", Disk::source_kind);
    drop(disk);
    let _ = std::fs::remove_dir_all(&scratch);
    let m = result?;
    let ratio = m.incremental_bytes as f64 / m.full_bytes.max(1) as f64;
    if args.json {
        println!(
            "{{\"target\":\"checkpoint\",\"keys\":{},\"changed\":{},\"value_bytes\":{},\"subtasks\":{SUBTASKS},\"sync_phase_p50_ms\":{:.4},\"sync_phase_p99_ms\":{:.4},\"full_checkpoint_bytes\":{},\"incremental_checkpoint_bytes\":{},\"incremental_ratio\":{ratio:.4},\"incremental_bytes_p50\":{},\"write_mb_per_s\":{:.0},\"storage_write_mb_per_s\":{:.0},\"restore_mb_per_s\":{:.0},\"restore_cold_cache\":{},\"savepoint_bytes\":{},\"savepoint_write_mb_per_s\":{:.0},\"savepoint_restore_mb_per_s\":{:.0},\"checkpoint_duration_p50_ms\":{:.1},\"checkpoint_duration_p99_ms\":{:.1},\"disk_write_mb_per_s\":{disk_write:.0},\"disk_read_mb_per_s\":{disk_read:.0},\"disk_write_samples\":{write_samples},\"disk_read_samples\":{read_samples},\"disk_data\":\"{disk_source}\"}}",
            args.keys,
            args.changed,
            args.value_bytes,
            m.sync_p50_ms,
            m.sync_p99_ms,
            m.full_bytes,
            m.incremental_bytes,
            m.incremental_p50,
            m.write_mb_s,
            m.storage_write_mb_s,
            m.restore_mb_s,
            m.cold_cache,
            m.savepoint_bytes,
            m.savepoint_write_mb_s,
            m.savepoint_restore_mb_s,
            m.duration_p50_ms,
            m.duration_p99_ms,
        );
    } else {
        println!(
            "checkpoint bench, {} keys × {} B, {:.2} % changed: sync phase p50 {:.3} ms, p99 {:.3} ms; full {} B, incremental {} B ({:.2} %); full write {:.0} MB/s (storage alone {:.0} MB/s), restore {:.0} MB/s{}; savepoint of the full checkpoint {} B, written at {:.0} MB/s, restored at {:.0} MB/s; incremental checkpoint p50 {:.1} ms, p99 {:.1} ms; disk (dd, O_DIRECT, {disk_source} data) write {disk_write:.0} MB/s (samples {write_samples}), read {disk_read:.0} MB/s (samples {read_samples})",
            args.keys,
            args.value_bytes,
            args.changed * 100.0,
            m.sync_p50_ms,
            m.sync_p99_ms,
            m.full_bytes,
            m.incremental_bytes,
            ratio * 100.0,
            m.write_mb_s,
            m.storage_write_mb_s,
            m.restore_mb_s,
            if m.cold_cache { " (cold cache)" } else { " (warm cache)" },
            m.savepoint_bytes,
            m.savepoint_write_mb_s,
            m.savepoint_restore_mb_s,
            m.duration_p50_ms,
            m.duration_p99_ms,
        );
    }
    Ok(())
}

struct Measured {
    sync_p50_ms: f64,
    sync_p99_ms: f64,
    full_bytes: u64,
    incremental_bytes: u64,
    incremental_p50: u64,
    write_mb_s: f64,
    storage_write_mb_s: f64,
    restore_mb_s: f64,
    cold_cache: bool,
    savepoint_bytes: u64,
    savepoint_write_mb_s: f64,
    savepoint_restore_mb_s: f64,
    duration_p50_ms: f64,
    duration_p99_ms: f64,
}

fn measure(
    args: &BenchArgs,
    storage: &CheckpointStorage,
    savepoints: &Path,
    disk: &mut Option<Disk>,
) -> Result<Measured, CliError> {
    let mp = DEFAULT_MAX_PARALLELISM;
    let mut subtasks: Vec<Subtask> = (0..SUBTASKS)
        .map(|index| {
            let range = KeyGroupRange::for_subtask(mp, SUBTASKS, index);
            let mut state = ValueState::new("values");
            state.init(mp, range);
            Subtask {
                index,
                range,
                state,
                base: IncrementalBase::new(),
            }
        })
        .collect();
    let value = |k: u64, round: u64| {
        (0..args.value_bytes)
            .map(|i| {
                (b'a' + (k.wrapping_mul(31).wrapping_add(round * 7 + i as u64) % 26) as u8) as char
            })
            .collect::<String>()
    };
    for k in 0..args.keys {
        let key = CurrentKey::new(&k, mp);
        let s = (key.key_group * SUBTASKS / mp) as usize;
        subtasks[s].state.set(&key, value(k, 0));
    }

    // Checkpoint 1: everything, in full.
    let mut id = 1u64;
    // The disk's bandwidth is measured right before and right after each measured phase: on a
    // shared machine it changes from one minute to the next.
    if let Some(d) = disk.as_mut() {
        d.write();
    }
    let started = Instant::now();
    let (full, storage_secs) = checkpoint(storage, &mut subtasks, id)?;
    let full_secs = started.elapsed().as_secs_f64();
    if let Some(d) = disk.as_mut() {
        d.write();
    }
    let full_bytes: u64 = full.iter().map(|w| w.written_bytes).sum();
    for s in &subtasks {
        s.base.complete(id);
    }

    // A savepoint of the same state.
    let started = Instant::now();
    let metadata = savepoint_snapshot(storage, &mut subtasks)?;
    let savepoint = weir_storage::savepoint::write_savepoint(storage, &metadata, savepoints)
        .map_err(|e| CliError {
            message: format!("savepoint failed: {e}"),
            code: 1,
        })?;
    let savepoint_write_secs = started.elapsed().as_secs_f64();
    let savepoint_bytes = metadata.checkpoint.state_size() + savepoint.metadata_bytes;

    // Incremental checkpoints, each after `changed` of the keys got new values.
    let changed = ((args.keys as f64) * args.changed).round() as u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut durations = Vec::new();
    let mut incremental = Vec::new();
    let mut latest = full;
    for round in 1..=INCREMENTAL_CHECKPOINTS as u64 {
        for _ in 0..changed {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = rng % args.keys;
            let key = CurrentKey::new(&k, mp);
            let s = (key.key_group * SUBTASKS / mp) as usize;
            subtasks[s].state.set(&key, value(k, round));
        }
        id += 1;
        let started = Instant::now();
        let (written, _) = checkpoint(storage, &mut subtasks, id)?;
        durations.push(started.elapsed().as_secs_f64() * 1000.0);
        incremental.push(written.iter().map(|w| w.written_bytes).sum::<u64>());
        for s in &subtasks {
            s.base.complete(id);
        }
        latest = written;
    }

    // The synchronous phase alone: freeze and plan, with a write between samples.
    let mut sync = Vec::with_capacity(SYNC_SAMPLES);
    for i in 0..SYNC_SAMPLES as u64 {
        let k = i % args.keys;
        let key = CurrentKey::new(&k, mp);
        let s = (key.key_group * SUBTASKS / mp) as usize;
        subtasks[s].state.set(&key, value(k, i));
        for s in subtasks.iter_mut() {
            let started = Instant::now();
            let mut frozen = Vec::new();
            s.state.snapshot(&mut frozen);
            let plan = s.base.plan(id + 1 + i, &frozen);
            sync.push(started.elapsed().as_secs_f64() * 1000.0);
            drop(plan);
            s.base.abort(id + 1 + i);
        }
    }

    // Restore the latest checkpoint: read, verify and decode every file it references.
    if let Some(d) = disk.as_mut() {
        d.read();
    }
    let cold_cache = drop_page_cache();
    let started = Instant::now();
    let restored_bytes = restore(storage, &subtasks, &latest)?;
    let restore_secs = started.elapsed().as_secs_f64();
    if let Some(d) = disk.as_mut() {
        d.read();
    }

    // Restore the savepoint, as `--from-savepoint` does.
    drop_page_cache();
    let started = Instant::now();
    restore_savepoint(&savepoint.path, &subtasks, args.keys)?;
    let savepoint_restore_secs = started.elapsed().as_secs_f64();

    let mb = |bytes: u64, secs: f64| bytes as f64 / 1e6 / secs.max(1e-9);
    Ok(Measured {
        sync_p50_ms: percentile(&mut sync, 0.50),
        sync_p99_ms: percentile(&mut sync, 0.99),
        full_bytes,
        incremental_bytes: incremental.first().copied().unwrap_or(0),
        incremental_p50: percentile_u64(&mut incremental, 0.5),
        write_mb_s: mb(full_bytes, full_secs),
        storage_write_mb_s: mb(full_bytes, storage_secs),
        restore_mb_s: mb(restored_bytes, restore_secs),
        cold_cache,
        savepoint_bytes,
        savepoint_write_mb_s: mb(savepoint_bytes, savepoint_write_secs),
        savepoint_restore_mb_s: mb(savepoint_bytes, savepoint_restore_secs),
        duration_p50_ms: percentile(&mut durations, 0.50),
        duration_p99_ms: percentile(&mut durations, 0.99),
    })
}

/// Takes checkpoint `id` of every subtask: the synchronous phase on this thread, then encoding
/// and durable writing on one thread per subtask. Returns what each wrote, and the slowest
/// subtask's seconds spent in storage writes alone.
fn checkpoint(
    storage: &CheckpointStorage,
    subtasks: &mut [Subtask],
    id: u64,
) -> Result<(Vec<Written>, f64), CliError> {
    // Manifests inline in the metadata when small, as the runtime keeps them by default.
    let inline_threshold = weir_core::config::CheckpointConfig::default().data_inline_threshold;
    let mut jobs = Vec::new();
    for s in subtasks.iter_mut() {
        let mut frozen = Vec::new();
        s.state.snapshot(&mut frozen);
        let plan = s.base.plan(id, &frozen);
        jobs.push((s.index, s.range, frozen, plan));
    }
    let results = on_threads(
        jobs,
        |(index, range, mut frozen, plan)| -> Result<(Written, f64), String> {
            let kind = HandleKind::Keyed { key_groups: range };
            // As the runtime's snapshot workers do: each key group let go of once encoded.
            let mut encoding = encode_incremental_releasing(&mut frozen, range, &plan)
                .map_err(|e| e.to_string())?;
            drop(frozen);
            let mut storage_secs = 0.0;
            let mut shared = Vec::new();
            let mut file = None;
            if let Some(data) = encoding.data.take() {
                let path = CheckpointLayout::shared_file(CheckpointId(id), "bench", index, id);
                let t = Instant::now();
                let h = storage
                    .write_shared_file(path, kind, data)
                    .map_err(|e| e.to_string())?;
                storage_secs += t.elapsed().as_secs_f64();
                file = Some(Arc::new(SharedStateFile {
                    path: h.path.clone(),
                    size: h.size,
                    checksum: h.checksum,
                }));
                shared.push(h);
            }
            let (chains, manifest) = encoding.finish(&plan, file).map_err(|e| e.to_string())?;
            let path = CheckpointLayout::state_file(CheckpointId(id), "bench", index, "keyed");
            let t = Instant::now();
            let manifest = storage
                .write_or_inline_state(path, kind, manifest, inline_threshold)
                .map_err(|e| e.to_string())?;
            storage_secs += t.elapsed().as_secs_f64();
            let written_bytes = manifest.size + shared.iter().map(|h| h.size).sum::<u64>();
            weir_runtime::snapshot::add_chained_files(&mut shared, &chains, kind);
            plan.base.record_written(&plan, chains);
            Ok((
                Written {
                    manifest,
                    shared,
                    written_bytes,
                },
                storage_secs,
            ))
        },
    );
    let mut written = Vec::new();
    let mut slowest: f64 = 0.0;
    for r in results {
        let (w, secs) = r.map_err(|e| CliError {
            message: format!("checkpoint {id} failed: {e}"),
            code: 1,
        })?;
        slowest = slowest.max(secs);
        written.push(w);
    }
    Ok((written, slowest))
}

/// Runs `work` on every item, each on a thread of its own as the runtime's snapshot workers
/// run, and returns the results in order; a thread that panicked becomes an error.
fn on_threads<I: Send, R: Send>(
    items: impl IntoIterator<Item = I>,
    work: impl Fn(I) -> Result<R, String> + Sync,
) -> Vec<Result<R, String>> {
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items
            .into_iter()
            .map(|item| scope.spawn(move || work(item)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect()
    })
}

/// Restores every subtask from what `latest` references, one thread per subtask; returns the
/// bytes read.
fn restore(
    storage: &CheckpointStorage,
    subtasks: &[Subtask],
    latest: &[Written],
) -> Result<u64, CliError> {
    let results = on_threads(
        subtasks.iter().map(|s| s.range).zip(latest),
        |(range, w)| -> Result<(u64, usize), String> {
            let bytes = storage
                .read_state_file(&w.manifest)
                .map_err(|e| e.to_string())?;
            let mut read = bytes.len() as u64;
            let manifest = KeyedManifest::decode(&bytes).map_err(|e| e.to_string())?;
            let mut files = HashMap::new();
            for h in &w.shared {
                let b = storage.read_state_file(h).map_err(|e| e.to_string())?;
                read += b.len() as u64;
                files.insert(h.path.clone(), b);
            }
            let reader = manifest.reader(range, files).map_err(|e| e.to_string())?;
            let mut state = ValueState::<u64, String>::new("values");
            state.init(DEFAULT_MAX_PARALLELISM, range);
            state.restore(&reader).map_err(|e| e.to_string())?;
            Ok((read, state.len()))
        },
    );
    let mut total = 0;
    for (r, s) in results.into_iter().zip(subtasks) {
        let (read, keys) = r.map_err(|e| CliError {
            message: format!("restore failed: {e}"),
            code: 1,
        })?;
        if keys != s.state.len() {
            return Err(CliError {
                message: format!(
                    "restore of subtask {} found {keys} keys, expected {}",
                    s.index,
                    s.state.len()
                ),
                code: 1,
            });
        }
        total += read;
    }
    Ok(total)
}

/// The operator the bench's state belongs to in its savepoint.
const OPERATOR_UID: &str = "values";

/// The id of the bench's savepoint (its files' directory in the checkpoint storage).
const SAVEPOINT_ID: u64 = 1_000;

/// The snapshot a savepoint barrier takes: every subtask's state frozen, encoded in full and
/// written as one state file, one thread per subtask. Returns the savepoint's metadata.
fn savepoint_snapshot(
    storage: &CheckpointStorage,
    subtasks: &mut [Subtask],
) -> Result<CheckpointMetadata, CliError> {
    let operator = OperatorId::from_uid(OPERATOR_UID);
    let mut jobs = Vec::new();
    for s in subtasks.iter_mut() {
        let mut frozen = Vec::new();
        s.state.snapshot(&mut frozen);
        jobs.push((s.index, s.range, frozen));
    }
    let written = on_threads(
        jobs,
        |(index, range, frozen)| -> Result<(u32, StateHandle), String> {
            let bytes =
                weir_state::encode_keyed_snapshot(&frozen, range).map_err(|e| e.to_string())?;
            let path =
                CheckpointLayout::state_file(CheckpointId(SAVEPOINT_ID), "bench", index, "keyed");
            let kind = HandleKind::Keyed { key_groups: range };
            let handle = storage
                .write_state_file(path, kind, &bytes)
                .map_err(|e| e.to_string())?;
            Ok((index, handle))
        },
    );
    let mut subtask_states = BTreeMap::new();
    for w in written {
        let (index, handle) = w.map_err(|e| CliError {
            message: format!("savepoint snapshot failed: {e}"),
            code: 1,
        })?;
        subtask_states.insert(
            SubtaskId::new(operator, index),
            SubtaskState::from_handles(vec![handle]),
        );
    }
    Ok(CheckpointMetadata {
        job_name: storage.root().to_string(),
        max_parallelism: DEFAULT_MAX_PARALLELISM,
        operators: vec![OperatorMetadata {
            uid: OPERATOR_UID.to_string(),
            id: operator,
            parallelism: SUBTASKS,
        }],
        checkpoint: CompletedCheckpoint {
            job: JobId::from_name("bench"),
            id: CheckpointId(SAVEPOINT_ID),
            kind: CheckpointKind::Savepoint,
            trigger_timestamp_ms: 0,
            completion_timestamp_ms: 0,
            subtask_states,
        },
    })
}

/// Restores every subtask's keyed state from the savepoint at `path`, one thread per subtask,
/// through the runtime's restore path; checks that every key came back.
fn restore_savepoint(path: &Path, subtasks: &[Subtask], keys: u64) -> Result<(), CliError> {
    let failed = |e: String| CliError {
        message: format!("savepoint restore failed: {e}"),
        code: 1,
    };
    let (storage, metadata) =
        weir_storage::savepoint::open_savepoint(path).map_err(|e| failed(e.to_string()))?;
    let operator = OperatorId::from_uid(OPERATOR_UID);
    let ranges = subtasks.iter().map(|s| s.range);
    let restored = on_threads(ranges, |range| -> Result<usize, String> {
        let reader = weir_runtime::restore::read_keyed_state(&storage, &metadata, operator, range)
            .map_err(|e| e.to_string())?
            .ok_or("no keyed state in the savepoint")?;
        let mut state = ValueState::<u64, String>::new("values");
        state.init(DEFAULT_MAX_PARALLELISM, range);
        state.restore(&reader).map_err(|e| e.to_string())?;
        Ok(state.len())
    });
    let mut total = 0u64;
    for r in restored {
        total += r.map_err(failed)? as u64;
    }
    if total != keys {
        return Err(failed(format!("{total} keys restored, expected {keys}")));
    }
    Ok(())
}

/// Sequential write and read bandwidth of the disk holding the checkpoints, in MB/s, by `dd`
/// with O_DIRECT (1 GiB in 1 MiB blocks), sampled when asked; a failed `dd` adds no sample.
///
/// Writes end with an fsync (`conv=fsync`), as a checkpoint's do: without it `dd` measures how
/// fast the host takes the data into its cache (several GB/s here), and leaves that gigabyte
/// for the next fsync — the checkpoint's — to flush.
///
/// The data written is random, copied from a file in memory (`/dev/shm`): virtual disks often
/// store blocks of zeros without writing them, so `dd if=/dev/zero` can report several times
/// the bandwidth real data gets. Without `/dev/shm` it falls back to zeros and says so.
struct Disk {
    file: PathBuf,
    /// The 1 GiB of random data `dd` writes, or `None` to write zeros.
    source: Option<PathBuf>,
    writes: Vec<f64>,
    reads: Vec<f64>,
}

const DD_BYTES: usize = 1 << 30;

impl Disk {
    fn new(dir: &Path) -> Option<Disk> {
        std::fs::create_dir_all(dir).ok()?;
        let source = PathBuf::from(format!("/dev/shm/weir-bench-dd-{}", std::process::id()));
        let source = write_random(&source).ok().map(|_| source);
        Some(Disk {
            file: dir.join("dd-bandwidth.tmp"),
            source,
            writes: Vec::new(),
            reads: Vec::new(),
        })
    }

    /// What `dd` wrote: `random` or `zeros`.
    fn source_kind(&self) -> &'static str {
        if self.source.is_some() {
            "random"
        } else {
            "zeros"
        }
    }

    fn write(&mut self) {
        let iff = match &self.source {
            Some(path) => format!("if={}", path.display()),
            None => "if=/dev/zero".to_string(),
        };
        let of = format!("of={}", self.file.display());
        let args = [
            &iff,
            &of,
            "bs=1M",
            "count=1024",
            "oflag=direct",
            "conv=fsync",
        ];
        self.writes.extend(dd(&args));
    }

    /// Reads back what the last [`write`](Self::write) wrote, three times: how fast it comes
    /// back swings by several times on a virtual disk, with what the host happens to cache.
    fn read(&mut self) {
        let iff = format!("if={}", self.file.display());
        for _ in 0..3 {
            self.reads
                .extend(dd(&[&iff, "of=/dev/null", "bs=1M", "iflag=direct"]));
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        if let Some(source) = &self.source {
            let _ = std::fs::remove_file(source);
        }
    }
}

/// Fills `path` with `DD_BYTES` pseudo-random bytes (xorshift: fast, and incompressible
/// enough that no disk shortcut applies).
fn write_random(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..DD_BYTES / block.len() {
        for word in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        if let Err(e) = file.write_all(&block) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    }
    file.flush()
}

/// The median (the mean of the middle two for an even count); 0 for none.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn dd(args: &[&str]) -> Option<f64> {
    let out = std::process::Command::new("dd").args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    // "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.03646 s, 1.0 GB/s"
    let line = text.lines().find(|l| l.contains(" copied, "))?;
    let bytes: f64 = line.split_whitespace().next()?.parse().ok()?;
    let secs: f64 = line
        .split(" copied, ")
        .nth(1)?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    Some(bytes / 1e6 / secs)
}

/// Drops the page cache (root only) so the restore reads from the disk; whether it worked.
fn drop_page_cache() -> bool {
    // SAFETY-free: libc's sync via the `sync` command, then the kernel's drop_caches knob.
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let i = ((values.len() as f64 * p).ceil() as usize).clamp(1, values.len()) - 1;
    values[i]
}

fn percentile_u64(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let i = ((values.len() as f64 * p).ceil() as usize).clamp(1, values.len()) - 1;
    values[i]
}
