//! A data connection's two halves, plain TCP or TLS: one thread reads, and writers take turns
//! on the other half, as with a `TcpStream` and its `try_clone`.
//!
//! With TLS, both halves share the connection's state behind a lock, held only to decrypt
//! bytes already read or to encrypt a frame, never while waiting on the socket: a reader
//! blocked on the network does not hold up a writer, nor a writer blocked by a full socket
//! the reader (which must go on taking the peer's credits or frames, or both ends could wait
//! for each other). Frames are encrypted whole (in records of up to 16 KiB), so the cost per
//! frame is a few lock round trips and copies, not one per record of the job.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

/// The reading half.
pub(crate) struct DataReader {
    socket: TcpStream,
    tls: Option<TlsReader>,
}

struct TlsReader {
    conn: Arc<Mutex<rustls::Connection>>,
    /// Ciphertext read from the socket and not yet handed to the connection.
    raw: Box<[u8]>,
    start: usize,
    end: usize,
}

/// The writing half.
pub(crate) struct DataWriter {
    socket: TcpStream,
    tls: Option<TlsWriter>,
}

struct TlsWriter {
    conn: Arc<Mutex<rustls::Connection>>,
    /// Ciphertext of the frame being written (kept to spare an allocation per frame).
    out: Vec<u8>,
}

/// How much ciphertext the reader takes from the socket at a time.
const READ_CHUNK: usize = 64 << 10;
/// How much plaintext the writer encrypts per lock (larger frames are written in parts).
const WRITE_CHUNK: usize = 256 << 10;

fn poisoned() -> io::Error {
    io::Error::other("the TLS connection's lock is poisoned")
}

/// Splits a connection whose TLS handshake (if any) is done into its two halves.
pub(crate) fn split(
    socket: TcpStream,
    tls: Option<rustls::Connection>,
) -> io::Result<(DataReader, DataWriter)> {
    let writer_socket = socket.try_clone()?;
    let (tls_reader, tls_writer) = match tls {
        None => (None, None),
        Some(conn) => {
            let conn = Arc::new(Mutex::new(conn));
            (
                Some(TlsReader {
                    conn: conn.clone(),
                    raw: vec![0u8; READ_CHUNK].into_boxed_slice(),
                    start: 0,
                    end: 0,
                }),
                Some(TlsWriter {
                    conn,
                    out: Vec::new(),
                }),
            )
        }
    };
    Ok((
        DataReader {
            socket,
            tls: tls_reader,
        },
        DataWriter {
            socket: writer_socket,
            tls: tls_writer,
        },
    ))
}

impl DataReader {
    /// Closes both directions of the connection (the writer's too).
    pub(crate) fn shutdown(&self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(timeout)
    }
}

impl DataWriter {
    /// Closes both directions of the connection (the reader's too).
    pub(crate) fn shutdown(&self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

impl Read for DataReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &mut self.tls else {
            return self.socket.read(buf);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut conn = tls.conn.lock().map_err(|_| poisoned())?;
                let mut filled = 0;
                loop {
                    // What is decrypted already.
                    match conn.reader().read(&mut buf[filled..]) {
                        Ok(0) => return Ok(filled), // the peer closed the session
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        // Returned again by the next call, after what was read.
                        Err(_) if filled > 0 => return Ok(filled),
                        Err(e) => return Err(e),
                    }
                    if filled == buf.len() || tls.start == tls.end {
                        break;
                    }
                    // Decrypt more of what was read from the socket.
                    let n = conn.read_tls(&mut &tls.raw[tls.start..tls.end])?;
                    tls.start += n;
                    conn.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                if filled > 0 {
                    return Ok(filled);
                }
            }
            // Nothing to decrypt: wait for the peer, without the lock.
            let n = self.socket.read(&mut tls.raw)?;
            tls.start = 0;
            tls.end = n;
            if n == 0 {
                let mut conn = tls.conn.lock().map_err(|_| poisoned())?;
                // Tells the connection about the end of the stream: reading then says whether
                // the peer closed the session or the connection was cut.
                let _ = conn.read_tls(&mut io::empty())?;
                conn.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                return match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(io::ErrorKind::UnexpectedEof.into())
                    }
                    other => other,
                };
            }
        }
    }
}

impl Write for DataWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let Some(tls) = &mut self.tls else {
            return self.socket.write_all(buf);
        };
        for part in buf.chunks(WRITE_CHUNK) {
            {
                let mut conn = tls.conn.lock().map_err(|_| poisoned())?;
                conn.writer().write_all(part)?;
                // Also whatever the reader's side queued (an alert, a key update).
                while conn.wants_write() {
                    conn.write_tls(&mut tls.out)?;
                }
            }
            let written = self.socket.write_all(&tls.out);
            tls.out.clear();
            written?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Both halves as one stream, for the handshakes that read and write in turn.
pub(crate) struct Duplex<'a>(pub &'a mut DataReader, pub &'a mut DataWriter);

impl Read for Duplex<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.1.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.1.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
