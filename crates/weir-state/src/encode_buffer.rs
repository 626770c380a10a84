//! The buffer frozen tables encode key groups into: one growing `Vec`, or chunks of a bounded size.

use std::sync::Mutex;

/// Where a [`FrozenTable`](crate::FrozenTable) appends encoded key groups.
///
/// A *chunked* buffer starts a new chunk, between two entries, once the current one holds its
/// chunk size: a key group of any size is encoded without reallocating (and copying) one ever
/// larger buffer. Bytes are addressed by their offset over all chunks, so a blob may span
/// chunks; written back to back they are one file.
///
/// Chunks come from a process-wide pool of spare ones when it has any: whoever wrote a
/// buffer's chunks out gives them back with [`EncodeBuffer::recycle`] (the checkpoint storage
/// does), so checkpoint after checkpoint encodes into memory that is already mapped. The
/// allocator would otherwise hand out fresh pages for them, and clearing those pages cost as
/// much as encoding into them.
///
/// ```
/// use weir_state::EncodeBuffer;
///
/// let mut out = EncodeBuffer::chunked(4);
/// for entry in [b"abc", b"def", b"ghi"] {
///     out.bytes().extend_from_slice(entry);
///     out.entry_end();
/// }
/// assert_eq!(out.len(), 9);
/// assert_eq!(out.into_chunks(), [b"abcdef".to_vec(), b"ghi".to_vec()]);
/// ```
#[derive(Debug)]
pub struct EncodeBuffer {
    /// Chunks already filled, in order.
    filled: Vec<Vec<u8>>,
    /// The number of bytes in `filled`.
    filled_len: u64,
    current: Vec<u8>,
    /// A new chunk starts at an entry's end once `current` holds this many bytes.
    chunk_bytes: usize,
}

impl EncodeBuffer {
    /// One buffer that is never split, starting with `bytes`.
    pub fn contiguous(bytes: Vec<u8>) -> EncodeBuffer {
        EncodeBuffer {
            filled: Vec::new(),
            filled_len: 0,
            current: bytes,
            chunk_bytes: usize::MAX,
        }
    }

    /// Chunks of about `chunk_bytes` each (an entry is never split, so a chunk may be longer
    /// by part of one entry).
    pub fn chunked(chunk_bytes: usize) -> EncodeBuffer {
        let chunk_bytes = chunk_bytes.max(1);
        EncodeBuffer {
            filled: Vec::new(),
            filled_len: 0,
            current: new_chunk(chunk_bytes),
            chunk_bytes,
        }
    }

    /// Gives chunks whose bytes were written out back for later buffers to reuse. The pool
    /// keeps at most 64 MiB of them; the rest are freed.
    pub fn recycle(chunks: impl IntoIterator<Item = Vec<u8>>) {
        SPARE_CHUNKS.give(chunks);
    }

    /// The number of bytes appended so far: the offset of the next one.
    pub fn len(&self) -> u64 {
        self.filled_len + self.current.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer to append the bytes of an entry to.
    #[inline]
    pub fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.current
    }

    /// Marks the end of an entry, where the bytes may be split: starts a new chunk if the
    /// current one is full.
    #[inline]
    pub fn entry_end(&mut self) {
        if self.current.len() >= self.chunk_bytes {
            self.start_chunk();
        }
    }

    /// Appends room for a count not known yet, to be set with [`set_count`](Self::set_count)
    /// once it is: a postcard varint of a fixed [`COUNT_WIDTH`] bytes, its high bytes zero with
    /// the continuation bit set. Postcard reads such a varint as the number it holds, so a
    /// reader cannot tell it from the shortest encoding.
    ///
    /// A table encodes the entries of a key group that changed in one pass over it this way,
    /// instead of first collecting them to count them.
    pub(crate) fn count_placeholder(&mut self) -> CountAt {
        let at = CountAt(self.len());
        self.current.extend_from_slice(&padded_varint(0));
        at
    }

    /// Sets the count whose room [`count_placeholder`](Self::count_placeholder) made.
    pub(crate) fn set_count(&mut self, at: CountAt, count: u64) -> Result<(), String> {
        if count > MAX_PADDED_COUNT {
            return Err(format!(
                "{count} entries do not fit a count of {COUNT_WIDTH} bytes"
            ));
        }
        let bytes = padded_varint(count);
        // Nothing splits the bytes of a count: it lies in one chunk.
        let (chunk, start) = if at.0 >= self.filled_len {
            (&mut self.current, self.filled_len)
        } else {
            let mut end = self.filled_len;
            let mut found = None;
            for chunk in self.filled.iter_mut().rev() {
                let start = end - chunk.len() as u64;
                if at.0 >= start {
                    found = Some((chunk, start));
                    break;
                }
                end = start;
            }
            found.ok_or("a count placeholder outside the buffer")?
        };
        let offset = (at.0 - start) as usize;
        chunk
            .get_mut(offset..offset + COUNT_WIDTH)
            .ok_or("a count placeholder outside the buffer")?
            .copy_from_slice(&bytes);
        Ok(())
    }

    #[cold]
    fn start_chunk(&mut self) {
        let next = new_chunk(self.chunk_bytes);
        let full = std::mem::replace(&mut self.current, next);
        self.filled_len += full.len() as u64;
        self.filled.push(full);
    }

    /// The chunks, to be written back to back (the last one may be empty).
    pub fn into_chunks(mut self) -> Vec<Vec<u8>> {
        self.filled.push(self.current);
        self.filled
    }

    /// All bytes in one buffer: without a copy if the buffer is contiguous.
    pub fn into_bytes(self) -> Vec<u8> {
        if self.filled.is_empty() {
            return self.current;
        }
        self.into_chunks().concat()
    }
}

/// Where [`EncodeBuffer::count_placeholder`] made room for a count: its offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CountAt(u64);

/// The bytes of a count set with [`EncodeBuffer::set_count`].
pub(crate) const COUNT_WIDTH: usize = 5;

/// The largest count of [`COUNT_WIDTH`] varint bytes (7 bits each).
const MAX_PADDED_COUNT: u64 = (1 << (7 * COUNT_WIDTH)) - 1;

/// `count` as a postcard varint of exactly [`COUNT_WIDTH`] bytes (`count` at most
/// [`MAX_PADDED_COUNT`]).
fn padded_varint(count: u64) -> [u8; COUNT_WIDTH] {
    let mut bytes = [0; COUNT_WIDTH];
    for (i, byte) in bytes.iter_mut().enumerate() {
        let more = if i + 1 < COUNT_WIDTH { 0x80 } else { 0 };
        *byte = ((count >> (7 * i)) & 0x7f) as u8 | more;
    }
    bytes
}

/// The capacity of a new chunk: room for the part of an entry that crosses the chunk size, so
/// that a chunk is not reallocated unless one entry is very large.
fn chunk_capacity(chunk_bytes: usize) -> usize {
    chunk_bytes.saturating_add(chunk_bytes / 4).min(64 << 20)
}

/// The most memory the pool of spare chunks holds.
const MAX_SPARE_BYTES: usize = 64 << 20;

/// Larger chunks (grown by a very large entry) are freed rather than kept.
const MAX_RECYCLED_CHUNK: usize = 4 << 20;

/// Spare chunks, empty, for buffers to fill again. Locked once per chunk (hundreds of KiB).
struct ChunkPool {
    spare: Mutex<Spare>,
}

/// The pool's chunks, and the sum of their capacities.
struct Spare {
    chunks: Vec<Vec<u8>>,
    bytes: usize,
}

static SPARE_CHUNKS: ChunkPool = ChunkPool::new();

impl ChunkPool {
    const fn new() -> ChunkPool {
        ChunkPool {
            spare: Mutex::new(Spare {
                chunks: Vec::new(),
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spare> {
        // The pool holds whole values whatever a panicking holder did: keep going.
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `chunks`, emptied, while the pool holds less than [`MAX_SPARE_BYTES`].
    fn give(&self, chunks: impl IntoIterator<Item = Vec<u8>>) {
        let mut spare = self.lock();
        for mut chunk in chunks {
            let capacity = chunk.capacity();
            if capacity == 0
                || capacity > MAX_RECYCLED_CHUNK
                || spare.bytes + capacity > MAX_SPARE_BYTES
            {
                continue;
            }
            chunk.clear();
            spare.bytes += capacity;
            spare.chunks.push(chunk);
        }
    }

    /// An empty chunk of at least `capacity`: a spare one if the pool has one, else new.
    fn take(&self, capacity: usize) -> Vec<u8> {
        let spare = {
            let mut spare = self.lock();
            let chunk = spare.chunks.pop();
            spare.bytes -= chunk.as_ref().map_or(0, Vec::capacity);
            chunk
        };
        match spare {
            Some(chunk) if chunk.capacity() >= capacity => chunk,
            _ => Vec::with_capacity(capacity),
        }
    }
}

/// An empty chunk for buffers of `chunk_bytes`.
fn new_chunk(chunk_bytes: usize) -> Vec<u8> {
    SPARE_CHUNKS.take(chunk_capacity(chunk_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contiguous_buffer_is_never_split() {
        let mut out = EncodeBuffer::contiguous(b"head".to_vec());
        for _ in 0..1_000 {
            out.bytes().extend_from_slice(&[7; 100]);
            out.entry_end();
        }
        assert_eq!(out.len(), 100_004);
        let bytes = out.into_bytes();
        assert_eq!(bytes.len(), 100_004);
        assert_eq!(&bytes[..4], b"head");
    }

    #[test]
    fn chunks_split_only_at_entry_ends_and_keep_every_byte_in_order() {
        let mut out = EncodeBuffer::chunked(1_000);
        let mut expected = Vec::new();
        for i in 0..10_000u32 {
            let entry: Vec<u8> = i.to_le_bytes().repeat((i % 7) as usize + 1);
            out.bytes().extend_from_slice(&entry);
            expected.extend_from_slice(&entry);
            assert_eq!(out.len(), expected.len() as u64);
            out.entry_end();
        }
        let chunks = out.into_chunks();
        assert!(chunks.len() > 100);
        for chunk in &chunks[..chunks.len() - 1] {
            assert!(
                chunk.len() >= 1_000 && chunk.len() < 1_000 + 28,
                "{}",
                chunk.len()
            );
        }
        assert_eq!(chunks.concat(), expected);
    }

    #[test]
    fn the_pool_hands_given_chunks_back_empty_and_holds_a_bounded_amount() {
        let pool = ChunkPool::new();
        let mut chunk = Vec::with_capacity(1_000);
        chunk.extend_from_slice(b"written");
        let address = chunk.as_ptr();
        pool.give([chunk]);
        let again = pool.take(1_000);
        assert_eq!(again.as_ptr(), address, "the same memory, reused");
        assert!(again.is_empty());
        assert!(
            pool.take(1_000).capacity() >= 1_000,
            "an empty pool makes new chunks"
        );

        // Too small for the request: a new chunk instead.
        pool.give([Vec::with_capacity(10)]);
        assert!(pool.take(1_000).capacity() >= 1_000);

        let chunk_bytes = 1 << 20;
        pool.give((0..200).map(|_| Vec::<u8>::with_capacity(chunk_bytes)));
        let held = pool.lock().bytes;
        assert!(
            held <= MAX_SPARE_BYTES && held + chunk_bytes > MAX_SPARE_BYTES,
            "{held}"
        );
        assert_eq!(
            held,
            pool.lock().chunks.iter().map(Vec::capacity).sum::<usize>()
        );
        pool.give([Vec::with_capacity(MAX_RECYCLED_CHUNK + 1)]);
        assert_eq!(pool.lock().bytes, held, "a full pool takes no more");
    }

    #[test]
    fn a_padded_count_reads_as_the_number_it_holds() {
        for count in [0, 1, 127, 128, 300, 1 << 20, MAX_PADDED_COUNT] {
            let bytes = padded_varint(count);
            let (read, rest): (u64, &[u8]) = postcard::take_from_bytes(&bytes).expect("reads");
            assert_eq!((read, rest.len()), (count, 0));
        }
    }

    #[test]
    fn a_count_is_set_in_whichever_chunk_holds_it() {
        let mut out = EncodeBuffer::chunked(8);
        let mut counts = Vec::new();
        let mut expected = Vec::new();
        for i in 0..20u64 {
            counts.push((out.count_placeholder(), i * 1_000));
            expected.extend_from_slice(&padded_varint(i * 1_000));
            out.bytes().extend_from_slice(&[i as u8; 3]);
            expected.extend_from_slice(&[i as u8; 3]);
            out.entry_end();
        }
        for (at, count) in counts {
            out.set_count(at, count).expect("sets");
        }
        let err = out
            .set_count(CountAt(0), MAX_PADDED_COUNT + 1)
            .expect_err("too large");
        assert!(err.contains("do not fit"), "{err}");
        assert!(
            out.set_count(CountAt(out.len()), 1).is_err(),
            "past the end"
        );
        let chunks = out.into_chunks();
        assert!(chunks.len() > 5);
        assert_eq!(chunks.concat(), expected);
    }

    #[test]
    fn an_entry_larger_than_a_chunk_stays_whole() {
        let mut out = EncodeBuffer::chunked(16);
        out.bytes().extend_from_slice(&[1; 100]);
        out.entry_end();
        out.bytes().extend_from_slice(&[2; 3]);
        let chunks = out.into_chunks();
        assert_eq!(chunks, [vec![1; 100], vec![2; 3]]);
    }
}
