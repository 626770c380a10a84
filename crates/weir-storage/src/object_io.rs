//! Blocking access to an object store for the (thread-based) runtime: every call runs on one
//! small process-wide tokio runtime, and transient errors of remote stores are retried with
//! exponential backoff.

use crate::faults;
use crate::StorageError;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::runtime::Runtime;

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
