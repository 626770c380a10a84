//! A file sink: one file of lines per subtask, made exactly-once by truncation on restore.
//!
//! On every snapshot the sink flushes and fsyncs its file and records the file's length in the
//! checkpoint. On restore it truncates the file back to that length, dropping whatever was
//! written after the checkpoint (the restored job writes it again). Readers may see lines that
//! a later failure rolls back; the two-phase-commit file sink is the one that never exposes
//! uncommitted data.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;
use weir_core::CheckpointId;
use weir_runtime::operators::SinkFunction;
use weir_runtime::{OperatorContext, TaskError};

/// Formats one record as bytes of a line (without the newline).
pub type LineFormat<T> = Arc<dyn Fn(&T, &mut Vec<u8>) + Send + Sync>;

/// Writes `format(record)` lines to `<dir>/part-<subtask>`.
pub struct FileSink<T> {
    dir: PathBuf,
    format: LineFormat<T>,
    file: Option<BufWriter<File>>,
    path: PathBuf,
    line: Vec<u8>,
}

impl<T> Clone for FileSink<T> {
    fn clone(&self) -> Self {
        FileSink::new(self.dir.clone(), self.format.clone())
    }
}

impl<T> FileSink<T> {
    pub fn new(dir: impl Into<PathBuf>, format: LineFormat<T>) -> FileSink<T> {
        FileSink {
            dir: dir.into(),
            format,
            file: None,
            path: PathBuf::new(),
            line: Vec::new(),
        }
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> TaskError {
        TaskError::user(format!(
            "file sink cannot {what} {}: {e}",
            self.path.display()
        ))
    }
}

impl<T: Send + 'static> SinkFunction<T> for FileSink<T> {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(TaskError::user(format!(
                "file sink output {} exists and is not a directory",
                self.dir.display()
            )));
        }
        fs::create_dir_all(&self.dir).map_err(|e| {
            TaskError::user(format!(
                "file sink cannot create {}: {e}",
                self.dir.display()
            ))
        })?;
        self.path = self.dir.join(format!("part-{}", ctx.index));
        let committed = match restored.as_deref() {
            Some([len]) if len.len() == 8 => {
                u64::from_le_bytes(len[..].try_into().expect("8 bytes"))
            }
            Some(other) => {
                return Err(TaskError::user(format!(
                    "file sink state for {} is malformed ({} elements)",
                    self.path.display(),
                    other.len()
                )))
            }
            None => 0,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .map_err(|e| self.io_error("open", e))?;
        // Invariant: after open the file holds exactly what the restored checkpoint covered.
        file.set_len(committed)
            .map_err(|e| self.io_error("truncate", e))?;
        file.seek(std::io::SeekFrom::End(0))
            .map_err(|e| self.io_error("seek", e))?;
        self.file = Some(BufWriter::with_capacity(1 << 16, file));
        Ok(())
    }

    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), TaskError> {
        let Some(file) = self.file.as_mut() else {
            return Err(TaskError::user("file sink written before open"));
        };
        for record in &batch {
            self.line.clear();
            (self.format)(record, &mut self.line);
            self.line.push(b'\n');
            if let Err(e) = file.write_all(&self.line) {
                return Err(TaskError::user(format!(
                    "file sink cannot write {}: {e}",
                    self.path.display()
                )));
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Vec<Vec<u8>>, TaskError> {
        let Some(file) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        let result = file
            .flush()
            .and_then(|_| file.get_ref().sync_data())
            .and_then(|_| file.get_mut().stream_position());
        let len = result.map_err(|e| {
            TaskError::user(format!(
                "file sink cannot flush {}: {e}",
                self.path.display()
            ))
        })?;
        Ok(vec![len.to_le_bytes().to_vec()])
    }

    fn finish(&mut self) -> Result<(), TaskError> {
        if let Some(file) = self.file.as_mut() {
            file.flush().map_err(|e| {
                TaskError::user(format!(
                    "file sink cannot flush {}: {e}",
                    self.path.display()
                ))
            })?;
        }
        Ok(())
    }
}
