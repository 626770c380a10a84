//! Watermark alignment: sources of one alignment group pause while their watermark is more than
//! a set drift ahead of the group's slowest member (Flink's `withWatermarkAlignment`).
//!
//! Parallel sources read at their own speed. Downstream, event time is the minimum over the
//! inputs, so everything a fast source emits ahead of a slow one waits in window and join state
//! until the slow one catches up — state that grows for as long as the difference in speed
//! lasts. With alignment a source that got `max_drift` ahead of the group stops polling (it
//! still takes barriers and control messages) until the others catch up, which bounds that
//! state by the drift.
//!
//! Each member publishes its current watermark in an atomic after every batch; the group's
//! minimum is recomputed by each member at most every [`ALIGNMENT_UPDATE_INTERVAL`], never
//! per record. A member with no watermark yet, an idle one and an exhausted one do not hold
//! the group back. Groups are per attempt of a job: a restart starts them afresh.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a member recomputes its group's minimum watermark.
pub const ALIGNMENT_UPDATE_INTERVAL: Duration = Duration::from_millis(10);

/// The watermark a member publishes when it does not hold the group back.
const NOT_HOLDING: i64 = i64::MAX;

/// The alignment groups of one attempt of a job, by name.
#[derive(Clone, Default)]
pub struct AlignmentGroups {
    groups: Arc<Mutex<HashMap<String, Arc<Group>>>>,
}

#[derive(Default)]
struct Group {
    members: Mutex<Vec<Arc<AtomicI64>>>,
}

impl AlignmentGroups {
    /// Joins (creating if needed) the group `name`, allowing `max_drift` ahead of its minimum.
    pub fn join(&self, name: &str, max_drift: Duration) -> AlignmentMember {
        let group = {
            // A poisoned registry only means another subtask panicked while joining; the map
            // itself is always consistent.
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            groups.entry(name.to_string()).or_default().clone()
        };
        let watermark = Arc::new(AtomicI64::new(NOT_HOLDING));
        group
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(watermark.clone());
        AlignmentMember {
            group,
            watermark,
            max_drift_ms: max_drift.as_millis().min(i64::MAX as u128) as i64,
            group_min: NOT_HOLDING,
            next_update: Instant::now(),
        }
    }
}

/// One source subtask's membership of an alignment group.
pub struct AlignmentMember {
    group: Arc<Group>,
    watermark: Arc<AtomicI64>,
    max_drift_ms: i64,
    /// The group's minimum as last computed.
    group_min: i64,
    next_update: Instant,
}

impl AlignmentMember {
    /// Publishes this member's watermark (`None`: it has none, is idle or is exhausted, and
    /// does not hold the group back).
    #[inline]
    pub fn publish(&self, watermark: Option<i64>) {
        self.watermark
            .store(watermark.unwrap_or(NOT_HOLDING), Ordering::Relaxed);
    }

    /// Whether this member, at `watermark`, is too far ahead of its group to read more now.
    pub fn ahead(&mut self, watermark: Option<i64>, now: Instant) -> bool {
        let Some(own) = watermark else {
            return false;
        };
        if now >= self.next_update {
            self.next_update = now + ALIGNMENT_UPDATE_INTERVAL;
            self.group_min = self
                .group
                .members
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .min()
                .unwrap_or(NOT_HOLDING);
        }
        own > self.group_min.saturating_add(self.max_drift_ms)
    }
}

impl Drop for AlignmentMember {
    /// A member that is gone (its subtask ended) no longer holds the group back.
    fn drop(&mut self) {
        self.publish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRIFT: Duration = Duration::from_millis(100);

    /// A time past the next update, so every check recomputes the minimum.
    fn later(steps: u32) -> Instant {
        Instant::now() + ALIGNMENT_UPDATE_INTERVAL * (steps + 1)
    }

    #[test]
    fn a_member_more_than_the_drift_ahead_of_the_slowest_waits_until_it_catches_up() {
        let groups = AlignmentGroups::default();
        let mut fast = groups.join("g", DRIFT);
        let slow = groups.join("g", DRIFT);
        slow.publish(Some(1_000));
        fast.publish(Some(1_100));
        assert!(
            !fast.ahead(Some(1_100), later(1)),
            "exactly the drift ahead may go on"
        );
        fast.publish(Some(1_101));
        assert!(fast.ahead(Some(1_101), later(2)));
        slow.publish(Some(1_001));
        assert!(!fast.ahead(Some(1_101), later(3)));
    }

    #[test]
    fn the_minimum_is_recomputed_only_every_update_interval() {
        let groups = AlignmentGroups::default();
        let mut fast = groups.join("g", DRIFT);
        let slow = groups.join("g", DRIFT);
        slow.publish(Some(0));
        let t = later(1);
        assert!(fast.ahead(Some(500), t));
        slow.publish(Some(1_000));
        assert!(fast.ahead(Some(500), t), "still the minimum computed at t");
        assert!(!fast.ahead(Some(500), t + ALIGNMENT_UPDATE_INTERVAL));
    }

    #[test]
    fn members_without_a_watermark_idle_or_gone_do_not_hold_the_group_back() {
        let groups = AlignmentGroups::default();
        let mut fast = groups.join("g", DRIFT);
        let quiet = groups.join("g", DRIFT);
        // No watermark yet.
        assert!(!fast.ahead(Some(10_000), later(1)));
        quiet.publish(Some(0));
        assert!(fast.ahead(Some(10_000), later(2)));
        // Idle or exhausted.
        quiet.publish(None);
        assert!(!fast.ahead(Some(10_000), later(3)));
        quiet.publish(Some(0));
        assert!(fast.ahead(Some(10_000), later(4)));
        // Gone.
        drop(quiet);
        assert!(!fast.ahead(Some(10_000), later(5)));
        // A member without a watermark of its own never waits.
        assert!(!fast.ahead(None, later(6)));
    }

    #[test]
    fn groups_of_other_names_are_independent() {
        let groups = AlignmentGroups::default();
        let mut a = groups.join("a", DRIFT);
        let b = groups.join("b", DRIFT);
        b.publish(Some(0));
        assert!(!a.ahead(Some(10_000), later(1)));
    }
}
