//! Blocking access to an object store for the (thread-based) runtime: every call runs on one
//! small process-wide tokio runtime, and transient errors of remote stores are retried with
//! exponential backoff.

use crate::faults;
use crate::StorageError;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::runtime::Runtime;

/// Files larger than this are written and read a part of this size at a time (a multipart
/// upload to an object store).
pub(crate) const STREAMED_PART: usize = 8 << 20;

/// Parts of one multipart upload in flight at once.
const UPLOADS_IN_FLIGHT: usize = 2;

/// Attempts of one operation on a remote store before its error is reported.
const ATTEMPTS: u32 = 4;
/// The first retry waits this long; every further one twice as long.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-storage-io")
            .enable_all()
            .build()
            .expect("start the storage I/O runtime")
    })
}

/// One object listed under a prefix: its key relative to the prefix, and its size.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub relative: String,
    pub size: u64,
}

/// An object store with the key prefix of one job's root.
#[derive(Clone, Debug)]
pub(crate) struct ObjectIo {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// How paths are shown in errors: the job root's location.
    display_root: String,
    /// The directory of a local store (large files are read from it around the page cache);
    /// `None` for a remote store, whose errors may be transient and are worth retrying.
    local_dir: Option<PathBuf>,
}

impl ObjectIo {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: String,
        display_root: String,
        local_dir: Option<PathBuf>,
    ) -> Self {
        ObjectIo {
            store,
            prefix,
            display_root,
            local_dir,
        }
    }

    /// The full name of a relative path, for messages.
    pub fn display(&self, relative: &str) -> String {
        if relative.is_empty() {
            self.display_root.clone()
        } else {
            format!("{}/{relative}", self.display_root)
        }
    }

    fn key(&self, relative: &str) -> ObjectPath {
        let relative = relative.trim_matches('/');
        match (self.prefix.is_empty(), relative.is_empty()) {
            (true, _) => ObjectPath::from(relative),
            (false, true) => ObjectPath::from(self.prefix.as_str()),
            (false, false) => ObjectPath::from(format!("{}/{relative}", self.prefix)),
        }
    }

    fn error(&self, relative: &str, e: object_store::Error) -> StorageError {
        let path = self.display(relative);
        match e {
            object_store::Error::NotFound { .. } => StorageError::Missing { path },
            e => StorageError::Object {
                path,
                reason: e.to_string(),
            },
        }
    }

    /// Runs `op` on the runtime, retrying transient errors of a remote store with backoff.
    fn run<T, F, Fut>(&self, relative: &str, op: F) -> Result<T, StorageError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, object_store::Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match runtime().block_on(op()) {
                Ok(v) => return Ok(v),
                Err(e) if self.local_dir.is_none() && attempt < ATTEMPTS && is_transient(&e) => {
                    tracing::warn!(path = %self.display(relative), attempt, error = %e, "object store error; retrying");
                    std::thread::sleep(backoff);
                    backoff *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(self.error(relative, e)),
            }
        }
    }

    /// Writes an object whole: atomic on every store (a local one writes a temp file, fsyncs
    /// it, renames it and fsyncs the directory).
    pub fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<(), StorageError> {
        if let Some(e) = faults::check("put", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        let key = self.key(relative);
        let payload = PutPayload::from(bytes);
        self.run(relative, || self.store.put(&key, payload.clone()))
            .map(|_| ())
    }

    /// Writes an object whole from chunks written back to back (no copy into one buffer).
    pub fn put_chunks(&self, relative: &str, chunks: Vec<Vec<u8>>) -> Result<(), StorageError> {
        if let Some(e) = faults::check("put", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        let key = self.key(relative);
        let payload: PutPayload = chunks.into_iter().map(bytes::Bytes::from).collect();
        self.run(relative, || self.store.put(&key, payload.clone()))?;
        weir_state::EncodeBuffer::recycle(reclaim(payload));
        Ok(())
    }

    /// Writes the object `relative` from the local file `local` and returns the size and
    /// CRC-32C of what was written. A file of at most [`STREAMED_PART`] bytes is one put; a
    /// larger one is written a part at a time (a multipart upload; a local store stages the
    /// parts in a temp file, fsyncs and renames it), so memory holds a few parts whatever the
    /// file's size. Atomic as `put` is: an upload that fails is aborted.
    pub fn put_file(&self, relative: &str, local: &Path) -> Result<(u64, u32), StorageError> {
        let io_error = |source| StorageError::Io {
            path: local.display().to_string(),
            source,
        };
        let size = std::fs::metadata(local).map_err(io_error)?.len();
        if size <= STREAMED_PART as u64 {
            let bytes = std::fs::read(local).map_err(io_error)?;
            let written = (bytes.len() as u64, crc32c::crc32c(&bytes));
            self.put(relative, bytes)?;
            return Ok(written);
        }
        if let Some(e) = faults::check("put", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        let key = self.key(relative);
        let upload = self.run(relative, || self.store.put_multipart(&key))?;
        // Parts are uploaded by tasks of the storage runtime, spawned as they fill.
        let _runtime = runtime().enter();
        let mut writer = WriteMultipart::new_with_chunk_size(upload, STREAMED_PART);
        let mut file = std::fs::File::open(local).map_err(io_error)?;
        let mut buffer = vec![0; STREAMED_PART];
        let (mut written, mut crc) = (0u64, 0u32);
        loop {
            let read = match read_full(&mut file, &mut buffer) {
                Ok(n) => n,
                Err(e) => {
                    let _ = runtime().block_on(writer.abort());
                    return Err(io_error(e));
                }
            };
            if read == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buffer[..read]);
            written += read as u64;
            if let Err(e) = runtime().block_on(writer.wait_for_capacity(UPLOADS_IN_FLIGHT)) {
                let _ = runtime().block_on(writer.abort());
                return Err(self.error(relative, e));
            }
            writer.write(&buffer[..read]);
        }
        runtime()
            .block_on(writer.finish())
            .map_err(|e| self.error(relative, e))?;
        Ok((written, crc))
    }

    /// Copies the object `relative` into the local file `dest` (created or truncated) a part
    /// at a time, and returns the size and CRC-32C of what was read.
    pub fn get_to_file(&self, relative: &str, dest: &Path) -> Result<(u64, u32), StorageError> {
        use std::io::Write;
        if let Some(e) = faults::check("get", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        let dest_error = |source| StorageError::Io {
            path: dest.display().to_string(),
            source,
        };
        let mut out = std::fs::File::create(dest).map_err(dest_error)?;
        let (mut read, mut crc) = (0u64, 0u32);
        if let Some(dir) = &self.local_dir {
            let source = dir.join(relative.trim_matches('/'));
            let mut file = std::fs::File::open(&source).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => StorageError::Missing {
                    path: self.display(relative),
                },
                _ => StorageError::Io {
                    path: self.display(relative),
                    source: e,
                },
            })?;
            let mut buffer = vec![0; STREAMED_PART];
            loop {
                let n = read_full(&mut file, &mut buffer).map_err(|source| StorageError::Io {
                    path: self.display(relative),
                    source,
                })?;
                if n == 0 {
                    return Ok((read, crc));
                }
                crc = crc32c::crc32c_append(crc, &buffer[..n]);
                read += n as u64;
                out.write_all(&buffer[..n]).map_err(dest_error)?;
            }
        }
        let key = self.key(relative);
        let got = self.run(relative, || self.store.get(&key))?;
        let mut stream = got.into_stream();
        while let Some(chunk) = runtime()
            .block_on(stream.try_next())
            .map_err(|e| self.error(relative, e))?
        {
            crc = crc32c::crc32c_append(crc, &chunk);
            read += chunk.len() as u64;
            out.write_all(&chunk).map_err(dest_error)?;
        }
        Ok((read, crc))
    }

    /// Reads an object whole; a large local file around the page cache (see
    /// [`direct_read`](crate::direct_read)).
    pub fn get(&self, relative: &str) -> Result<Vec<u8>, StorageError> {
        if let Some(e) = faults::check("get", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        if let Some(dir) = &self.local_dir {
            if let Some(read) = crate::direct_read::read(&dir.join(relative.trim_matches('/'))) {
                return read.map_err(|source| StorageError::Io {
                    path: self.display(relative),
                    source,
                });
            }
        }
        let key = self.key(relative);
        let bytes = self.run(relative, || async {
            self.store.get(&key).await?.bytes().await
        })?;
        Ok(Vec::from(bytes))
    }

    /// The size of an object, without reading it.
    pub fn size(&self, relative: &str) -> Result<u64, StorageError> {
        if let Some(e) = faults::check("get", relative) {
            return Err(StorageError::Io {
                path: self.display(relative),
                source: e,
            });
        }
        let key = self.key(relative);
        let meta = self.run(relative, || self.store.head(&key))?;
        Ok(meta.size)
    }

    /// Deletes an object; a missing one is fine.
    pub fn delete(&self, relative: &str) -> Result<(), StorageError> {
        let key = self.key(relative);
        match self.run(relative, || self.store.delete(&key)) {
            Ok(()) | Err(StorageError::Missing { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The names of the "directories" directly under `relative`.
    pub fn list_dirs(&self, relative: &str) -> Result<Vec<String>, StorageError> {
        let key = self.key(relative);
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let listing = match self.run(relative, || self.store.list_with_delimiter(prefix)) {
            Ok(l) => l,
            Err(StorageError::Missing { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// Every object under `relative`, recursively, with keys relative to the job root.
    pub fn list_files(&self, relative: &str) -> Result<Vec<Listed>, StorageError> {
        let key = self.key(relative);
        let prefix = (!key.as_ref().is_empty()).then_some(key.clone());
        let root = self.key("");
        let objects = match self.run(relative, || {
            self.store.list(prefix.as_ref()).try_collect::<Vec<_>>()
        }) {
            Ok(o) => o,
            Err(StorageError::Missing { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(objects
            .into_iter()
            .filter_map(|meta| {
                let full = meta.location.as_ref();
                let rel = if root.as_ref().is_empty() {
                    full
                } else {
                    full.strip_prefix(root.as_ref())?.strip_prefix('/')?
                };
                Some(Listed {
                    relative: rel.to_string(),
                    size: meta.size,
                })
            })
            .collect())
    }
}

/// Reads until `buffer` is full or the file ends; the bytes read.
fn read_full(file: &mut std::fs::File, buffer: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn is_transient(e: &object_store::Error) -> bool {
    !matches!(
        e,
        object_store::Error::NotFound { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

/// The buffers of a payload the store let go of, without copying them: encoding the next
/// checkpoint reuses their memory (see [`weir_state::EncodeBuffer::recycle`]). A part the
/// store still holds is left alone.
fn reclaim(payload: PutPayload) -> impl Iterator<Item = Vec<u8>> {
    // The parts are unique once the payload (which the iterator holds) is gone.
    let parts: Vec<bytes::Bytes> = payload.into_iter().collect();
    parts
        .into_iter()
        .filter_map(|part| part.try_into_mut().ok().map(Vec::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_payload_gives_its_buffers_back_without_copying_them() {
        let mut chunks = vec![Vec::with_capacity(4096), b"exact".to_vec()];
        chunks[0].extend_from_slice(b"some bytes");
        let addresses: Vec<*const u8> = chunks.iter().map(|c| c.as_ptr()).collect();
        let payload: PutPayload = chunks.into_iter().map(bytes::Bytes::from).collect();
        let back: Vec<Vec<u8>> = reclaim(payload).collect();
        assert_eq!(back, [b"some bytes".to_vec(), b"exact".to_vec()]);
        let again: Vec<*const u8> = back.iter().map(|c| c.as_ptr()).collect();
        assert_eq!(again, addresses);
        assert!(back[0].capacity() >= 4096);
    }

    #[test]
    fn a_part_still_held_elsewhere_is_not_reclaimed() {
        let held = bytes::Bytes::from(b"shared".to_vec());
        let payload: PutPayload = [held.clone(), bytes::Bytes::from(b"own".to_vec())]
            .into_iter()
            .collect();
        let back: Vec<Vec<u8>> = reclaim(payload).collect();
        assert_eq!(back, [b"own".to_vec()]);
        assert_eq!(held, b"shared".as_slice());
    }
}
