//! `weir checkpoints list|inspect|verify`: what the checkpoints under a checkpoint directory
//! (local or `s3://`) are, what they hold, and whether every file is intact.

use clap::Subcommand;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};
use weir_core::{CheckpointId, HandleKind, S3Options};
use weir_storage::{CheckpointLayout, CheckpointMetadata, CheckpointStorage, Location};

use crate::progress::bytes;
use crate::CliError;

#[derive(Subcommand, Debug)]
pub enum CheckpointsCommand {
    /// List the checkpoints of every job under a checkpoint directory (or of one job): id,
    /// completion time, size, bytes the checkpoint wrote itself (incremental), status.
    List {
        /// A checkpoint directory (a path or s3://bucket/prefix), or one job's directory in it.
        dir: String,
    },
    /// Show what checkpoints hold: operators, subtasks, key-group ranges, files and sizes.
    Inspect {
        /// One checkpoint (…/<job>/chk-<id>), a job's directory, or a checkpoint directory.
        path: String,
    },
    /// Check every checksum of every file; exit status 0 only when all are intact.
    Verify {
        /// One checkpoint (…/<job>/chk-<id>), a job's directory, a checkpoint directory, or a
        /// savepoint's directory.
        path: String,
    },
}

pub fn run(command: CheckpointsCommand) -> Result<(), CliError> {
    match command {
        CheckpointsCommand::List { dir } => list(&dir),
        CheckpointsCommand::Inspect { path } => inspect(&path),
        CheckpointsCommand::Verify { path } => verify(&path),
    }
}

/// The jobs a path names and, per job, the checkpoints it names (`None`: all of them).
struct Target {
    storage: CheckpointStorage,
    job: String,
    only: Option<CheckpointId>,
}

fn usage(e: impl std::fmt::Display) -> CliError {
    CliError::usage(e.to_string())
}

/// Resolves PATH: one checkpoint (`…/<job>/chk-<id>`), one job's directory, or a checkpoint
/// directory holding jobs.
fn targets(path: &str) -> Result<Vec<Target>, CliError> {
    let s3 = S3Options::from_env().map_err(usage)?;
    let location = Location::parse(path).map_err(usage)?;
    if let Location::Local(p) = &location {
        if !p.is_dir() {
            return Err(CliError::usage(format!(
                "{} is not a directory (expected a checkpoint directory, a job's directory in it, or one chk-<id>)",
                p.display()
            )));
        }
    }
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = trimmed.rsplit_once('/').unwrap_or((".", trimmed));
    let parent = if parent.is_empty() { "/" } else { parent };
    if let Some(id) = CheckpointLayout::parse_checkpoint_dir(name) {
        let (grand, job) = parent.rsplit_once('/').unwrap_or((".", parent));
        let grand = if grand.is_empty() { "/" } else { grand };
        let storage = CheckpointStorage::open_for_reading(grand, job, &s3).map_err(usage)?;
        return Ok(vec![Target {
            storage,
            job: job.to_string(),
            only: Some(id),
        }]);
    }
    let as_job = CheckpointStorage::open_for_reading(parent, name, &s3).map_err(usage)?;
    if is_job(&as_job)? {
        return Ok(vec![Target {
            storage: as_job,
            job: name.to_string(),
            only: None,
        }]);
    }
    let base = CheckpointStorage::open_for_reading(trimmed, "", &s3).map_err(usage)?;
    let mut jobs = Vec::new();
    for job in base.subdirectories().map_err(usage)? {
        let storage = CheckpointStorage::open_for_reading(trimmed, &job, &s3).map_err(usage)?;
        if is_job(&storage)? {
            jobs.push(Target {
                storage,
                job,
                only: None,
            });
        }
    }
    jobs.sort_by(|a, b| a.job.cmp(&b.job));
    Ok(jobs)
}

/// `path` if it is a savepoint's directory: a local directory holding a `_metadata` that is
/// not a job's `chk-<id>`.
fn savepoint_dir(path: &str) -> Option<&Path> {
    let dir = Path::new(path.trim_end_matches('/'));
    let name = dir.file_name()?.to_str()?;
    let is_checkpoint = CheckpointLayout::parse_checkpoint_dir(name).is_some();
    (!is_checkpoint && dir.join(weir_storage::layout::METADATA_FILE).is_file()).then_some(dir)
}

/// Verifies every file of the savepoint in `dir` (size, checksum and format), as `verify` does
/// a checkpoint's.
fn verify_savepoint(dir: &Path) -> Result<(), CliError> {
    let damaged = |reason: String| CliError {
        message: format!("savepoint {} is damaged: {reason}", dir.display()),
        code: 1,
    };
    let (storage, metadata) =
        weir_storage::savepoint::open_savepoint(dir).map_err(|e| damaged(e.to_string()))?;
    let handles: Vec<_> = metadata
        .checkpoint
        .subtask_states
        .values()
        .flat_map(|s| &s.handles)
        .collect();
    let mut bad = Vec::new();
    for handle in &handles {
        if let Err(e) = storage.verify_file(handle) {
            bad.push(format!("{}: {e}", handle.path));
        }
    }
    let files = handles.iter().filter(|h| h.is_file()).count();
    let inline = handles.len() - files;
    if !bad.is_empty() {
        for line in &bad {
            println!("  {line}");
        }
        return Err(damaged(format!("{} of {} files", bad.len(), handles.len())));
    }
    println!(
        "savepoint {} (checkpoint {}): ok ({files} files, {inline} inline state(s) and _metadata intact)",
        dir.display(),
        metadata.checkpoint.id
    );
    Ok(())
}

fn is_job(storage: &CheckpointStorage) -> Result<bool, CliError> {
    Ok(!storage.list_checkpoint_dirs().map_err(usage)?.is_empty())
}

fn ids(target: &Target) -> Result<Vec<CheckpointId>, CliError> {
    match target.only {
        Some(id) => Ok(vec![id]),
        None => target.storage.list_checkpoint_dirs().map_err(usage),
    }
}

/// A UTC time of day from Unix milliseconds, e.g. `2026-12-02T12:00:00.123Z`.
fn time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn list(dir: &str) -> Result<(), CliError> {
    let jobs = targets(dir)?;
    if jobs.is_empty() {
        println!("no checkpoints under {dir}");
    }
    for target in jobs {
        println!("job {} ({})", target.job, target.storage.root());
        println!(
            "  {:>6}  {:<24}  {:>10}  {:>12}  status",
            "id", "completed (UTC)", "size", "incremental"
        );
        for id in ids(&target)? {
            match target.storage.read_metadata(id) {
                Err(e) if is_incomplete(&target.storage, id) => {
                    let _ = e;
                    println!(
                        "  {:>6}  {:<24}  {:>10}  {:>12}  incomplete (no _metadata)",
                        id.0, "-", "-", "-"
                    )
                }
                Err(e) => println!(
                    "  {:>6}  {:<24}  {:>10}  {:>12}  unusable: {e}",
                    id.0, "-", "-", "-"
                ),
                Ok(m) => {
                    let status = match target.storage.verify(id) {
                        Ok(_) if m.checkpoint.is_savepoint() => "ok (savepoint)".to_string(),
                        Ok(_) => "ok".to_string(),
                        Err(e) => format!("unusable: {e}"),
                    };
                    println!(
                        "  {:>6}  {:<24}  {:>10}  {:>12}  {status}",
                        id.0,
                        time(m.checkpoint.completion_timestamp_ms),
                        bytes(m.checkpoint.state_size()),
                        bytes(m.checkpoint.persisted_size()),
                    );
                }
            }
        }
    }
    Ok(())
}

fn is_incomplete(storage: &CheckpointStorage, id: CheckpointId) -> bool {
    storage
        .list_completed()
        .map(|c| !c.contains(&id))
        .unwrap_or(false)
}

fn inspect(path: &str) -> Result<(), CliError> {
    let jobs = targets(path)?;
    if jobs.is_empty() {
        return Err(CliError::usage(format!("no checkpoints under {path}")));
    }
    for target in jobs {
        for id in ids(&target)? {
            match target.storage.read_metadata(id) {
                Ok(m) => print_checkpoint(&target, &m),
                Err(e) => println!("checkpoint {id} of job {}: unusable: {e}\n", target.job),
            }
        }
    }
    Ok(())
}

fn print_checkpoint(target: &Target, m: &CheckpointMetadata) {
    let c = &m.checkpoint;
    println!(
        "checkpoint {} of job {} in {}",
        c.id,
        m.job_name,
        target.storage.root()
    );
    println!(
        "  {}, triggered {}, completed {}; max parallelism {}",
        if c.is_savepoint() {
            "savepoint"
        } else {
            "checkpoint"
        },
        time(c.trigger_timestamp_ms),
        time(c.completion_timestamp_ms),
        m.max_parallelism
    );
    println!(
        "  size {} (references), {} written by this checkpoint",
        bytes(c.state_size()),
        bytes(c.persisted_size())
    );
    let mut by_operator: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for (subtask, state) in &c.subtask_states {
        let uid = m
            .operators
            .iter()
            .find(|o| o.id == subtask.operator)
            .map_or("?", |o| o.uid.as_str());
        by_operator.entry(uid).or_default().push((subtask, state));
    }
    for op in &m.operators {
        println!("  operator '{}' (parallelism {})", op.uid, op.parallelism);
        for (subtask, state) in by_operator.get(op.uid.as_str()).into_iter().flatten() {
            println!(
                "    subtask {}: {} referenced, {} written",
                subtask.index,
                bytes(state.state_size),
                bytes(state.persisted_size)
            );
            for h in &state.handles {
                let what = match h.kind {
                    HandleKind::Keyed { key_groups } if h.shared => {
                        format!("keyed data, key groups {key_groups}, shared")
                    }
                    HandleKind::Keyed { key_groups } => {
                        format!("keyed state, key groups {key_groups}")
                    }
                    HandleKind::Operator => "operator state".to_string(),
                    HandleKind::Channels => "in-flight data (unaligned checkpoint)".to_string(),
                };
                let what = if h.is_file() {
                    what
                } else {
                    format!("{what}, inline in _metadata")
                };
                println!(
                    "      {:<56} {:>10}  crc32c {:08x}  {what}",
                    h.path,
                    bytes(h.size),
                    h.checksum
                );
                if !h.shared {
                    if let Some(detail) = manifest_detail(&target.storage, h) {
                        println!("        {detail}");
                    }
                }
            }
        }
    }
    println!();
}

/// For an incremental manifest: its tables and how long its chains are; for a RocksDB one, its
/// tables and table files.
fn manifest_detail(storage: &CheckpointStorage, h: &weir_core::StateHandle) -> Option<String> {
    let HandleKind::Keyed { .. } = h.kind else {
        return None;
    };
    let bytes = storage.read_state_file(h).ok()?;
    if weir_state::is_lsm_manifest(&bytes) {
        let m = weir_state::LsmManifest::decode(&bytes).ok()?;
        let tables: Vec<String> = m.tables.iter().map(|(n, k)| format!("{n} ({k})")).collect();
        return Some(format!(
            "RocksDB manifest: tables {}; {} in {} table file(s)",
            tables.join(", "),
            self::bytes(m.referenced_bytes()),
            m.files.len()
        ));
    }
    if !weir_state::is_manifest(&bytes) {
        return Some("full snapshot".into());
    }
    let m = weir_state::KeyedManifest::decode(&bytes).ok()?;
    let tables: Vec<String> = m.tables().map(|(n, k)| format!("{n} ({k})")).collect();
    Some(format!(
        "incremental manifest: tables {}; {} in {} shared file(s); longest chain {}",
        tables.join(", "),
        self::bytes(m.referenced_bytes()),
        m.files().len(),
        m.longest_chain()
    ))
}

fn verify(path: &str) -> Result<(), CliError> {
    if let Some(savepoint) = savepoint_dir(path) {
        return verify_savepoint(savepoint);
    }
    let jobs = targets(path)?;
    if jobs.is_empty() {
        return Err(CliError::usage(format!("no checkpoints under {path}")));
    }
    let (mut good, mut bad) = (0, 0);
    for target in jobs {
        let completed = target.storage.list_completed().map_err(usage)?;
        for id in ids(&target)? {
            if !completed.contains(&id) {
                println!(
                    "job {} checkpoint {id}: incomplete (no _metadata), not checked",
                    target.job
                );
                continue;
            }
            match target.storage.verify_files(id) {
                Err(e) => {
                    bad += 1;
                    println!("job {} checkpoint {id}: DAMAGED: {e}", target.job);
                }
                Ok((_, checks)) => {
                    let damaged: Vec<_> = checks.iter().filter(|c| c.problem.is_some()).collect();
                    if damaged.is_empty() {
                        good += 1;
                        let inline = checks.iter().filter(|c| !c.handle.is_file()).count();
                        let with = match inline {
                            0 => String::new(),
                            n => format!(" with {n} inline state(s)"),
                        };
                        println!(
                            "job {} checkpoint {id}: ok ({} files and _metadata{with} intact)",
                            target.job,
                            checks.len() - inline
                        );
                    } else {
                        bad += 1;
                        println!(
                            "job {} checkpoint {id}: DAMAGED ({} of {} files)",
                            target.job,
                            damaged.len(),
                            checks.len()
                        );
                        for c in damaged {
                            if let Some(p) = &c.problem {
                                println!("  {}: {p}", c.handle.path);
                            }
                        }
                    }
                }
            }
        }
    }
    println!("{good} checkpoint(s) intact, {bad} damaged");
    if bad > 0 {
        return Err(CliError {
            message: format!("{bad} checkpoint(s) damaged"),
            code: 1,
        });
    }
    Ok(())
}
