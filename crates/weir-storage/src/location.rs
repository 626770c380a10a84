//! Where a checkpoint directory lives — a local directory (a path or a `file://` URL) or an
//! S3 bucket (`s3://bucket/prefix`) — and the `object_store` client that reaches it.

use crate::StorageError;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, RetryConfig};
use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;
use weir_core::S3Options;

/// A parsed checkpoint directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A local directory.
    Local(PathBuf),
    /// A bucket and a key prefix inside it (no leading or trailing `/`).
    S3 { bucket: String, prefix: String },
}

impl Location {
    /// Parses `s3://bucket/prefix`, `file:///path` or a plain path.
    pub fn parse(text: &str) -> Result<Location, StorageError> {
        let bad = |reason: &str| StorageError::BadLocation {
            location: text.to_string(),
            reason: reason.to_string(),
        };
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3:// location needs a bucket: s3://bucket/path"));
            }
            let prefix = prefix.trim_matches('/').to_string();
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                prefix,
            });
        }
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad("a file:// URL needs an absolute path: file:///dir"));
            }
            return Ok(Location::Local(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(bad(&format!(
                "unsupported scheme '{scheme}://'; use a local path, file:// or s3://"
            )));
        }
        if text.trim().is_empty() {
            return Err(bad("empty path"));
        }
        Ok(Location::Local(PathBuf::from(text)))
    }

    /// `location` joined with one more path segment (a job's name).
    pub fn join(&self, name: &str) -> Location {
        if name.is_empty() {
            return self.clone();
        }
        match self {
            Location::Local(p) => Location::Local(p.join(name)),
            Location::S3 { bucket, prefix } => Location::S3 {
                bucket: bucket.clone(),
                prefix: if prefix.is_empty() {
                    name.to_string()
                } else {
                    format!("{prefix}/{name}")
                },
            },
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Location::S3 { .. })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// The object store for a job root and the key prefix of the root inside it.
pub(crate) fn connect(
    root: &Location,
    s3: &S3Options,
    create: bool,
) -> Result<(Arc<dyn ObjectStore>, String), StorageError> {
    match root {
        Location::Local(dir) => {
            let not_writable = |source| StorageError::NotWritable {
                path: dir.clone(),
                source,
            };
            if dir.exists() && !dir.is_dir() {
                return Err(StorageError::NotADirectory(dir.clone()));
            }
            if create {
                std::fs::create_dir_all(dir).map_err(not_writable)?;
            } else if !dir.is_dir() {
                return Err(StorageError::Missing {
                    path: dir.display().to_string(),
                });
            }
            let store = LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| StorageError::BadLocation {
                    location: dir.display().to_string(),
                    reason: e.to_string(),
                })?
                // Durable puts: temp file, fsync, rename, fsync of the directory.
                .with_fsync(true)
                .with_automatic_cleanup(true);
            Ok((Arc::new(store), String::new()))
        }
        Location::S3 { bucket, prefix } => {
            install_crypto_provider();
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(RetryConfig {
                    max_retries: 5,
                    retry_timeout: Duration::from_secs(60),
                    ..RetryConfig::default()
                });
            if let Some(endpoint) = &s3.endpoint {
                builder = builder.with_endpoint(endpoint);
                let http = endpoint.starts_with("http://");
                builder = builder.with_allow_http(s3.allow_http.unwrap_or(http));
            } else if let Some(allow) = s3.allow_http {
                builder = builder.with_allow_http(allow);
            }
            if let Some(region) = &s3.region {
                builder = builder.with_region(region);
            } else if std::env::var_os("AWS_REGION").is_none()
                && std::env::var_os("AWS_DEFAULT_REGION").is_none()
            {
                builder = builder.with_region("us-east-1");
            }
            if let Some(key) = &s3.access_key {
                builder = builder.with_access_key_id(key);
            }
            if let Some(secret) = &s3.secret_key {
                builder = builder.with_secret_access_key(secret);
            }
            // Path-style requests for S3-compatible servers; virtual-hosted style for AWS.
            builder = builder.with_virtual_hosted_style_request(
                !(s3.path_style_access || s3.endpoint.is_some()),
            );
            let store = builder.build().map_err(|e| StorageError::BadLocation {
                location: root.to_string(),
                reason: e.to_string(),
            })?;
            Ok((Arc::new(store), prefix.clone()))
        }
    }
}

/// rustls needs one process-wide crypto provider; Weir uses ring.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_from_paths_file_urls_and_s3_urls() {
        assert_eq!(
            Location::parse("/tmp/c").unwrap(),
            Location::Local("/tmp/c".into())
        );
        assert_eq!(
            Location::parse("file:///tmp/c").unwrap(),
            Location::Local("/tmp/c".into())
        );
        let s3 = Location::parse("s3://bucket/a/b/").unwrap();
        assert_eq!(
            s3,
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(s3.join("demo").to_string(), "s3://bucket/a/b/demo");
        assert!(Location::parse("s3:///x").is_err());
        assert!(Location::parse("gs://b/x")
            .unwrap_err()
            .to_string()
            .contains("gs://"));
        assert!(Location::parse("file://relative").is_err());
    }
}
