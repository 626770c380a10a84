//! Time windows and the assigners that place records in them: tumbling, sliding and session
//! windows over event time.
//!
//! Tumbling and sliding windows are cut into *panes* of `gcd(size, slide)`: every window is a
//! run of consecutive panes, and every record belongs to exactly one pane, so a record is
//! aggregated once however many windows it belongs to, and a window's result merges its panes.
//!
//! ```
//! use std::time::Duration;
//! use weir_runtime::operators::window::{SlidingEventTimeWindows, TimeWindow};
//!
//! // 10 s windows every 2 s: panes of 2 s, five per window.
//! let sliding = SlidingEventTimeWindows::of(Duration::from_secs(10), Duration::from_secs(2));
//! let panes = sliding.panes();
//! assert_eq!(panes.pane_start(12_345), 12_000);
//! let windows: Vec<TimeWindow> = panes.windows_of_pane(12_000).collect();
//! assert_eq!(windows.first(), Some(&TimeWindow::new(4_000, 14_000)));
//! assert_eq!(windows.last(), Some(&TimeWindow::new(12_000, 22_000)));
//! assert_eq!(windows.len(), 5);
//! ```

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A window of event time `[start, end)`, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimeWindow {
    pub start: i64,
    pub end: i64,
}

impl TimeWindow {
    pub fn new(start: i64, end: i64) -> TimeWindow {
        TimeWindow { start, end }
    }

    /// The largest timestamp in the window; it fires when the watermark reaches it.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Whether the windows overlap or touch (session windows that do are merged).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128 / 4) as i64
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Fixed-size, non-overlapping windows: `[offset + k·size, offset + (k+1)·size)`.
#[derive(Clone, Copy, Debug)]
pub struct TumblingEventTimeWindows {
    size: i64,
    offset: i64,
}

impl TumblingEventTimeWindows {
    /// Windows of `size` aligned to the epoch. Panics if `size` is zero.
    pub fn of(size: Duration) -> TumblingEventTimeWindows {
        assert!(!size.is_zero(), "a window's size must be positive");
        TumblingEventTimeWindows {
            size: millis(size),
            offset: 0,
        }
    }

    /// Shifts the windows' alignment by `offset` (for example, to a time zone).
    pub fn with_offset(mut self, offset: Duration) -> Self {
        self.offset = millis(offset) % self.size;
        self
    }

    pub fn panes(&self) -> PaneGeometry {
        PaneGeometry::new(self.size, self.size, self.offset)
    }
}

/// Fixed-size windows starting every `slide`: a record belongs to `size / slide` of them.
#[derive(Clone, Copy, Debug)]
pub struct SlidingEventTimeWindows {
    size: i64,
    slide: i64,
    offset: i64,
}

impl SlidingEventTimeWindows {
    /// Windows of `size` starting every `slide`. Panics if either is zero.
    pub fn of(size: Duration, slide: Duration) -> SlidingEventTimeWindows {
        assert!(
            !size.is_zero() && !slide.is_zero(),
            "a window's size and slide must be positive"
        );
        SlidingEventTimeWindows {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
        }
    }

    pub fn with_offset(mut self, offset: Duration) -> Self {
        self.offset = millis(offset) % self.slide;
        self
    }

    pub fn panes(&self) -> PaneGeometry {
        PaneGeometry::new(self.size, self.slide, self.offset)
    }
}

/// Windows of activity per key, closed by a gap of at least `gap` without records.
#[derive(Clone, Copy, Debug)]
pub struct EventTimeSessionWindows {
    gap: i64,
}

impl EventTimeSessionWindows {
    /// Sessions that close after `gap` of inactivity. Panics if `gap` is zero.
    pub fn with_gap(gap: Duration) -> EventTimeSessionWindows {
        assert!(!gap.is_zero(), "a session gap must be positive");
        EventTimeSessionWindows { gap: millis(gap) }
    }

    /// The window of a single record at `timestamp`.
    pub fn window_of(&self, timestamp: i64) -> TimeWindow {
        TimeWindow::new(timestamp, timestamp.saturating_add(self.gap))
    }
}

/// How tumbling or sliding windows divide into panes.
///
/// Invariant: `pane` divides both `size` and `slide`, so every window is exactly
/// `size / pane` consecutive panes and every pane lies wholly inside each window it touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaneGeometry {
    pub size: i64,
    pub slide: i64,
    pub offset: i64,
    pub pane: i64,
}

impl PaneGeometry {
    pub fn new(size: i64, slide: i64, offset: i64) -> PaneGeometry {
        PaneGeometry {
            size,
            slide,
            offset,
            pane: gcd(size, slide),
        }
    }

    /// The start of the pane holding `timestamp`.
    #[inline]
    pub fn pane_start(&self, timestamp: i64) -> i64 {
        timestamp - (timestamp - self.offset).rem_euclid(self.pane)
    }

    /// The largest window start at or before `t`.
    #[inline]
    fn start_at_or_before(&self, t: i64) -> i64 {
        t - (t - self.offset).rem_euclid(self.slide)
    }

    /// Whether a window ends at `end`.
    #[inline]
    pub fn is_window_end(&self, end: i64) -> bool {
        (end - self.size - self.offset).rem_euclid(self.slide) == 0
    }

    /// The end of the first window holding the pane starting at `pane_start`.
    #[inline]
    pub fn first_end(&self, pane_start: i64) -> i64 {
        let earliest = pane_start + self.pane - self.size;
        earliest + (self.offset - earliest).rem_euclid(self.slide) + self.size
    }

    /// The end of the last window holding the pane starting at `pane_start`.
    #[inline]
    pub fn last_end(&self, pane_start: i64) -> i64 {
        self.start_at_or_before(pane_start) + self.size
    }

    /// Every window holding the pane starting at `pane_start`, earliest first.
    pub fn windows_of_pane(&self, pane_start: i64) -> impl Iterator<Item = TimeWindow> {
        let size = self.size;
        let last = self.last_end(pane_start);
        (self.first_end(pane_start)..=last)
            .step_by(self.slide as usize)
            .map(move |end| TimeWindow::new(end - size, end))
    }

    /// The pane starts of the window ending at `end`, earliest first.
    pub fn panes_of_window(&self, end: i64) -> impl Iterator<Item = i64> {
        (end - self.size..end).step_by(self.pane as usize)
    }

    /// The pane starts whose last window ends at `end` (empty if no window ends there).
    pub fn panes_last_in(&self, end: i64) -> impl Iterator<Item = i64> {
        let start = end - self.size;
        let range = if self.is_window_end(end) {
            start..start + self.slide
        } else {
            start..start
        };
        range.step_by(self.pane as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_windows_have_one_pane_each() {
        let g = TumblingEventTimeWindows::of(Duration::from_secs(10)).panes();
        assert_eq!(g.pane, 10_000);
        assert_eq!(g.pane_start(-1), -10_000);
        assert_eq!(g.first_end(20_000), 30_000);
        assert_eq!(g.last_end(20_000), 30_000);
        assert_eq!(g.panes_of_window(30_000).collect::<Vec<_>>(), [20_000]);
        assert_eq!(g.panes_last_in(30_000).collect::<Vec<_>>(), [20_000]);
    }

    #[test]
    fn a_slide_that_does_not_divide_the_size_gives_panes_of_their_gcd() {
        // 10 ms windows every 4 ms: panes of 2 ms.
        let g = PaneGeometry::new(10, 4, 0);
        assert_eq!(g.pane, 2);
        // Pane [6, 8) lies in the windows starting at 0 and 4 (not -4: [-4, 6) ends before it).
        let windows: Vec<_> = g.windows_of_pane(6).collect();
        assert_eq!(windows, [TimeWindow::new(0, 10), TimeWindow::new(4, 14)]);
        assert_eq!(g.panes_of_window(14).collect::<Vec<_>>(), [4, 6, 8, 10, 12]);
        // Window [0, 10) is the last window of panes 0 and 2; pane 4 also lies in [4, 14).
        assert_eq!(g.panes_last_in(10).collect::<Vec<_>>(), [0, 2]);
        assert!(g.panes_last_in(11).next().is_none());
    }

    #[test]
    fn every_window_of_a_pane_contains_it_and_every_other_window_does_not() {
        for (size, slide, offset) in [(10, 2, 0), (10, 4, 1), (6, 6, 3), (9, 6, 0)] {
            let g = PaneGeometry::new(size, slide, offset);
            for pane in (-40..40).map(|i| g.pane_start(i)) {
                let expected: Vec<TimeWindow> = (-100..100)
                    .filter(|s| (s - offset).rem_euclid(slide) == 0)
                    .map(|s| TimeWindow::new(s, s + size))
                    .filter(|w| w.start <= pane && pane + g.pane <= w.end)
                    .collect();
                assert_eq!(g.windows_of_pane(pane).collect::<Vec<_>>(), expected);
            }
        }
    }

    #[test]
    fn session_windows_that_touch_intersect() {
        let s = EventTimeSessionWindows::with_gap(Duration::from_millis(10));
        assert!(s.window_of(0).intersects(&s.window_of(10)));
        assert!(!s.window_of(0).intersects(&s.window_of(11)));
        assert_eq!(
            s.window_of(0).cover(&s.window_of(10)),
            TimeWindow::new(0, 20)
        );
    }
}
