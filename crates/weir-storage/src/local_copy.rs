//! Local recovery (`state.backend.local-recovery`): the state files a process writes for its
//! checkpoints are also kept on its own disk, and a restore in the same process — a restart
//! after a failure — reads them there instead of from the checkpoint storage, which may be an
//! object store across a network.
//!
//! A local copy is only ever a shortcut: every file read from it is checked against the size
//! and CRC-32C its handle recorded, and one that is missing or does not match is read from the
//! checkpoint storage instead (with a warning). Nothing is fsynced: a torn copy fails its
//! check. Copies live under `<root>/weir-local-<pid>/`, in the checkpoint storage's own layout,
//! so they last as long as the process; a new one deletes the directories of processes that
//! are gone. Each writer (a subtask) keeps the files of its last [`KEPT`] snapshots: the
//! checkpoint a restart restores is one of them unless newer ones failed, and then the
//! checkpoint storage serves.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use weir_core::StateHandle;

/// Snapshots per writer whose files are kept.
pub const KEPT: usize = 2;

const DIR_PREFIX: &str = "weir-local-";

/// A process's local copy of the state files it wrote, for one job.
#[derive(Debug)]
pub struct LocalCopy {
    /// The job's directory in the process's directory.
    root: PathBuf,
    /// The process's directory (removed when the copy is dropped).
    process_dir: PathBuf,
    /// Per writer, the files of its last snapshots, newest last.
    kept: Mutex<HashMap<String, VecDeque<BTreeSet<String>>>>,
    /// Files read from the local copy, and bytes.
    hits: AtomicU64,
    hit_bytes: AtomicU64,
}

impl LocalCopy {
    /// The local copy of job `job` (a directory name) under `root`. Deletes the directories
    /// that processes no longer running left there.
    pub fn new(root: &Path, job: &str) -> std::io::Result<LocalCopy> {
        std::fs::create_dir_all(root)?;
        sweep_dead_processes(root);
        let process_dir = root.join(format!("{DIR_PREFIX}{}", std::process::id()));
        let job_dir = process_dir.join(job);
        std::fs::create_dir_all(&job_dir)?;
        Ok(LocalCopy {
            root: job_dir,
            process_dir,
            kept: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
        })
    }

    /// Where the copy of `relative` goes.
    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative.trim_matches('/'))
    }

    /// Keeps a copy of the file written at `relative` with `bytes` (chunks back to back).
    /// Failing only costs the shortcut: it is logged, not returned.
    pub fn put(&self, relative: &str, chunks: &[&[u8]]) {
        let path = self.path(relative);
        let tmp = path.with_extension("local-tmp");
        let written = (|| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::File::create(&tmp)?;
            for chunk in chunks {
                std::io::Write::write_all(&mut file, chunk)?;
            }
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(file = %path.display(), error = %e, "could not keep a local copy of a state file");
        }
    }

    /// Keeps a copy of the file written at `relative` from the local file `source`: a hard
    /// link where the two share a file system (the file never changes), else a copy.
    pub fn put_file(&self, relative: &str, source: &Path) {
        let path = self.path(relative);
        let linked = (|| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let _ = std::fs::remove_file(&path);
            std::fs::hard_link(source, &path).or_else(|_| {
                let tmp = path.with_extension("local-tmp");
                std::fs::copy(source, &tmp)?;
                std::fs::rename(&tmp, &path)
            })
        })();
        if let Err(e) = linked {
            tracing::warn!(file = %path.display(), error = %e, "could not keep a local copy of a state file");
        }
    }

    /// The bytes of `handle`'s file from the local copy, if it holds them intact.
    pub fn read(&self, handle: &StateHandle) -> Option<Vec<u8>> {
        let path = self.path(&handle.path);
        let bytes = std::fs::read(&path).ok()?;
        if bytes.len() as u64 != handle.size || crc32c::crc32c(&bytes) != handle.checksum {
            tracing::warn!(file = %path.display(), "the local copy of a state file does not match its checksum; reading it from checkpoint storage");
            return None;
        }
        self.hit(handle.size);
        Some(bytes)
    }

    /// Puts `handle`'s file from the local copy at `dest` (a hard link, or a copy), if the
    /// copy is intact; `false` leaves nothing at `dest`.
    pub fn fetch(&self, handle: &StateHandle, dest: &Path) -> bool {
        let path = self.path(&handle.path);
        if !path.exists() {
            return false;
        }
        let _ = std::fs::remove_file(dest);
        if std::fs::hard_link(&path, dest).is_err() && std::fs::copy(&path, dest).is_err() {
            let _ = std::fs::remove_file(dest);
            return false;
        }
        match file_crc(dest) {
            Ok((size, crc)) if size == handle.size && crc == handle.checksum => {
                self.hit(size);
                true
            }
            _ => {
                tracing::warn!(file = %path.display(), "the local copy of a state file does not match its checksum; reading it from checkpoint storage");
                let _ = std::fs::remove_file(dest);
                let _ = std::fs::remove_file(&path);
                false
            }
        }
    }

    fn hit(&self, bytes: u64) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.hit_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Files and bytes read from the local copy so far.
    pub fn reads(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.hit_bytes.load(Ordering::Relaxed),
        )
    }

    /// Records that `writer`'s latest snapshot consists of `files` (relative paths), and
    /// deletes the copies of files only its older snapshots had, past the last [`KEPT`].
    pub fn retain(&self, writer: &str, files: BTreeSet<String>) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let snapshots = kept.entry(writer.to_string()).or_default();
        snapshots.push_back(files);
        let mut dropped = Vec::new();
        while snapshots.len() > KEPT {
            dropped.extend(snapshots.pop_front());
        }
        for file in dropped.into_iter().flatten() {
            let still_kept = kept.values().flatten().any(|s| s.contains(&file));
            if !still_kept {
                self.discard(&file);
            }
        }
    }

    /// Deletes the copy of `relative`, and its directory once empty.
    pub fn discard(&self, relative: &str) {
        let path = self.path(relative);
        let _ = std::fs::remove_file(&path);
        if let Some(dir) = path.parent().filter(|d| *d != self.root) {
            let _ = std::fs::remove_dir(dir); // only if empty
        }
    }

    /// Deletes the copies under the directory `relative`.
    pub fn discard_dir(&self, relative: &str) {
        let _ = std::fs::remove_dir_all(self.path(relative));
    }
}

impl Drop for LocalCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_dir(&self.process_dir); // only if no other job's copy is in it
    }
}

/// Size and CRC-32C of a file, read a part at a time.
fn file_crc(path: &Path) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut size, mut crc) = (0u64, 0u32);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((size, crc));
        }
        size += n as u64;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// Deletes the directories of processes no longer running under `root`.
fn sweep_dead_processes(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::HandleKind;

    fn handle(path: &str, bytes: &[u8]) -> StateHandle {
        StateHandle {
            path: path.into(),
            size: bytes.len() as u64,
            checksum: crc32c::crc32c(bytes),
            kind: HandleKind::Operator,
            shared: false,
            inline: None,
        }
    }

    #[test]
    fn a_copy_is_read_only_while_it_matches_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCopy::new(dir.path(), "job").unwrap();
        local.put("chk-1/op-0.keyed", &[b"hello ", b"world"]);
        let h = handle("chk-1/op-0.keyed", b"hello world");
        assert_eq!(local.read(&h).unwrap(), b"hello world");
        let dest = dir.path().join("fetched");
        assert!(local.fetch(&h, &dest));
        assert_eq!(std::fs::read(&dest).unwrap(), b"hello world");
        assert_eq!(local.reads(), (2, 22));
        // Damaged: the handle's checksum decides, and the caller goes to checkpoint storage.
        std::fs::write(local.path("chk-1/op-0.keyed"), b"hello WORLD").unwrap();
        assert!(local.read(&h).is_none());
        assert!(!local.fetch(&h, &dest));
        assert!(!dest.exists());
        assert!(local.read(&handle("chk-2/op-0.keyed", b"x")).is_none());
    }

    #[test]
    fn each_writer_keeps_the_files_of_its_last_snapshots_only() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalCopy::new(dir.path(), "job").unwrap();
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        for name in ["chk-1/a-0.m", "shared/a-0-1", "chk-2/a-0.m", "chk-3/a-0.m"] {
            local.put(name, &[b"x"]);
        }
        local.retain("a-0", set(&["chk-1/a-0.m", "shared/a-0-1"]));
        local.retain("a-0", set(&["chk-2/a-0.m", "shared/a-0-1"]));
        local.retain("a-0", set(&["chk-3/a-0.m", "shared/a-0-1"]));
        assert!(!local.path("chk-1/a-0.m").exists());
        assert!(
            !local.path("chk-1").exists(),
            "an emptied directory goes too"
        );
        for kept in ["chk-2/a-0.m", "chk-3/a-0.m", "shared/a-0-1"] {
            assert!(local.path(kept).exists(), "{kept}");
        }
    }

    #[test]
    fn a_copy_lasts_as_long_as_its_process_and_dead_processes_copies_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(format!("{DIR_PREFIX}{}", u32::MAX - 1));
        std::fs::create_dir_all(dead.join("job/chk-1")).unwrap();
        let local = LocalCopy::new(dir.path(), "job").unwrap();
        assert!(!dead.exists());
        local.put("chk-1/a-0.m", &[b"x"]);
        let mine = local.process_dir.clone();
        assert!(mine.exists());
        drop(local);
        assert!(!mine.exists());
    }
}
