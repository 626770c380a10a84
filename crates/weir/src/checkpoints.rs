//! `weir checkpoints list DIR`: the checkpoints of the jobs under a checkpoint directory.

use std::path::{Path, PathBuf};
use weir_storage::{CheckpointLayout, CheckpointStorage};

use crate::cli::CheckpointsCommand;
use crate::progress::bytes;
use crate::CliError;

pub fn run(command: CheckpointsCommand) -> Result<(), CliError> {
    match command {
        CheckpointsCommand::List { dir } => list(&dir),
    }
}

/// The job directories under `dir`, or `dir` itself if it is one.
fn job_dirs(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    if !dir.is_dir() {
        return Err(CliError::usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .collect();
    let is_job = |d: &Path| {
        std::fs::read_dir(d).is_ok_and(|mut it| {
            it.any(|e| {
                e.ok()
                    .and_then(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(CheckpointLayout::parse_checkpoint_dir)
                    })
                    .is_some()
            })
        })
    };
    if is_job(dir) {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut jobs: Vec<PathBuf> = entries
        .into_iter()
        .filter(|d| d.is_dir() && is_job(d))
        .collect();
    jobs.sort();
    Ok(jobs)
}

fn list(dir: &Path) -> Result<(), CliError> {
    let jobs = job_dirs(dir)?;
    if jobs.is_empty() {
        println!("no checkpoints under {}", dir.display());
    }
    for job_dir in jobs {
        let (parent, name) = match (
            job_dir.parent(),
            job_dir.file_name().and_then(|n| n.to_str()),
        ) {
            (Some(p), Some(n)) => (p, n),
            _ => continue,
        };
        let storage =
            CheckpointStorage::open(parent, name).map_err(|e| CliError::usage(e.to_string()))?;
        println!("job {name} ({})", job_dir.display());
        println!(
            "  {:>6}  {:<24}  {:>10}  {:>10}  status",
            "id", "completed (UTC ms)", "size", "written"
        );
        for id in storage
            .list_checkpoint_dirs()
            .map_err(|e| CliError::usage(e.to_string()))?
        {
            match storage.verify(id) {
                Ok(m) => println!(
                    "  {:>6}  {:<24}  {:>10}  {:>10}  ok{}",
                    id.0,
                    m.checkpoint.completion_timestamp_ms,
                    bytes(m.checkpoint.state_size()),
                    bytes(m.checkpoint.persisted_size()),
                    if m.checkpoint.is_savepoint() {
                        " (savepoint)"
                    } else {
                        ""
                    }
                ),
                Err(e) => println!(
                    "  {:>6}  {:<24}  {:>10}  {:>10}  unusable: {e}",
                    id.0, "-", "-", "-"
                ),
            }
        }
    }
    Ok(())
}
