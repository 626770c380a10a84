//! `weir bench checkpoint`: the state backend and checkpoint storage measured directly — the
//! synchronous snapshot phase, full and incremental checkpoint sizes, write and restore
//! throughput — beside the machine's sequential disk bandwidth (`dd … oflag=direct`).
//!
//! The state is one `ValueState<u64, String>` of `--keys` keys split over two subtasks (key
//! groups `[0, 64)` and `[64, 128)`), written and restored by two threads, as the runtime's
//! two snapshot workers do. Between checkpoints `--changed` of the keys get new values.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use weir_core::{CheckpointId, HandleKind, KeyGroupRange, S3Options, StateHandle};
use weir_state::{
    encode_incremental, CurrentKey, IncrementalBase, KeyedManifest, KeyedStateSet, SharedStateFile,
    ValueState, DEFAULT_MAX_PARALLELISM,
};
use weir_storage::{CheckpointLayout, CheckpointStorage, Location};

use crate::cli::BenchArgs;
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
    let result = measure(args, &storage);
    let _ = storage.discard_all();
    let disk = match Location::parse(&dir) {
        Ok(Location::Local(path)) => disk_bandwidth(&path),
        _ => None,
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let m = result?;
    let (disk_write, disk_read) = disk.unwrap_or((0.0, 0.0));
    let ratio = m.incremental_bytes as f64 / m.full_bytes.max(1) as f64;
    if args.json {
        println!(
            "{{\"target\":\"checkpoint\",\"keys\":{},\"changed\":{},\"value_bytes\":{},\"subtasks\":{SUBTASKS},\"sync_phase_p50_ms\":{:.4},\"sync_phase_p99_ms\":{:.4},\"full_checkpoint_bytes\":{},\"incremental_checkpoint_bytes\":{},\"incremental_ratio\":{ratio:.4},\"incremental_bytes_p50\":{},\"write_mb_per_s\":{:.0},\"storage_write_mb_per_s\":{:.0},\"restore_mb_per_s\":{:.0},\"restore_cold_cache\":{},\"checkpoint_duration_p50_ms\":{:.1},\"checkpoint_duration_p99_ms\":{:.1},\"disk_write_mb_per_s\":{disk_write:.0},\"disk_read_mb_per_s\":{disk_read:.0}}}",
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
            m.duration_p50_ms,
            m.duration_p99_ms,
        );
    } else {
        println!(
            "checkpoint bench, {} keys × {} B, {:.2} % changed: sync phase p50 {:.3} ms, p99 {:.3} ms; full {} B, incremental {} B ({:.2} %); full write {:.0} MB/s (storage alone {:.0} MB/s), restore {:.0} MB/s{}; incremental checkpoint p50 {:.1} ms, p99 {:.1} ms; disk (dd, O_DIRECT) write {disk_write:.0} MB/s, read {disk_read:.0} MB/s",
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
    duration_p50_ms: f64,
    duration_p99_ms: f64,
}

fn measure(args: &BenchArgs, storage: &CheckpointStorage) -> Result<Measured, CliError> {
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
    let started = Instant::now();
    let (full, storage_secs) = checkpoint(storage, &mut subtasks, id)?;
    let full_secs = started.elapsed().as_secs_f64();
    let full_bytes: u64 = full.iter().map(|w| w.written_bytes).sum();
    for s in &subtasks {
        s.base.complete(id);
    }

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
    let cold_cache = drop_page_cache();
    let started = Instant::now();
    let restored_bytes = restore(storage, &subtasks, &latest)?;
    let restore_secs = started.elapsed().as_secs_f64();

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
    let mut jobs = Vec::new();
    for s in subtasks.iter_mut() {
        let mut frozen = Vec::new();
        s.state.snapshot(&mut frozen);
        let plan = s.base.plan(id, &frozen);
        jobs.push((s.index, s.range, frozen, plan));
    }
    let results: Vec<Result<(Written, f64), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(index, range, frozen, plan)| {
                scope.spawn(move || -> Result<(Written, f64), String> {
                    let kind = HandleKind::Keyed { key_groups: range };
                    let mut encoding =
                        encode_incremental(&frozen, range, &plan).map_err(|e| e.to_string())?;
                    let mut storage_secs = 0.0;
                    let mut shared = Vec::new();
                    let mut file = None;
                    if let Some(data) = encoding.data.take() {
                        let path =
                            CheckpointLayout::shared_file(CheckpointId(id), "bench", index, id);
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
                    let (chains, manifest) =
                        encoding.finish(&plan, file).map_err(|e| e.to_string())?;
                    let path =
                        CheckpointLayout::state_file(CheckpointId(id), "bench", index, "keyed");
                    let t = Instant::now();
                    let manifest = storage
                        .write_state_file(path, kind, &manifest)
                        .map_err(|e| e.to_string())?;
                    storage_secs += t.elapsed().as_secs_f64();
                    let written_bytes = manifest.size + shared.iter().map(|h| h.size).sum::<u64>();
                    for chain in chains.iter().flatten() {
                        for blob in chain.iter() {
                            if !shared.iter().any(|h| h.path == blob.file.path) {
                                shared.push(StateHandle {
                                    path: blob.file.path.clone(),
                                    size: blob.file.size,
                                    checksum: blob.file.checksum,
                                    kind,
                                    shared: true,
                                });
                            }
                        }
                    }
                    plan.base.record_written(&plan, chains);
                    Ok((
                        Written {
                            manifest,
                            shared,
                            written_bytes,
                        },
                        storage_secs,
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
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

/// Restores every subtask from what `latest` references, one thread per subtask; returns the
/// bytes read.
fn restore(
    storage: &CheckpointStorage,
    subtasks: &[Subtask],
    latest: &[Written],
) -> Result<u64, CliError> {
    let results: Vec<Result<(u64, usize), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = subtasks
            .iter()
            .zip(latest)
            .map(|(s, w)| {
                scope.spawn(move || -> Result<(u64, usize), String> {
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
                    let reader = manifest.reader(s.range, files).map_err(|e| e.to_string())?;
                    let mut state = ValueState::<u64, String>::new("values");
                    state.init(DEFAULT_MAX_PARALLELISM, s.range);
                    state.restore(&reader).map_err(|e| e.to_string())?;
                    Ok((read, state.len()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a reader panicked".into())))
            .collect()
    });
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

/// Sequential write and read bandwidth of the disk holding `dir`, in MB/s, by `dd` with
/// O_DIRECT (1 GiB in 1 MiB blocks); `None` if dd is unavailable or fails.
fn disk_bandwidth(dir: &std::path::Path) -> Option<(f64, f64)> {
    std::fs::create_dir_all(dir).ok()?;
    let file = dir.join("dd-bandwidth.tmp");
    let of = format!("of={}", file.display());
    let iff = format!("if={}", file.display());
    let write = dd(&["if=/dev/zero", &of, "bs=1M", "count=1024", "oflag=direct"]);
    let read = dd(&[&iff, "of=/dev/null", "bs=1M", "iflag=direct"]);
    let _ = std::fs::remove_file(&file);
    Some((write?, read?))
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
