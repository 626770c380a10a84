//! Key-group ranges: the unit in which keyed state is partitioned, owned and rescaled.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A contiguous range of key groups `[start, end)` owned by one subtask.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct KeyGroupRange {
    pub start: u32,
    pub end: u32,
}

impl KeyGroupRange {
    pub fn new(start: u32, end: u32) -> KeyGroupRange {
        debug_assert!(start <= end);
        KeyGroupRange { start, end }
    }

    /// The range of key groups that subtask `index` of `parallelism` owns when there are
    /// `max_parallelism` key groups. Ranges of all subtasks are disjoint and cover every group.
    pub fn for_subtask(max_parallelism: u32, parallelism: u32, index: u32) -> KeyGroupRange {
        let mp = max_parallelism as u64;
        let p = parallelism as u64;
        let i = index as u64;
        let start = (i * mp).div_ceil(p);
        let end = ((i + 1) * mp).div_ceil(p);
        KeyGroupRange::new(start as u32, end as u32)
    }

    pub fn contains(&self, key_group: u32) -> bool {
        self.start <= key_group && key_group < self.end
    }

    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn iter(&self) -> std::ops::Range<u32> {
        self.start..self.end
    }
}

/// The subtask index that owns `key_group` when `max_parallelism` groups are spread over
/// `parallelism` subtasks; the inverse of [`KeyGroupRange::for_subtask`].
pub fn subtask_for_key_group(max_parallelism: u32, parallelism: u32, key_group: u32) -> u32 {
    ((key_group as u64 * parallelism as u64) / max_parallelism as u64) as u32
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_key_group_exactly_once_and_agree_with_the_owner_function() {
        for mp in [1u32, 2, 7, 128, 1000] {
            for p in 1..=mp.min(40) {
                let mut next = 0;
                for i in 0..p {
                    let r = KeyGroupRange::for_subtask(mp, p, i);
                    assert_eq!(r.start, next);
                    for kg in r.iter() {
                        assert_eq!(subtask_for_key_group(mp, p, kg), i, "mp={mp} p={p}");
                    }
                    next = r.end;
                }
                assert_eq!(next, mp);
            }
        }
    }
}
