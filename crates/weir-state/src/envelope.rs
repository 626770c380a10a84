//! The envelope both kinds of keyed-state manifest share: a magic, a format version, an
//! xxh3_64 checksum of the body, and the body in postcard.
//!
//! ```text
//! offset 0   magic           8 bytes
//!        8   format version  u32 LE
//!       12   checksum        u64 LE   xxh3_64 of the body
//!       20   body            postcard
//! ```

use crate::error::StateError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

const BODY_OFFSET: usize = 20;

/// `body` in an envelope; `what` names it in errors.
pub(crate) fn seal<T: Serialize>(
    magic: &[u8; 8],
    version: u32,
    body: &T,
    what: &str,
) -> Result<Vec<u8>, StateError> {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    crate::entry_codec::append(body, &mut out)
        .map_err(|e| StateError::Encode(format!("{what}: {e}")))?;
    let checksum = xxh3_64(&out[BODY_OFFSET..]);
    out[12..BODY_OFFSET].copy_from_slice(&checksum.to_le_bytes());
    Ok(out)
}

/// The body of an envelope, checked: truncation, a wrong magic, another format version, a
/// checksum mismatch or an undecodable body is an error naming `what`.
pub(crate) fn open<T: DeserializeOwned>(
    bytes: &[u8],
    magic: &[u8; 8],
    version: u32,
    what: &str,
) -> Result<T, StateError> {
    let corrupt = |reason: String| StateError::Corrupt(format!("{what}: {reason}"));
    if bytes.len() < BODY_OFFSET {
        return Err(corrupt(format!(
            "{} bytes is too short; truncated?",
            bytes.len()
        )));
    }
    if !bytes.starts_with(magic) {
        return Err(corrupt("bad magic".into()));
    }
    let found = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if found != version {
        return Err(StateError::UnsupportedVersion {
            found,
            supported: version,
        });
    }
    let mut stored = [0; 8];
    stored.copy_from_slice(&bytes[12..BODY_OFFSET]);
    if u64::from_le_bytes(stored) != xxh3_64(&bytes[BODY_OFFSET..]) {
        return Err(corrupt("checksum mismatch; truncated or damaged".into()));
    }
    postcard::from_bytes(&bytes[BODY_OFFSET..]).map_err(|e| corrupt(e.to_string()))
}
