//! The exactly-once file sink: two-phase commit over atomic renames.
//!
//! Each subtask writes to a hidden in-progress file `.part-<subtask>-<n>.inprogress`. On a
//! snapshot the file is flushed, fsynced, closed and *pre-committed*: recorded in the
//! checkpoint as pending. On the completion notice of that checkpoint (or a later one) it is
//! committed by renaming it to `part-<subtask>-<n>`, and the directory is fsynced. Readers of the
//! directory see only committed files.
//!
//! Commits are idempotent — a notice may be lost or repeated: a pending file already renamed is
//! simply done. A checkpoint that aborts leaves its pending files pending; they are committed
//! with the next completed checkpoint, which covers the same records. On restore, the pending
//! files recorded in the restored checkpoint are committed (that checkpoint completed), and
//! every other in-progress file of the subtask is deleted: its records came after the
//! checkpoint and will be written again. Pending files travel as union state, so after a
//! rescale every subtask knows all of them.
//!
//! In at-least-once mode the sink writes straight into visible files and never rolls back:
//! after a failure, replayed records appear twice.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::{OperatorContext, TaskError};

use crate::file_sink::LineFormat;

/// Delivery guarantee of the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkMode {
    ExactlyOnce,
    AtLeastOnce,
}

/// A pre-committed file waiting for its checkpoint to complete.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    checkpoint: CheckpointId,
    n: u64,
    subtask: u32,
}

impl Pending {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20);
        out.extend_from_slice(&self.checkpoint.0.to_le_bytes());
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.subtask.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Pending, TaskError> {
        if bytes.len() != 20 {
            return Err(TaskError::user(
                "file sink state is malformed: the checkpoint was not written by this sink",
            ));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Ok(Pending {
            checkpoint: CheckpointId(u64_at(0)),
            n: u64_at(8),
            subtask: u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes")),
        })
    }
}

fn in_progress_name(subtask: u32, n: u64) -> String {
    format!(".part-{subtask}-{n}.inprogress")
}

fn committed_name(subtask: u32, n: u64) -> String {
    format!("part-{subtask}-{n}")
}

/// Parses `part-<s>-<n>` or `.part-<s>-<n>.inprogress` into `(s, n, in_progress)`.
fn parse_name(name: &str) -> Option<(u32, u64, bool)> {
    let (rest, in_progress) = match name.strip_prefix(".part-") {
        Some(r) => (r.strip_suffix(".inprogress")?, true),
        None => (name.strip_prefix("part-")?, false),
    };
    let (s, n) = rest.split_once('-')?;
    Some((s.parse().ok()?, n.parse().ok()?, in_progress))
}

/// Writes `format(record)` lines into committed files of `dir`, exactly once.
pub struct CommittingFileSink<T> {
    dir: PathBuf,
    format: LineFormat<T>,
    mode: SinkMode,
    subtask: u32,
    next_n: u64,
    current: Option<(u64, BufWriter<File>)>,
    pending: Vec<Pending>,
    line: Vec<u8>,
}

impl<T> Clone for CommittingFileSink<T> {
    fn clone(&self) -> Self {
        CommittingFileSink::new(self.dir.clone(), self.format.clone(), self.mode)
    }
}

impl<T> CommittingFileSink<T> {
    pub fn new(
        dir: impl Into<PathBuf>,
        format: LineFormat<T>,
        mode: SinkMode,
    ) -> CommittingFileSink<T> {
        CommittingFileSink {
            dir: dir.into(),
            format,
            mode,
            subtask: 0,
            next_n: 0,
            current: None,
            pending: Vec::new(),
            line: Vec::new(),
        }
    }

    fn io(&self, what: &str, path: &Path, e: std::io::Error) -> TaskError {
        TaskError::user(format!("file sink cannot {what} {}: {e}", path.display()))
    }

    /// Renames a pending file into place. Idempotent: already committed is done.
    fn commit(&self, p: &Pending) -> Result<(), TaskError> {
        let from = self.dir.join(in_progress_name(p.subtask, p.n));
        let to = self.dir.join(committed_name(p.subtask, p.n));
        match fs::rename(&from, &to) {
            Ok(()) => Ok(()),
            Err(_) if to.is_file() && !from.exists() => Ok(()),
            Err(e) => Err(self.io("commit", &from, e)),
        }
    }

    fn sync_dir(&self) -> Result<(), TaskError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io("sync", &self.dir, e))
    }

    fn start_file(&mut self) -> Result<&mut BufWriter<File>, TaskError> {
        if self.current.is_none() {
            let n = self.next_n;
            self.next_n += 1;
            let name = match self.mode {
                SinkMode::ExactlyOnce => in_progress_name(self.subtask, n),
                SinkMode::AtLeastOnce => committed_name(self.subtask, n),
            };
            let path = self.dir.join(name);
            let file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(&path)
                .map_err(|e| self.io("create", &path, e))?;
            self.current = Some((n, BufWriter::with_capacity(1 << 16, file)));
        }
        Ok(&mut self.current.as_mut().expect("just created").1)
    }
}

impl<T: Send + 'static> SinkFunction<T> for CommittingFileSink<T> {
    fn union_state(&self) -> bool {
        true
    }

    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(TaskError::BadInput(format!(
                "output {} exists and is not a directory",
                self.dir.display()
            )));
        }
        fs::create_dir_all(&self.dir).map_err(|e| self.io("create", &self.dir.clone(), e))?;
        self.subtask = ctx.index;
        let recorded: Vec<Pending> = restored
            .unwrap_or_default()
            .iter()
            .map(|e| Pending::decode(e))
            .collect::<Result<_, _>>()?;
        // The restored checkpoint completed: everything it recorded as pending is committed.
        for p in &recorded {
            self.commit(p)?;
        }
        // Invariant: after open, no in-progress file of this subtask (or, for subtask 0, of a
        // subtask index beyond the parallelism) holds records the restored checkpoint covers.
        let mut max_n = None;
        let entries = fs::read_dir(&self.dir).map_err(|e| self.io("list", &self.dir.clone(), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((s, n, in_progress)) = parse_name(&name) else {
                continue;
            };
            let mine = s == ctx.index || (ctx.index == 0 && s >= ctx.parallelism);
            if in_progress && mine && self.mode == SinkMode::ExactlyOnce {
                fs::remove_file(entry.path()).map_err(|e| self.io("delete", &entry.path(), e))?;
            } else if s == ctx.index {
                max_n = max_n.max(Some(n));
            }
        }
        self.next_n = max_n.map_or(0, |n| n + 1);
        self.sync_dir()
    }

    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        let format = self.format.clone();
        let mut line = std::mem::take(&mut self.line);
        let file = self.start_file()?;
        let mut result = Ok(());
        for record in &batch {
            line.clear();
            format(record, &mut line);
            line.push(b'\n');
            if let Err(e) = file.write_all(&line) {
                result = Err(e);
                break;
            }
        }
        self.line = line;
        let dir = self.dir.clone();
        result.map_err(|e| self.io("write into", &dir, e))
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        if let Some((n, mut file)) = self.current.take() {
            let path = self.dir.join(in_progress_name(self.subtask, n));
            file.flush()
                .and_then(|_| file.get_ref().sync_all())
                .map_err(|e| self.io("flush", &path, e))?;
            if self.mode == SinkMode::ExactlyOnce {
                self.pending.push(Pending {
                    checkpoint,
                    n,
                    subtask: self.subtask,
                });
            }
        }
        Ok(self.pending.iter().map(Pending::encode).collect())
    }

    fn notify_complete(&mut self, checkpoint: CheckpointId) -> Result<(), TaskError> {
        let (ready, waiting): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|p| p.checkpoint <= checkpoint);
        self.pending = waiting;
        for p in &ready {
            self.commit(p)?;
        }
        if !ready.is_empty() {
            self.sync_dir()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        if let Some((_, file)) = self.current.as_mut() {
            let dir = self.dir.clone();
            file.flush().map_err(|e| self.io("flush into", &dir, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weir_core::KeyGroupRange;

    fn ctx(index: u32) -> OperatorContext {
        OperatorContext {
            uid: "out".into(),
            name: "out".into(),
            index,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 0),
            state_backend: Default::default(),
            metrics: Default::default(),
        }
    }

    fn sink(dir: &Path) -> CommittingFileSink<u32> {
        let format: LineFormat<u32> =
            Arc::new(|n: &u32, out: &mut Vec<u8>| out.extend_from_slice(n.to_string().as_bytes()));
        CommittingFileSink::new(dir, format, SinkMode::ExactlyOnce)
    }

    fn visible(dir: &Path) -> Vec<String> {
        let mut lines: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .flat_map(|e| {
                fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn records_become_visible_only_when_their_checkpoint_completes_and_commits_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path());
        s.open(&ctx(0), None).unwrap();
        s.write_batch(vec![1, 2]).unwrap();
        s.snapshot(CheckpointId(1)).unwrap();
        s.write_batch(vec![3]).unwrap();
        assert!(visible(dir.path()).is_empty());
        s.notify_complete(CheckpointId(1)).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
        s.notify_complete(CheckpointId(1)).unwrap(); // repeated notice: nothing changes
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
    }

    #[test]
    fn restore_commits_what_the_checkpoint_recorded_and_deletes_what_came_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path());
        s.open(&ctx(0), None).unwrap();
        s.write_batch(vec![1]).unwrap();
        let state = s.snapshot(CheckpointId(7)).unwrap(); // the notice is lost in a crash
        s.write_batch(vec![2]).unwrap();
        s.finish().unwrap();
        drop(s);

        let mut restored = sink(dir.path());
        restored.open(&ctx(0), Some(state)).unwrap();
        assert_eq!(visible(dir.path()), vec!["1"]);
        let hidden = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .count();
        assert_eq!(
            hidden, 0,
            "the in-progress file after the checkpoint was not deleted"
        );
        restored.write_batch(vec![2]).unwrap();
        restored.snapshot(CheckpointId(8)).unwrap();
        restored.notify_complete(CheckpointId(8)).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
    }

    #[test]
    fn an_aborted_checkpoint_leaves_its_files_pending_until_the_next_completes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path());
        s.open(&ctx(0), None).unwrap();
        s.write_batch(vec![1]).unwrap();
        s.snapshot(CheckpointId(1)).unwrap();
        s.notify_aborted(CheckpointId(1)).unwrap();
        s.write_batch(vec![2]).unwrap();
        let state = s.snapshot(CheckpointId(2)).unwrap();
        assert_eq!(state.len(), 2, "both files are pending in checkpoint 2");
        s.notify_complete(CheckpointId(2)).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
    }

    #[test]
    fn an_output_path_that_is_a_file_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out");
        fs::write(&file, "x").unwrap();
        let err = sink(&file).open(&ctx(0), None).unwrap_err();
        assert!(matches!(err, TaskError::BadInput(_)), "{err}");
    }
}
