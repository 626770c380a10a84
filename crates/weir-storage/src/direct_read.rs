//! Reading a whole local state file around the page cache (`O_DIRECT`), as a restore wants it.
//!
//! A restore reads each state file once, sequentially, and keeps what it decodes, not the
//! bytes; going through the page cache only adds a copy per byte (kernel to user) and evicts
//! what else is cached. Reading with `O_DIRECT` in large aligned blocks lets the device write
//! straight into the buffer, which is what `dd iflag=direct` measures as the disk's bandwidth.
//!
//! Small files, and file systems that refuse `O_DIRECT` (tmpfs, some network file systems),
//! are read the ordinary way: [`read`] returns `None` and the caller falls back.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Buffer address, file offset and length alignment `O_DIRECT` needs (the largest logical
/// block size of common devices).
const ALIGN: usize = 4096;
/// Bytes per read call.
const BLOCK: usize = 8 << 20;
/// Files smaller than this are read through the page cache: one read call either way.
const MIN_LEN: u64 = 1 << 20;

/// The whole file at `path`, read with `O_DIRECT`; `None` when it is small, cannot be opened
/// that way, or anything else makes the ordinary read the better choice (the caller then reads
/// it normally, and reports any error that read meets).
pub(crate) fn read(path: &Path) -> Option<io::Result<Vec<u8>>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()?;
    let len = file.metadata().ok()?.len();
    if len < MIN_LEN || usize::try_from(len).is_err() {
        return None;
    }
    match read_aligned(&file, len as usize) {
        // EINVAL: the file system or device does not take these alignments after all.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        other => Some(other),
    }
}

/// Reads `len` bytes (the file's length) into an aligned window of a fresh buffer, then moves
/// them to its front if the allocator did not align the buffer itself.
fn read_aligned(file: &File, len: usize) -> io::Result<Vec<u8>> {
    let window = len.next_multiple_of(ALIGN);
    let mut buf = vec![0u8; window + ALIGN];
    let start = buf.as_ptr().align_offset(ALIGN);
    if start > ALIGN {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut done = 0;
    while done < len {
        let end = (done + BLOCK).min(window);
        let n = file.read_at(&mut buf[start + done..start + end], done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    // A file that changed length while read is reported as read; the caller's size and
    // checksum checks decide whether it is intact.
    let read = done.min(len);
    if start > 0 {
        buf.copy_within(start..start + read, 0);
    }
    buf.truncate(read);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_file_whole_whatever_its_length() {
        let dir = tempfile::tempdir().unwrap();
        for len in [MIN_LEN as usize, MIN_LEN as usize + 1, 3 * BLOCK + 4095] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let path = dir.path().join(format!("f{len}"));
            std::fs::write(&path, &data).unwrap();
            match read(&path) {
                Some(read) => assert!(read.unwrap() == data, "{len} bytes read differ"),
                // The test's directory may be on a file system without O_DIRECT.
                None => eprintln!("O_DIRECT not available here; ordinary reads only"),
            }
        }
    }

    #[test]
    fn small_and_missing_files_are_left_to_the_ordinary_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"tiny").unwrap();
        assert!(read(&small).is_none());
        assert!(read(&dir.path().join("missing")).is_none());
    }
}
