//! Stable key hashing and key-group assignment: the functions that decide where every key's state lands.
//!
//! A key's state lives in exactly one *key group* out of `max_parallelism`, and a subtask owns a
//! contiguous [`KeyGroupRange`](weir_core::KeyGroupRange) of them. The key group is a pure function of the key's
//! [`StableHash`] and `max_parallelism`, so the same key lands in the same group in every process,
//! on every platform and in every version of Weir. That is what lets a checkpoint written by one
//! run be restored by another, at the same or a different parallelism.
//!
//! Invariant: [`StableHash`] values and [`key_group_for_hash`] never change. Changing either
//! silently moves keys between key groups and breaks the restore of every existing checkpoint and
//! savepoint. The tests below pin concrete values so that such a change fails loudly; restore
//! also re-checks every key against its key group and refuses a snapshot whose keys moved.

use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// The number of key groups when a job does not configure `pipeline.max-parallelism`.
///
/// It is the upper bound on a keyed operator's parallelism and the unit of rescaling; it can
/// never change for a job without discarding its keyed state.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// A hash of a key's *value* that is identical across processes, platforms and Weir versions.
///
/// Unlike [`std::hash::Hash`] with a random seed, this hash is persisted implicitly: it decides
/// which key group (and so which subtask and which part of a snapshot) holds a key's state.
///
/// The built-in implementations are:
/// - unsigned integers up to 64 bits, `bool` and `char`: murmur3's `fmix64` of the value widened
///   to `u64`; signed integers up to 64 bits are sign-extended to `i64` first, so `-1i8` and
///   `-1i64` hash alike;
/// - `u128` / `i128`: `xxh3_64` of the 16 little-endian bytes;
/// - `str`, `String`, `[u8]`, `Vec<u8>`, `[u8; N]`: `xxh3_64` of the bytes;
/// - tuples of 2 and 3: `xxh3_64` of the components' hashes as little-endian `u64`s, in order;
/// - `Option<T>`: `None` is a fixed constant, `Some(v)` hashes like `v`;
/// - `()`: a fixed constant; references, `Box` and `Arc`: like the value they point to.
///
/// A user key type implements it by combining the hashes of its fields, for example with
/// [`combine_stable_hashes`]:
///
/// ```
/// use weir_state::{combine_stable_hashes, StableHash};
///
/// struct SensorId { site: String, sensor: u32 }
///
/// impl StableHash for SensorId {
///     fn stable_hash(&self) -> u64 {
///         combine_stable_hashes(&[self.site.stable_hash(), self.sensor.stable_hash()])
///     }
/// }
/// let a = SensorId { site: "north".into(), sensor: 7 };
/// assert_eq!(a.stable_hash(), ("north", 7u32).stable_hash());
/// ```
pub trait StableHash {
    /// The stable hash of this value; it must depend only on the value, never on addresses,
    /// random seeds or the platform.
    fn stable_hash(&self) -> u64;
}

/// The key group `[0, max_parallelism)` of a key with stable hash `hash`.
///
/// It maps the hash onto the key groups by multiply-and-shift on its full 64 bits (Lemire's
/// "fastrange"), which is uniform for a well-mixed hash and needs no division. `max_parallelism`
/// must be at least 1 (a zero yields key group 0).
///
/// Invariant: this function decides where state lands; it must never change.
///
/// ```
/// use weir_state::key_group_for_hash;
///
/// assert_eq!(key_group_for_hash(0, 128), 0);
/// assert_eq!(key_group_for_hash(u64::MAX, 128), 127);
/// assert_eq!(key_group_for_hash(1 << 63, 128), 64);
/// ```
#[inline]
pub fn key_group_for_hash(hash: u64, max_parallelism: u32) -> u32 {
    debug_assert!(max_parallelism > 0, "max_parallelism must be at least 1");
    ((hash as u128 * max_parallelism as u128) >> 64) as u32
}

/// The key group of `key` out of `max_parallelism`: `key_group_for_hash(key.stable_hash(), ..)`.
///
/// ```
/// use weir_state::{key_group_of, DEFAULT_MAX_PARALLELISM};
///
/// let group = key_group_of("user-42", DEFAULT_MAX_PARALLELISM);
/// assert!(group < DEFAULT_MAX_PARALLELISM);
/// assert_eq!(group, key_group_of(&String::from("user-42"), DEFAULT_MAX_PARALLELISM));
/// ```
#[inline]
pub fn key_group_of<K: StableHash + ?Sized>(key: &K, max_parallelism: u32) -> u32 {
    key_group_for_hash(key.stable_hash(), max_parallelism)
}

/// Combines component hashes, in order, into one: `xxh3_64` of their little-endian bytes.
///
/// This is how tuples hash; use it for composite key types so they stay stable too.
pub fn combine_stable_hashes(hashes: &[u64]) -> u64 {
    match hashes {
        [a, b] => xxh3_64(&le_bytes::<16>(&[*a, *b])),
        [a, b, c] => xxh3_64(&le_bytes::<24>(&[*a, *b, *c])),
        _ => {
            let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
            xxh3_64(&bytes)
        }
    }
}

fn le_bytes<const N: usize>(hashes: &[u64]) -> [u8; N] {
    let mut out = [0u8; N];
    for (chunk, h) in out.chunks_exact_mut(8).zip(hashes) {
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    out
}

/// murmur3's 64-bit finaliser: a bijection with full avalanche.
#[inline]
const fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The hash of `None` and of `()`: an arbitrary fixed odd constant (2^64 / golden ratio).
const NONE_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

macro_rules! unsigned_stable_hash {
    ($($t:ty),*) => {$(
        impl StableHash for $t {
            #[inline]
            fn stable_hash(&self) -> u64 {
                fmix64(*self as u64)
            }
        }
    )*};
}
unsigned_stable_hash!(u8, u16, u32, u64, usize, bool, char);

macro_rules! signed_stable_hash {
    ($($t:ty),*) => {$(
        impl StableHash for $t {
            #[inline]
            fn stable_hash(&self) -> u64 {
                fmix64(*self as i64 as u64)
            }
        }
    )*};
}
signed_stable_hash!(i8, i16, i32, i64, isize);

impl StableHash for u128 {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(&self.to_le_bytes())
    }
}

impl StableHash for i128 {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(&self.to_le_bytes())
    }
}

impl StableHash for str {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(self.as_bytes())
    }
}

impl StableHash for String {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(self.as_bytes())
    }
}

impl StableHash for [u8] {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(self)
    }
}

// `Vec<u8>` rather than `Vec<T>`: a generic `Vec<T: StableHash>` would hash bytes one at a time
// and conflict with the byte-slice fast path. Wrap other vectors in a key type of your own.
impl StableHash for Vec<u8> {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(self)
    }
}

impl<const N: usize> StableHash for [u8; N] {
    #[inline]
    fn stable_hash(&self) -> u64 {
        xxh3_64(self)
    }
}

impl StableHash for () {
    #[inline]
    fn stable_hash(&self) -> u64 {
        NONE_HASH
    }
}

impl<T: StableHash + ?Sized> StableHash for &T {
    #[inline]
    fn stable_hash(&self) -> u64 {
        (**self).stable_hash()
    }
}

impl<T: StableHash + ?Sized> StableHash for Box<T> {
    #[inline]
    fn stable_hash(&self) -> u64 {
        (**self).stable_hash()
    }
}

impl<T: StableHash + ?Sized> StableHash for Arc<T> {
    #[inline]
    fn stable_hash(&self) -> u64 {
        (**self).stable_hash()
    }
}

impl<T: StableHash> StableHash for Option<T> {
    #[inline]
    fn stable_hash(&self) -> u64 {
        match self {
            None => NONE_HASH,
            Some(v) => v.stable_hash(),
        }
    }
}

impl<A: StableHash, B: StableHash> StableHash for (A, B) {
    #[inline]
    fn stable_hash(&self) -> u64 {
        combine_stable_hashes(&[self.0.stable_hash(), self.1.stable_hash()])
    }
}

impl<A: StableHash, B: StableHash, C: StableHash> StableHash for (A, B, C) {
    #[inline]
    fn stable_hash(&self) -> u64 {
        combine_stable_hashes(&[
            self.0.stable_hash(),
            self.1.stable_hash(),
            self.2.stable_hash(),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use weir_core::key_group::{subtask_for_key_group, KeyGroupRange};

    #[test]
    fn xxh3_is_the_reference_xxh3_64_with_seed_zero() {
        // Published XXH3_64bits("") value: guards against a swapped hash function or seed.
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
    }

    #[test]
    fn stable_hashes_of_built_in_types_never_change() {
        assert_eq!(0u64.stable_hash(), 0);
        assert_eq!(1u64.stable_hash(), 0xb456_bcfc_34c2_cb2c);
        assert_eq!(1u8.stable_hash(), 1u64.stable_hash());
        assert_eq!(true.stable_hash(), 1u64.stable_hash());
        assert_eq!(42u32.stable_hash(), 0x8108_7960_8e42_59cc);
        assert_eq!((-1i32).stable_hash(), 0x64b5_720b_4b82_5f21);
        assert_eq!((-1i64).stable_hash(), (-1i8).stable_hash());
        assert_eq!(u64::MAX.stable_hash(), 0x64b5_720b_4b82_5f21);
        assert_eq!(1u128.stable_hash(), 0x26f2_a114_8cf5_2011);
        assert_eq!('w'.stable_hash(), 0x558a_f8a5_8ebc_6cbe);
        assert_eq!("".stable_hash(), 0x2d06_8005_38d3_94c2);
        assert_eq!("weir".stable_hash(), 0x0983_1dc7_4181_7118);
        assert_eq!(String::from("weir").stable_hash(), "weir".stable_hash());
        assert_eq!(b"weir"[..].stable_hash(), "weir".stable_hash());
        assert_eq!(b"weir".to_vec().stable_hash(), "weir".stable_hash());
        assert_eq!((1u64, "a").stable_hash(), 0xa257_d796_74b6_94b1);
        assert_eq!((1u8, 2u8, 3u8).stable_hash(), 0xcaa4_6d4a_2b63_c4aa);
        assert_eq!(None::<u64>.stable_hash(), 0x9e37_79b9_7f4a_7c15);
        assert_eq!(Some(42u32).stable_hash(), 42u32.stable_hash());
        assert_eq!(Arc::new(7u64).stable_hash(), 7u64.stable_hash());
    }

    #[test]
    fn key_groups_of_sample_keys_never_change() {
        let ints: Vec<u32> = (0u64..16).map(|k| key_group_of(&k, 128)).collect();
        assert_eq!(
            ints,
            [0, 90, 29, 5, 35, 107, 116, 58, 35, 72, 50, 119, 68, 115, 93, 108]
        );
        let strings: Vec<u32> = ["a", "b", "weir", "user-42"]
            .iter()
            .map(|k| key_group_of(*k, 128))
            .collect();
        assert_eq!(strings, [115, 43, 4, 40]);
    }

    #[test]
    fn tuple_hashes_depend_on_component_order() {
        assert_ne!((1u64, 2u64).stable_hash(), (2u64, 1u64).stable_hash());
    }

    #[test]
    fn sequential_integer_keys_spread_evenly_over_key_groups() {
        let mut counts = [0u32; 128];
        for k in 0u64..128_000 {
            counts[key_group_of(&k, 128) as usize] += 1;
        }
        // 1000 expected per group; a fair hash stays well within +-15% (about 5 sigma).
        assert!(
            counts.iter().all(|&c| (850..=1150).contains(&c)),
            "{counts:?}"
        );
    }

    proptest! {
        #[test]
        fn every_key_group_is_owned_by_exactly_one_subtask(
            max_parallelism in 1u32..=512,
            parallelism_seed in any::<u32>(),
        ) {
            let parallelism = parallelism_seed % max_parallelism + 1;
            let mut owners = vec![0u32; max_parallelism as usize];
            for index in 0..parallelism {
                let range = KeyGroupRange::for_subtask(max_parallelism, parallelism, index);
                for group in range.iter() {
                    owners[group as usize] += 1;
                    prop_assert_eq!(
                        subtask_for_key_group(max_parallelism, parallelism, group),
                        index
                    );
                }
            }
            prop_assert!(owners.iter().all(|&n| n == 1), "{:?}", owners);
        }

        #[test]
        fn key_groups_are_always_below_max_parallelism(hash in any::<u64>(), mp in 1u32..=u32::MAX) {
            prop_assert!(key_group_for_hash(hash, mp) < mp);
        }
    }
}
