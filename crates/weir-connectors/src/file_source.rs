//! A replayable source of text lines from a file or a directory of files.
//!
//! A directory's files (not hidden ones) are read in name order; each file belongs to the
//! subtask that its name hashes to, so files that appear later are picked up too. The position
//! is, per file, the byte offset after the last line emitted (and whether the file is done), so
//! a restored source continues with exactly the next line.
//!
//! Rescaling: the per-file positions are list state, dealt over the new subtasks, so a file
//! may end up with a subtask its name does not hash to. The names of every file some subtask
//! holds travel as union state too: every restored subtask knows them all, and claims by hash
//! only files that nobody holds yet. A file is therefore read by exactly one subtask, from
//! its recorded offset, at any parallelism. A line that is not UTF-8 is an error naming the file and the
//! byte offset — or, when asked, skipped and counted.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

/// One file's read position.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileSplit {
    name: String,
    offset: u64,
    done: bool,
}

impl FileSplit {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.name.len() + 9);
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.push(self.done as u8);
        out.extend_from_slice(self.name.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<FileSplit, TaskError> {
        let bad = || {
            TaskError::user(
                "file source position is malformed: the checkpoint was not written by this source",
            )
        };
        if bytes.len() < 9 {
            return Err(bad());
        }
        Ok(FileSplit {
            offset: u64::from_le_bytes(bytes[..8].try_into().map_err(|_| bad())?),
            done: bytes[8] != 0,
            name: String::from_utf8(bytes[9..].to_vec()).map_err(|_| bad())?,
        })
    }
}

/// Reads lines of UTF-8 text. Bounded by default: it ends when every file has been read to its
/// end and no new file has appeared. [`monitor_continuously`](Self::monitor_continuously) makes
/// it unbounded: it keeps looking for new files and never ends by itself.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    skip_invalid: bool,
    skipped: Arc<AtomicU64>,
    index: u32,
    parallelism: u32,
    splits: Vec<FileSplit>,
    /// Files some subtask held at the restored checkpoint: not this subtask's to discover,
    /// whatever their names hash to.
    held_elsewhere: HashSet<String>,
    current: Option<Reader>,
    /// How often to look for new files once every known file is read; `None`: bounded.
    monitor_interval: Option<Duration>,
    last_discovery: Option<Instant>,
}

#[derive(Debug)]
struct Reader {
    split: usize,
    reader: BufReader<File>,
}

/// A clone starts with no open file: subtasks clone the configured source before opening.
impl Clone for FileSource {
    fn clone(&self) -> Self {
        FileSource {
            path: self.path.clone(),
            skip_invalid: self.skip_invalid,
            skipped: self.skipped.clone(),
            index: self.index,
            parallelism: self.parallelism,
            splits: self.splits.clone(),
            held_elsewhere: self.held_elsewhere.clone(),
            current: None,
            monitor_interval: self.monitor_interval,
            last_discovery: None,
        }
    }
}

impl FileSource {
    /// Reads `path`: a file, or every non-hidden file of a directory.
    pub fn new(path: impl Into<PathBuf>) -> FileSource {
        FileSource {
            path: path.into(),
            skip_invalid: false,
            skipped: Arc::new(AtomicU64::new(0)),
            index: 0,
            parallelism: 1,
            splits: Vec::new(),
            held_elsewhere: HashSet::new(),
            current: None,
            monitor_interval: None,
            last_discovery: None,
        }
    }

    /// Keeps reading a directory as it grows: once every file is read, looks for new ones
    /// every `interval` (Flink's `source.monitor-interval`) and never ends. Files must appear
    /// whole: write them under a hidden name (a leading `.`) and rename them into place.
    pub fn monitor_continuously(mut self, interval: Duration) -> FileSource {
        self.monitor_interval = Some(interval);
        self
    }

    /// Skips lines that are not UTF-8 instead of failing; [`skipped`](Self::skipped) counts them.
    pub fn skip_invalid_utf8(mut self) -> FileSource {
        self.skip_invalid = true;
        self
    }

    /// Lines skipped so far, over all subtasks.
    pub fn skipped(&self) -> Arc<AtomicU64> {
        self.skipped.clone()
    }

    fn is_dir(&self) -> bool {
        self.path.is_dir()
    }

    fn file_path(&self, name: &str) -> PathBuf {
        if self.is_dir() {
            self.path.join(name)
        } else {
            self.path.clone()
        }
    }

    /// The names of the input's files, sorted: every visible file of a directory, or the one
    /// file (for subtask 0).
    fn list_files(&self) -> Result<Vec<String>, TaskError> {
        let unreadable = |e: std::io::Error| {
            TaskError::BadInput(format!("cannot read input {}: {e}", self.path.display()))
        };
        if !self.is_dir() {
            std::fs::metadata(&self.path).map_err(unreadable)?;
            let name = self
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok(if self.index == 0 {
                vec![name]
            } else {
                Vec::new()
            });
        }
        let mut names: Vec<String> = std::fs::read_dir(&self.path)
            .map_err(unreadable)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Adds splits for this subtask's files that appeared since the last look; true if any
    /// did. Files read to their end and since removed from the directory leave the state, so
    /// it stays proportional to the directory's content, not to everything ever read.
    fn discover(&mut self) -> Result<bool, TaskError> {
        debug_assert!(self.current.is_none(), "splits move only between files");
        self.last_discovery = Some(Instant::now());
        let present = self.list_files()?;
        let dir = self.is_dir();
        if dir {
            let listed: HashSet<&str> = present.iter().map(String::as_str).collect();
            self.splits
                .retain(|s| !s.done || listed.contains(s.name.as_str()));
            self.held_elsewhere
                .retain(|name| listed.contains(name.as_str()));
        }
        let known: HashSet<&str> = self.splits.iter().map(|s| s.name.as_str()).collect();
        let new: Vec<String> = present
            .into_iter()
            .filter(|name| !dir || owner(name, self.parallelism) == self.index)
            .filter(|name| !self.held_elsewhere.contains(name) && !known.contains(name.as_str()))
            .collect();
        let found = !new.is_empty();
        self.splits.extend(new.into_iter().map(|name| FileSplit {
            name,
            offset: 0,
            done: false,
        }));
        Ok(found)
    }

    fn open_next(&mut self) -> Result<bool, TaskError> {
        let Some(i) = self.splits.iter().position(|s| !s.done) else {
            return Ok(false);
        };
        let split = &self.splits[i];
        let path = self.file_path(&split.name);
        let unreadable = |e: std::io::Error| {
            TaskError::BadInput(format!("cannot read input file {}: {e}", path.display()))
        };
        let mut file = File::open(&path).map_err(unreadable)?;
        file.seek(SeekFrom::Start(split.offset))
            .map_err(unreadable)?;
        self.current = Some(Reader {
            split: i,
            reader: BufReader::with_capacity(1 << 16, file),
        });
        Ok(true)
    }
}

/// The subtask a file belongs to: FNV-1a of its name, stable across runs and platforms.
fn owner(name: &str, parallelism: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % parallelism.max(1) as u64) as u32
}

impl SourceFunction<String> for FileSource {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.index = ctx.index;
        self.parallelism = ctx.parallelism;
        self.splits = match restored {
            Some(elements) => elements
                .iter()
                .map(|e| FileSplit::decode(e))
                .collect::<Result<_, _>>()?,
            None => {
                self.held_elsewhere.clear();
                Vec::new()
            }
        };
        for split in &self.splits {
            self.held_elsewhere.remove(&split.name);
        }
        self.discover()?;
        Ok(())
    }

    fn restore_union(&mut self, elements: Vec<Vec<u8>>) -> Result<(), TaskError> {
        self.held_elsewhere = elements
            .into_iter()
            .map(|name| {
                String::from_utf8(name).map_err(|_| {
                    TaskError::user(
                        "file source file name is malformed: the checkpoint was not written by this source",
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<String>,
        max: usize,
    ) -> Result<SourceStatus, TaskError> {
        if self.current.is_none() && !self.open_next()? {
            if let Some(interval) = self.monitor_interval {
                // Unbounded: look again once the interval has passed, idle meanwhile.
                let due = self.last_discovery.is_none_or(|t| t.elapsed() >= interval);
                if !(due && self.discover()? && self.open_next()?) {
                    return Ok(SourceStatus::Idle);
                }
            } else if !(self.discover()? && self.open_next()?) {
                return Ok(SourceStatus::Exhausted);
            }
        }
        let Some(current) = self.current.as_mut() else {
            return Ok(SourceStatus::Exhausted);
        };
        let split = &mut self.splits[current.split];
        let path = if self.path.is_dir() {
            self.path.join(&split.name)
        } else {
            self.path.clone()
        };
        let mut line = Vec::new();
        while batch.len() < max {
            line.clear();
            let n = current.reader.read_until(b'\n', &mut line).map_err(|e| {
                TaskError::BadInput(format!("cannot read input file {}: {e}", path.display()))
            })?;
            if n == 0 {
                split.done = true;
                self.current = None;
                break;
            }
            let start = split.offset;
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            match std::str::from_utf8(text) {
                Ok(s) => batch.push(s.to_string()),
                Err(_) if self.skip_invalid => {
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    return Err(TaskError::BadInput(format!(
                        "{}: invalid UTF-8 at byte offset {}",
                        path.display(),
                        start + e.valid_up_to() as u64
                    )))
                }
            }
            // Invariant: the offset is right after the last line handed out.
            split.offset += n as u64;
        }
        Ok(SourceStatus::Emitted)
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(self.splits.iter().map(FileSplit::encode).collect())
    }

    /// The names of this subtask's files: together, the subtasks' names are every file held.
    fn snapshot_union(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(self
            .splits
            .iter()
            .map(|s| s.name.as_bytes().to_vec())
            .collect())
    }
}

/// Checks that `path` can be read as input, before a job starts.
pub fn check_input(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read input {}: {e}", path.display()))?;
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map_err(|e| format!("cannot read input directory {}: {e}", path.display()))?;
    } else {
        File::open(path).map_err(|e| format!("cannot read input file {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::KeyGroupRange;

    fn ctx() -> OperatorContext {
        OperatorContext {
            uid: "lines".into(),
            name: "lines".into(),
            index: 0,
            parallelism: 1,
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 0),
            state_backend: Default::default(),
            metrics: Default::default(),
        }
    }

    fn drain(source: &mut FileSource, max: usize) -> Result<Vec<String>, TaskError> {
        let mut all = Vec::new();
        loop {
            let mut batch = Vec::new();
            if source.poll_batch(&mut batch, max)? == SourceStatus::Exhausted {
                return Ok(all);
            }
            all.extend(batch);
        }
    }

    #[test]
    fn a_restored_source_continues_with_the_line_after_its_position_and_picks_up_new_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\r\nthree\n").unwrap();
        std::fs::write(dir.path().join(".hidden"), "never\n").unwrap();
        let mut s = FileSource::new(dir.path());
        s.open(&ctx(), None).unwrap();
        let mut first = Vec::new();
        s.poll_batch(&mut first, 1).unwrap();
        assert_eq!(first, vec!["one"]);
        let position = s.snapshot_position().unwrap();

        std::fs::write(dir.path().join("b.txt"), "four").unwrap();
        let mut restored = FileSource::new(dir.path());
        restored.open(&ctx(), Some(position)).unwrap();
        assert_eq!(
            drain(&mut restored, 2).unwrap(),
            vec!["two", "three", "four"]
        );
    }

    #[test]
    fn a_monitoring_source_idles_when_caught_up_and_reads_files_that_appear_later() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        let mut s = FileSource::new(dir.path()).monitor_continuously(Duration::ZERO);
        s.open(&ctx(), None).unwrap();
        let mut batch = Vec::new();
        assert_eq!(s.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Emitted);
        assert_eq!(batch, vec!["one"]);
        // Caught up: idle, never exhausted.
        for _ in 0..3 {
            batch.clear();
            assert_eq!(s.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Idle);
            assert!(batch.is_empty());
        }
        // A file renamed into place is read; its hidden temp name never is.
        std::fs::write(dir.path().join(".b.txt.tmp"), "two\nthree\n").unwrap();
        batch.clear();
        assert_eq!(s.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Idle);
        std::fs::rename(dir.path().join(".b.txt.tmp"), dir.path().join("b.txt")).unwrap();
        let mut read = Vec::new();
        for _ in 0..4 {
            batch.clear();
            s.poll_batch(&mut batch, 10).unwrap();
            read.append(&mut batch);
        }
        assert_eq!(read, vec!["two", "three"]);
        assert_eq!(s.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Idle);

        // With an interval, the directory is not listed again before it has passed.
        let mut slow = FileSource::new(dir.path()).monitor_continuously(Duration::from_secs(3600));
        slow.open(&ctx(), None).unwrap();
        let mut all = Vec::new();
        for _ in 0..4 {
            batch.clear();
            slow.poll_batch(&mut batch, 10).unwrap();
            all.append(&mut batch);
        }
        assert_eq!(all, vec!["one", "two", "three"]);
        std::fs::write(dir.path().join("c.txt"), "four\n").unwrap();
        batch.clear();
        assert_eq!(slow.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Idle);
        assert!(batch.is_empty());
    }

    #[test]
    fn files_read_and_then_removed_leave_the_state() {
        let dir = tempfile::tempdir().unwrap();
        for f in 0..5 {
            std::fs::write(dir.path().join(format!("f{f}")), "x\n").unwrap();
        }
        let mut s = FileSource::new(dir.path()).monitor_continuously(Duration::ZERO);
        s.open(&ctx(), None).unwrap();
        let mut batch = Vec::new();
        while s.poll_batch(&mut batch, 10).unwrap() != SourceStatus::Idle {}
        assert_eq!(batch.len(), 5);
        assert_eq!(s.snapshot_position().unwrap().len(), 5);
        for f in 0..4 {
            std::fs::remove_file(dir.path().join(format!("f{f}"))).unwrap();
        }
        assert_eq!(s.poll_batch(&mut batch, 10).unwrap(), SourceStatus::Idle);
        let position = s.snapshot_position().unwrap();
        assert_eq!(position.len(), 1, "only f4 is still in the directory");
        // A restored source still knows f4 is done.
        let mut restored = FileSource::new(dir.path());
        restored.open(&ctx(), Some(position)).unwrap();
        assert_eq!(drain(&mut restored, 10).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn invalid_utf8_is_an_error_naming_file_and_offset_unless_skipping_was_asked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.txt");
        std::fs::write(&file, b"fine\nab\xffcd\nlast\n").unwrap();
        let mut s = FileSource::new(&file);
        s.open(&ctx(), None).unwrap();
        let err = drain(&mut s, 10).unwrap_err().to_string();
        assert!(
            err.contains("bad.txt") && err.contains("byte offset 7"),
            "{err}"
        );

        let mut s = FileSource::new(&file).skip_invalid_utf8();
        s.open(&ctx(), None).unwrap();
        assert_eq!(drain(&mut s, 10).unwrap(), vec!["fine", "last"]);
        assert_eq!(s.skipped().load(Ordering::Relaxed), 1);
    }

    /// Reads `max` lines from each of `sources`, then snapshots all of them.
    fn read_then_snapshot(
        sources: &mut [FileSource],
        max: usize,
        read: &mut Vec<String>,
    ) -> Vec<weir_state::OperatorStateSnapshot> {
        sources
            .iter_mut()
            .map(|s| {
                let mut batch = Vec::new();
                s.poll_batch(&mut batch, max).unwrap();
                read.extend(batch);
                weir_state::OperatorStateSnapshot {
                    list: vec![("position".into(), s.snapshot_position().unwrap())],
                    union: vec![("position-union".into(), s.snapshot_union().unwrap())],
                }
            })
            .collect()
    }

    /// Opens `parallelism` subtasks on `dir` with their share of `snapshots`.
    fn restore(
        dir: &Path,
        snapshots: Vec<weir_state::OperatorStateSnapshot>,
        parallelism: u32,
    ) -> Vec<FileSource> {
        weir_state::redistribute_operator_state(snapshots, parallelism)
            .into_iter()
            .enumerate()
            .map(|(index, state)| {
                let mut s = FileSource::new(dir);
                let union = state.union_state("position-union").unwrap_or(&[]).to_vec();
                s.restore_union(union).unwrap();
                let list = state.list_state("position").unwrap_or(&[]).to_vec();
                let ctx = OperatorContext {
                    index: index as u32,
                    parallelism,
                    ..ctx()
                };
                s.open(&ctx, Some(list)).unwrap();
                s
            })
            .collect()
    }

    #[test]
    fn rescaled_subtasks_read_every_line_once_whichever_files_their_names_hash_to() {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = Vec::new();
        for f in 0..12 {
            let lines: Vec<String> = (0..7).map(|l| format!("{f}-{l}")).collect();
            std::fs::write(dir.path().join(format!("f{f}")), lines.join("\n") + "\n").unwrap();
            expected.extend(lines);
        }
        expected.sort();
        // 2 → 3 → 8 → 1 → 2, reading a little at each parallelism; a file that appears midway
        // is claimed by exactly one subtask.
        let mut read = Vec::new();
        let mut sources = restore(dir.path(), Vec::new(), 2);
        for (step, next) in [3, 8, 1, 2].into_iter().enumerate() {
            let snapshots = read_then_snapshot(&mut sources, 5, &mut read);
            if step == 1 {
                std::fs::write(dir.path().join("late"), "late-0\nlate-1\n").unwrap();
                expected.extend(["late-0".to_string(), "late-1".to_string()]);
                expected.sort();
            }
            sources = restore(dir.path(), snapshots, next);
        }
        for s in &mut sources {
            read.extend(drain(s, 3).unwrap());
        }
        read.sort();
        assert_eq!(read, expected);
    }

    #[test]
    fn a_subtask_restored_without_files_reads_nothing_already_held() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("only"), "a\nb\n").unwrap();
        let mut read = Vec::new();
        let mut sources = restore(dir.path(), Vec::new(), 1);
        let snapshots = read_then_snapshot(&mut sources, 1, &mut read);
        let mut sources = restore(dir.path(), snapshots, 4);
        for s in &mut sources {
            read.extend(drain(s, 3).unwrap());
        }
        assert_eq!(read, vec!["a", "b"]);
    }

    #[test]
    fn files_are_spread_over_subtasks_each_read_by_exactly_one() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}")), format!("{i}\n")).unwrap();
        }
        let mut all = Vec::new();
        for index in 0..3 {
            let mut s = FileSource::new(dir.path());
            s.open(
                &OperatorContext {
                    index,
                    parallelism: 3,
                    ..ctx()
                },
                None,
            )
            .unwrap();
            all.extend(drain(&mut s, 4).unwrap());
        }
        all.sort_by_key(|l| l.parse::<u32>().unwrap());
        assert_eq!(all, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}
