//! Channel state of unaligned checkpoints: the elements a subtask's input channels held
//! between the moment a checkpoint's barrier first reached the subtask (overtaking them) and
//! that barrier's place in each channel. The subtask's input gate captures them;
//! they are stored with the subtask's snapshot and, on restore, read again before anything new
//! on the same channel.
//!
//! Format: `WEIRCHAN`, a little-endian `u32` version, then postcard of one list of elements
//! per input channel, in the order the job's channels are made (the same at the same
//! parallelism). The checkpoint's handle carries its size and CRC-32C.

use std::collections::VecDeque;
use weir_core::{Data, Element};

const MAGIC: &[u8; 8] = b"WEIRCHAN";
const VERSION: u32 = 1;

/// Encodes and decodes the channel state of a gate over channels of `T`: plain functions,
/// made where `T` is known to be [`Data`] (the channel factories).
pub struct ChannelStateCodec<T> {
    encode: EncodeFn<T>,
    decode: DecodeFn<T>,
}

type EncodeFn<T> = fn(&[Queue<T>]) -> Result<Vec<u8>, String>;
type DecodeFn<T> = fn(&[u8]) -> Result<Channels<T>, String>;

/// One list of elements per input channel.
pub type Channels<T> = Vec<Vec<Element<T>>>;

/// The elements of one input channel, as the gate holds them.
pub type Queue<T> = VecDeque<Element<T>>;

impl<T> Clone for ChannelStateCodec<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ChannelStateCodec<T> {}

impl<T: Data> ChannelStateCodec<T> {
    pub fn new() -> ChannelStateCodec<T> {
        ChannelStateCodec {
            encode: encode::<T>,
            decode: decode::<T>,
        }
    }
}

impl<T: Data> Default for ChannelStateCodec<T> {
    fn default() -> Self {
        ChannelStateCodec::new()
    }
}

impl<T> ChannelStateCodec<T> {
    /// The bytes of `channels` (one queue per input channel; only records, watermarks and
    /// watermark statuses are kept).
    pub fn encode(&self, channels: &[VecDeque<Element<T>>]) -> Result<Vec<u8>, String> {
        (self.encode)(channels)
    }

    /// The queues `bytes` holds, one per input channel; an error says what is wrong.
    pub fn decode(&self, bytes: &[u8]) -> Result<Channels<T>, String> {
        (self.decode)(bytes)
    }

    /// The queues `bytes` holds for a subtask restored with `channels` input channels, refused
    /// if the checkpoint holds another number of them.
    pub fn restore(&self, bytes: &[u8], channels: usize) -> Result<Channels<T>, String> {
        let restored = self.decode(bytes)?;
        if restored.len() != channels {
            return Err(format!(
                "the checkpoint holds in-flight data of {} input channels and this subtask has {channels}: in-flight data of unaligned checkpoints restores only into the same job at the same parallelism (restore from a savepoint, which is always aligned, to change it)",
                restored.len()
            ));
        }
        Ok(restored)
    }
}

/// An element that is channel state: data and event time, not control.
fn is_state<T>(element: &Element<T>) -> bool {
    matches!(
        element,
        Element::Records(_) | Element::Watermark(_) | Element::WatermarkStatus(_)
    )
}

fn encode<T: Data>(channels: &[VecDeque<Element<T>>]) -> Result<Vec<u8>, String> {
    let kept: Vec<Vec<&Element<T>>> = channels
        .iter()
        .map(|queue| queue.iter().filter(|e| is_state(e)).collect())
        .collect();
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    postcard::to_extend(&kept, bytes).map_err(|e| format!("cannot encode channel state: {e}"))
}

fn decode<T: Data>(bytes: &[u8]) -> Result<Channels<T>, String> {
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not channel state (no WEIRCHAN header)")?;
    let (version, body) = body
        .split_first_chunk::<4>()
        .ok_or("channel state truncated in its header")?;
    let version = u32::from_le_bytes(*version);
    if version != VERSION {
        return Err(format!(
            "channel state of version {version}; this build reads version {VERSION}"
        ));
    }
    let channels: Channels<T> =
        postcard::from_bytes(body).map_err(|e| format!("damaged channel state: {e}"))?;
    if channels.iter().flatten().any(|e| !is_state(e)) {
        return Err("damaged channel state: it holds a control element".into());
    }
    Ok(channels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_state_round_trips_without_control_elements_and_damage_is_an_error() {
        let codec = ChannelStateCodec::<(String, u64)>::new();
        let channels = vec![
            VecDeque::from([
                Element::Records(vec![("a".to_string(), 1)]),
                Element::Watermark(5),
                Element::EndOfInput,
            ]),
            VecDeque::new(),
        ];
        let bytes = codec.encode(&channels).unwrap();
        let back = codec.decode(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert!(
            matches!(&back[0][..], [Element::Records(r), Element::Watermark(5)] if r[0].1 == 1)
        );
        assert!(back[1].is_empty());
        for cut in [0, 5, 11, bytes.len() - 1] {
            assert!(codec.decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = bytes.clone();
        other[8] = 9;
        assert!(codec.decode(&other).unwrap_err().contains("version 9"));
    }
}
