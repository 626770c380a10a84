//! Where a request may put a savepoint.
//!
//! A savepoint directory named in a request (`target-directory`, `targetDirectory`) is written
//! by this process, so it is checked before anything is triggered: a local path (plain or
//! `file:`), without `..`, that lies — after following symbolic links of the part that exists —
//! under one of the configured roots (the default savepoint directory and any extra roots).
//! Anything else is refused with a 4xx that says why and which roots are allowed.

use std::path::{Component, Path, PathBuf};

use crate::error::ApiError;
use crate::ids::shorten;

/// The longest target path accepted.
const MAX_TARGET_LEN: usize = 4096;

/// The directory to write a requested savepoint to: `Ok(None)` means the configured default.
/// A relative target is taken relative to the server's working directory.
pub fn resolve_target(
    requested: Option<&str>,
    roots: &[PathBuf],
    default: Option<&Path>,
) -> Result<Option<PathBuf>, ApiError> {
    let requested = requested.map(str::trim).filter(|t| !t.is_empty());
    let Some(text) = requested else {
        return match default {
            Some(_) => Ok(None),
            None => Err(ApiError::bad_request(
                "no savepoint directory: name one in the request (target-directory) or start \
                 the job with -D execution.checkpointing.savepoint-dir=DIR",
            )),
        };
    };
    if text.len() > MAX_TARGET_LEN {
        return Err(ApiError::bad_request(format!(
            "savepoint target is longer than {MAX_TARGET_LEN} bytes"
        )));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(
            "savepoint target contains a NUL character",
        ));
    }
    let path = local_path(text)?;
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(ApiError::bad_request(format!(
            "savepoint target '{}' must not contain '..'",
            shorten(text)
        )));
    }
    let absolute = absolute_lexical(&path)?;
    if roots.is_empty() {
        return Err(ApiError::forbidden(
            "savepoint targets are not allowed: no savepoint directory is configured \
             (set execution.checkpointing.savepoint-dir or pass --savepoint-root DIR)",
        ));
    }
    let resolved = resolve_links(&absolute);
    for root in roots {
        let root = resolve_links(&absolute_lexical(root)?);
        if resolved.starts_with(&root) {
            return Ok(Some(absolute));
        }
    }
    let allowed: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Err(ApiError::forbidden(format!(
        "savepoint target '{}' is outside the allowed savepoint directories ({})",
        shorten(text),
        allowed.join(", ")
    )))
}

/// A plain path, or a `file:` URI's path. Other schemes are refused: savepoints are written
/// to local directories.
fn local_path(text: &str) -> Result<PathBuf, ApiError> {
    if let Some(rest) = text.strip_prefix("file://") {
        // file:///abs/path → /abs/path; file://host/… names another machine.
        if !rest.starts_with('/') {
            return Err(ApiError::bad_request(format!(
                "savepoint target '{}' names a remote host; use a local directory",
                shorten(text)
            )));
        }
        return Ok(PathBuf::from(rest));
    }
    if let Some(rest) = text.strip_prefix("file:") {
        return Ok(PathBuf::from(rest));
    }
    if let Some((scheme, _)) = text.split_once("://") {
        if !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Err(ApiError::bad_request(format!(
                "savepoint target '{}' uses the scheme '{scheme}'; savepoints are written to local directories",
                shorten(text)
            )));
        }
    }
    Ok(PathBuf::from(text))
}

/// `path` made absolute against the working directory, with `.` components dropped.
pub fn absolute_lexical(path: &Path) -> Result<PathBuf, ApiError> {
    let base = if path.is_absolute() {
        PathBuf::new()
    } else {
        std::env::current_dir()
            .map_err(|e| ApiError::internal(format!("cannot read the working directory: {e}")))?
    };
    let mut out = base;
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

/// `path` with the symbolic links of its longest existing ancestor resolved, so a link inside
/// a root cannot point the savepoint elsewhere.
fn resolve_links(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(dir: &Path) -> Vec<PathBuf> {
        vec![dir.join("savepoints")]
    }

    #[test]
    fn a_target_under_a_root_is_accepted_as_an_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(dir.path());
        let target = dir.path().join("savepoints/nightly");
        let got = resolve_target(Some(target.to_str().unwrap()), &roots, None).unwrap();
        assert_eq!(got, Some(target.clone()));
        let uri = format!("file://{}", target.display());
        assert_eq!(
            resolve_target(Some(&uri), &roots, None).unwrap(),
            Some(target)
        );
    }

    #[test]
    fn no_target_means_the_default_and_without_one_it_is_refused() {
        assert_eq!(
            resolve_target(None, &[], Some(Path::new("/sp"))).unwrap(),
            None
        );
        assert_eq!(
            resolve_target(Some("  "), &[], Some(Path::new("/sp"))).unwrap(),
            None
        );
        let e = resolve_target(None, &[], None).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(e.message.contains("savepoint-dir"), "{}", e.message);
    }

    #[test]
    fn parent_components_are_refused_even_when_they_stay_inside_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(dir.path());
        for bad in [
            format!("{}/savepoints/../../etc", dir.path().display()),
            format!("{}/savepoints/a/../b", dir.path().display()),
            "../outside".to_string(),
        ] {
            let e = resolve_target(Some(&bad), &roots, None).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
            assert!(e.message.contains(".."), "{}", e.message);
        }
    }

    #[test]
    fn targets_outside_every_root_are_forbidden() {
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(dir.path());
        let e = resolve_target(Some("/etc/weir"), &roots, None).unwrap_err();
        assert_eq!(e.status.as_u16(), 403);
        assert!(e.message.contains("outside"), "{}", e.message);
        // A sibling whose name merely starts with the root's name is outside too.
        let sibling = format!("{}/savepoints-evil", dir.path().display());
        assert_eq!(
            resolve_target(Some(&sibling), &roots, None)
                .unwrap_err()
                .status
                .as_u16(),
            403
        );
    }

    #[test]
    fn a_symbolic_link_out_of_a_root_is_followed_and_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("savepoints");
        std::fs::create_dir_all(&root).unwrap();
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let target = format!("{}/link/sp", root.display());
        let e = resolve_target(Some(&target), &[root], None).unwrap_err();
        assert_eq!(e.status.as_u16(), 403);
    }

    #[test]
    fn remote_schemes_nul_bytes_and_huge_paths_are_bad_requests() {
        let roots = vec![PathBuf::from("/tmp")];
        for bad in [
            "s3://bucket/sp".to_string(),
            "hdfs://nn/sp".to_string(),
            "file://otherhost/tmp/sp".to_string(),
            "/tmp/a\0b".to_string(),
            format!("/tmp/{}", "x".repeat(5000)),
        ] {
            let e = resolve_target(Some(&bad), &roots, None).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
        }
    }

    #[test]
    fn without_any_root_every_named_target_is_forbidden() {
        let e = resolve_target(Some("/tmp/sp"), &[], None).unwrap_err();
        assert_eq!(e.status.as_u16(), 403);
    }
}
