//! The data plane's wire format: the hello that opens a connection, and the header of every
//! frame (see the module above for the layout).

use std::io::Read;
use weir_runtime::remote::{ChannelKey, FRAME_HEADER};

const MAGIC: &[u8; 4] = b"WEIR";
const VERSION: u32 = 4;
/// A frame of records (or a barrier, a watermark, the end of input), producer to consumer.
pub(super) const DATA: u8 = 1;
/// Credits for a channel, consumer to producer.
pub(super) const CREDIT: u8 = 2;
/// A barrier announced ahead of the data (unaligned checkpoints), producer to consumer; it
/// spends no credit.
pub(super) const PRIORITY: u8 = 3;
/// How many elements of a channel the consumer holds back (captured as channel state, or
/// restored), consumer to producer.
pub(super) const HELD: u8 = 4;
/// A frame longer than this is garbage, not a batch.
pub(super) const MAX_FRAME: usize = 256 << 20;

pub(super) fn read_hello(stream: &mut impl Read) -> Result<(u64, String), String> {
    let mut fixed = [0u8; 18];
    stream
        .read_exact(&mut fixed)
        .map_err(|e| format!("reading the hello: {e}"))?;
    if &fixed[..4] != MAGIC {
        return Err("not a Weir data connection (bad magic)".into());
    }
    let version = u32::from_le_bytes(fixed[4..8].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!(
            "data protocol version {version}, this task manager speaks {VERSION}"
        ));
    }
    let generation = u64::from_le_bytes(fixed[8..16].try_into().expect("8 bytes"));
    let len = u16::from_le_bytes(fixed[16..18].try_into().expect("2 bytes")) as usize;
    let mut id = vec![0u8; len];
    stream
        .read_exact(&mut id)
        .map_err(|e| format!("reading the hello: {e}"))?;
    let id = String::from_utf8(id).map_err(|_| "task manager id is not UTF-8".to_string())?;
    Ok((generation, id))
}

pub(super) fn hello(generation: u64, me: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(18 + me.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&(me.len() as u16).to_le_bytes());
    out.extend_from_slice(me.as_bytes());
    out
}

pub(super) fn write_header(buf: &mut [u8], kind: u8, key: ChannelKey, len: u32) {
    buf[0] = kind;
    buf[1..5].copy_from_slice(&key.edge.to_le_bytes());
    buf[5..9].copy_from_slice(&key.producer.to_le_bytes());
    buf[9..13].copy_from_slice(&key.consumer.to_le_bytes());
    buf[13..17].copy_from_slice(&len.to_le_bytes());
}

pub(super) fn parse_header(buf: &[u8; FRAME_HEADER]) -> (u8, ChannelKey, u32) {
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    let key = ChannelKey {
        edge: word(1),
        producer: word(5),
        consumer: word(9),
    };
    (buf[0], key, word(13))
}
