//! Non-keyed operator state (for example a source's read positions) and its redistribution when rescaling.
//!
//! Operator state is a few named lists of opaque byte elements per subtask. How a list is
//! redistributed on restore is its mode, as in Flink:
//! - *list* (split) state: the elements of all old subtasks are dealt round-robin over the new
//!   subtasks, each element to exactly one (a source's splits, for example);
//! - *union* state: every new subtask receives every element of every old subtask (for example
//!   offsets that each subtask filters for what it now owns).

use crate::entry_codec::take;
use crate::error::StateError;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// The first eight bytes of every encoded operator state snapshot.
pub const OPERATOR_SNAPSHOT_MAGIC: [u8; 8] = *b"WEIROPST";

/// The operator state format version this build writes and reads.
pub const OPERATOR_SNAPSHOT_FORMAT_VERSION: u32 = 1;

const CHECKSUM_OFFSET: usize = 12;
const BODY_OFFSET: usize = 20;

/// The operator state of one subtask: named lists of opaque elements, by redistribution mode.
///
/// Encoded as magic, format version (u32 LE), `xxh3_64` of the body (u64 LE) and the body:
/// the postcard encoding of `(list, union)`.
///
/// ```
/// use weir_state::OperatorStateSnapshot;
///
/// let snapshot = OperatorStateSnapshot {
///     list: vec![("splits".into(), vec![b"file-1:0".to_vec(), b"file-2:512".to_vec()])],
///     union: vec![],
/// };
/// let bytes = snapshot.encode();
/// let decoded = OperatorStateSnapshot::decode(&bytes).unwrap();
/// assert_eq!(decoded.list_state("splits").unwrap().len(), 2);
/// assert!(OperatorStateSnapshot::decode(&bytes[..bytes.len() - 1]).is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateSnapshot {
    /// Split state: on restore, each element goes to exactly one subtask.
    pub list: Vec<(String, Vec<Vec<u8>>)>,
    /// Union state: on restore, every subtask receives all elements of all old subtasks.
    pub union: Vec<(String, Vec<Vec<u8>>)>,
}

impl OperatorStateSnapshot {
    /// Whether no state of either mode has any element.
    pub fn is_empty(&self) -> bool {
        self.list
            .iter()
            .chain(&self.union)
            .all(|(_, e)| e.is_empty())
    }

    /// The elements of list state `name`, if present.
    pub fn list_state(&self, name: &str) -> Option<&[Vec<u8>]> {
        find(&self.list, name)
    }

    /// The elements of union state `name`, if present.
    pub fn union_state(&self, name: &str) -> Option<&[Vec<u8>]> {
        find(&self.union, name)
    }

    /// The self-describing encoding (see the type's documentation).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BODY_OFFSET + 64);
        out.extend_from_slice(&OPERATOR_SNAPSHOT_MAGIC);
        out.extend_from_slice(&OPERATOR_SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        // Written by hand in postcard's format (varint lengths, raw bytes) so that encoding
        // cannot fail; `decode` reads it back with postcard.
        for states in [&self.list, &self.union] {
            write_varint(&mut out, states.len());
            for (name, elements) in states {
                write_bytes(&mut out, name.as_bytes());
                write_varint(&mut out, elements.len());
                for element in elements {
                    write_bytes(&mut out, element);
                }
            }
        }
        let checksum = xxh3_64(&out[BODY_OFFSET..]);
        out[CHECKSUM_OFFSET..BODY_OFFSET].copy_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Decodes and validates bytes made by [`OperatorStateSnapshot::encode`]; corrupt or
    /// truncated input is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        let corrupt = |reason: String| StateError::Corrupt(format!("operator state: {reason}"));
        if bytes.len() < BODY_OFFSET {
            return Err(corrupt(format!(
                "{} bytes is too short; truncated?",
                bytes.len()
            )));
        }
        if bytes[..8] != OPERATOR_SNAPSHOT_MAGIC {
            return Err(corrupt(
                "not a Weir operator state snapshot (bad magic)".into(),
            ));
        }
        let mut version = [0; 4];
        version.copy_from_slice(&bytes[8..CHECKSUM_OFFSET]);
        let version = u32::from_le_bytes(version);
        if version != OPERATOR_SNAPSHOT_FORMAT_VERSION {
            return Err(StateError::UnsupportedVersion {
                found: version,
                supported: OPERATOR_SNAPSHOT_FORMAT_VERSION,
            });
        }
        let mut stored = [0; 8];
        stored.copy_from_slice(&bytes[CHECKSUM_OFFSET..BODY_OFFSET]);
        if u64::from_le_bytes(stored) != xxh3_64(&bytes[BODY_OFFSET..]) {
            return Err(corrupt("checksum mismatch; truncated or damaged".into()));
        }
        type States = Vec<(String, Vec<Vec<u8>>)>;
        let ((list, union), rest): ((States, States), _) =
            take(&bytes[BODY_OFFSET..]).map_err(|e| corrupt(e.to_string()))?;
        if !rest.is_empty() {
            return Err(corrupt(format!("{} trailing bytes", rest.len())));
        }
        Ok(OperatorStateSnapshot { list, union })
    }
}

/// The operator state of each of `new_parallelism` subtasks, from the snapshots of all old
/// subtasks of one checkpoint.
///
/// - List state: each element goes to exactly one new subtask. If the parallelism is unchanged,
///   every element stays with its subtask (so a source keeps its splits across a restart);
///   otherwise the elements of each state name, taken in old-subtask order, are dealt
///   round-robin starting at subtask 0.
/// - Union state: every new subtask receives every element of every old subtask, in old-subtask
///   order.
///
/// Every new subtask gets every state name seen in any old subtask, possibly with no elements.
///
/// ```
/// use weir_state::{redistribute_operator_state, OperatorStateSnapshot};
///
/// let old = vec![
///     OperatorStateSnapshot { list: vec![("splits".into(), vec![vec![1], vec![2], vec![3]])], union: vec![] },
/// ];
/// let new = redistribute_operator_state(old, 2);
/// assert_eq!(new[0].list_state("splits").unwrap(), [vec![1], vec![3]]);
/// assert_eq!(new[1].list_state("splits").unwrap(), [vec![2]]);
/// ```
pub fn redistribute_operator_state(
    old: Vec<OperatorStateSnapshot>,
    new_parallelism: u32,
) -> Vec<OperatorStateSnapshot> {
    let parallelism = new_parallelism as usize;
    let keep_in_place = old.len() == parallelism;
    let mut new = vec![OperatorStateSnapshot::default(); parallelism];
    if parallelism == 0 {
        return new;
    }

    let mut list_names: Vec<String> = Vec::new();
    let mut union_names: Vec<String> = Vec::new();
    for snapshot in &old {
        add_names(&mut list_names, &snapshot.list);
        add_names(&mut union_names, &snapshot.union);
    }
    for subtask in &mut new {
        subtask.list = list_names.iter().map(|n| (n.clone(), Vec::new())).collect();
        subtask.union = union_names
            .iter()
            .map(|n| (n.clone(), Vec::new()))
            .collect();
    }

    let mut dealt = vec![0usize; list_names.len()];
    let mut union_all: Vec<Vec<Vec<u8>>> = vec![Vec::new(); union_names.len()];
    for (old_index, snapshot) in old.into_iter().enumerate() {
        for (name, elements) in snapshot.list {
            let slot = position(&list_names, &name);
            for element in elements {
                let target = if keep_in_place {
                    old_index
                } else {
                    dealt[slot] % parallelism
                };
                dealt[slot] += 1;
                new[target].list[slot].1.push(element);
            }
        }
        for (name, elements) in snapshot.union {
            union_all[position(&union_names, &name)].extend(elements);
        }
    }
    for subtask in &mut new {
        for (slot, elements) in union_all.iter().enumerate() {
            subtask.union[slot].1.clone_from(elements);
        }
    }
    new
}

fn add_names(names: &mut Vec<String>, states: &[(String, Vec<Vec<u8>>)]) {
    for (name, _) in states {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
}

fn position(names: &[String], name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or_default()
}

fn find<'a>(states: &'a [(String, Vec<Vec<u8>>)], name: &str) -> Option<&'a [Vec<u8>]> {
    states
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, e)| e.as_slice())
}

fn write_varint(out: &mut Vec<u8>, mut value: usize) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_varint(out, bytes.len());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn snapshot(list: &[(&str, &[&[u8]])], union: &[(&str, &[&[u8]])]) -> OperatorStateSnapshot {
        let convert = |states: &[(&str, &[&[u8]])]| {
            states
                .iter()
                .map(|(n, e)| (n.to_string(), e.iter().map(|b| b.to_vec()).collect()))
                .collect()
        };
        OperatorStateSnapshot {
            list: convert(list),
            union: convert(union),
        }
    }

    #[test]
    fn encoding_round_trips_and_matches_postcard() {
        let s = snapshot(
            &[("splits", &[b"a", &[0xff; 200]]), ("empty", &[])],
            &[("offsets", &[b"x"])],
        );
        let bytes = s.encode();
        assert_eq!(OperatorStateSnapshot::decode(&bytes).unwrap(), s);
        let postcard = postcard::to_stdvec(&(&s.list, &s.union)).unwrap();
        assert_eq!(&bytes[BODY_OFFSET..], &postcard[..]);
    }

    #[test]
    fn a_newer_format_version_is_reported_as_such() {
        let mut bytes = OperatorStateSnapshot::default().encode();
        bytes[8] = 9;
        let err = OperatorStateSnapshot::decode(&bytes).unwrap_err();
        assert!(
            matches!(err, StateError::UnsupportedVersion { found: 9, .. }),
            "{err}"
        );
    }

    #[test]
    fn unchanged_parallelism_keeps_list_elements_with_their_subtask() {
        let old = vec![
            snapshot(&[("s", &[b"a", b"b"])], &[]),
            snapshot(&[("s", &[b"c"])], &[]),
        ];
        let new = redistribute_operator_state(old.clone(), 2);
        assert_eq!(new, old);
    }

    #[test]
    fn zero_new_parallelism_yields_no_subtasks() {
        let old = vec![snapshot(&[("s", &[b"a"])], &[])];
        assert!(redistribute_operator_state(old, 0).is_empty());
    }

    fn arb_snapshots() -> impl Strategy<Value = Vec<OperatorStateSnapshot>> {
        let states = || {
            prop::collection::vec(
                (
                    0u8..3,
                    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..4), 0..6),
                ),
                0..3,
            )
        };
        prop::collection::vec((states(), states()), 1..6).prop_map(|subtasks| {
            subtasks
                .into_iter()
                .enumerate()
                .map(|(i, (list, union))| {
                    // Tag elements with (subtask, position) so every element is distinct.
                    let tag = |states: Vec<(u8, Vec<Vec<u8>>)>| {
                        let mut out: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
                        for (j, (name, elements)) in states.into_iter().enumerate() {
                            let name = format!("state-{name}");
                            if out.iter().any(|(n, _)| *n == name) {
                                continue;
                            }
                            let elements = elements
                                .into_iter()
                                .enumerate()
                                .map(|(k, mut e)| {
                                    e.extend([i as u8, j as u8, k as u8]);
                                    e
                                })
                                .collect();
                            out.push((name, elements));
                        }
                        out
                    };
                    OperatorStateSnapshot {
                        list: tag(list),
                        union: tag(union),
                    }
                })
                .collect()
        })
    }

    fn sorted_elements(
        states: impl IntoIterator<Item = (String, Vec<Vec<u8>>)>,
    ) -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<(String, Vec<u8>)> = states
            .into_iter()
            .flat_map(|(n, e)| e.into_iter().map(move |e| (n.clone(), e)))
            .collect();
        all.sort();
        all
    }

    proptest! {
        #[test]
        fn redistribution_keeps_every_list_element_once_and_gives_union_state_to_all(
            old in arb_snapshots(),
            new_parallelism in 1u32..8,
        ) {
            let expected_list = sorted_elements(old.iter().flat_map(|s| s.list.clone()));
            let expected_union = sorted_elements(old.iter().flat_map(|s| s.union.clone()));
            let new = redistribute_operator_state(old, new_parallelism);
            prop_assert_eq!(new.len(), new_parallelism as usize);

            let actual_list = sorted_elements(new.iter().flat_map(|s| s.list.clone()));
            prop_assert_eq!(&actual_list, &expected_list);
            for subtask in &new {
                prop_assert_eq!(&sorted_elements(subtask.union.clone()), &expected_union);
            }
        }

        #[test]
        fn encoded_operator_state_round_trips(old in arb_snapshots()) {
            for s in old {
                prop_assert_eq!(OperatorStateSnapshot::decode(&s.encode()).unwrap(), s);
            }
        }

        #[test]
        fn truncated_or_bit_flipped_operator_state_is_an_error(
            old in arb_snapshots(),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let bytes = old[0].encode();
            let cut = cut.index(bytes.len());
            prop_assert!(OperatorStateSnapshot::decode(&bytes[..cut]).is_err());
            let mut flipped = bytes.clone();
            flipped[flip.index(bytes.len())] ^= 1 << bit;
            prop_assert!(OperatorStateSnapshot::decode(&flipped).is_err());
        }
    }
}
