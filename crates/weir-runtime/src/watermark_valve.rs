//! The watermark valve of an input gate: combines the watermarks and idleness of a subtask's
//! input channels into the subtask's own event time (Flink's `StatusWatermarkValve`).
//!
//! A subtask's watermark is the minimum over its input channels, with three refinements:
//!
//! - a channel that ended no longer counts — if its event time ended first (`i64::MAX`, which
//!   every exhausted source sends) or it was idle; one that ends in the middle of event time (a
//!   source stopped by a stop without drain) keeps holding event time back where it stopped,
//!   so the windows it holds open stay in the stop's snapshot instead of firing after it;
//! - an *idle* channel no longer counts, so a source with nothing to read does not stall the
//!   job's event time; when every live channel is idle the subtask becomes idle itself (after
//!   advancing to the largest watermark any channel reached) and says so downstream;
//! - a channel that becomes active again counts only once its watermark has caught up with the
//!   subtask's, so waking up never moves event time backwards.
//!
//! Invariant: the output watermark never decreases, and it is never larger than the watermark
//! of a live, active, aligned channel.

use weir_core::WatermarkStatus;

/// What the valve tells its subtask after an input element: a new watermark, a new status, or
/// both (a status change to active comes before the watermark, a change to idle after it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValveOutput {
    pub watermark: Option<i64>,
    pub status: Option<WatermarkStatus>,
}

#[derive(Clone, Copy, Debug)]
struct Channel {
    watermark: i64,
    idle: bool,
    /// Counts towards the minimum: active, and caught up with the output watermark.
    aligned: bool,
    ended: bool,
}

/// Combines per-channel watermarks and statuses.
#[derive(Clone, Debug)]
pub struct WatermarkValve {
    channels: Vec<Channel>,
    output: i64,
    output_idle: bool,
}

impl WatermarkValve {
    /// A valve over `channels` inputs, all active and at the lowest watermark.
    pub fn new(channels: usize) -> WatermarkValve {
        WatermarkValve {
            channels: vec![
                Channel {
                    watermark: i64::MIN,
                    idle: false,
                    aligned: true,
                    ended: false,
                };
                channels
            ],
            output: i64::MIN,
            output_idle: false,
        }
    }

    /// The subtask's current watermark.
    #[cfg(test)]
    pub fn watermark(&self) -> i64 {
        self.output
    }

    /// Whether every live input is idle.
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.output_idle
    }

    /// Channel `i` delivered watermark `w`.
    pub fn on_watermark(&mut self, i: usize, w: i64) -> ValveOutput {
        let mut out = ValveOutput::default();
        let channel = &mut self.channels[i];
        if channel.idle {
            // A producer that sends event time again is active, whether or not it said so.
            out.status = self.on_active(i);
        }
        let channel = &mut self.channels[i];
        channel.watermark = channel.watermark.max(w);
        if !channel.aligned && channel.watermark >= self.output {
            channel.aligned = true;
        }
        out.watermark = self.advance();
        out
    }

    /// Channel `i` became idle or active.
    pub fn on_status(&mut self, i: usize, status: WatermarkStatus) -> ValveOutput {
        match status {
            WatermarkStatus::Active => ValveOutput {
                status: self.on_active(i),
                watermark: None,
            },
            WatermarkStatus::Idle => {
                let channel = &mut self.channels[i];
                if channel.idle || channel.ended {
                    return ValveOutput::default();
                }
                channel.idle = true;
                channel.aligned = false;
                self.after_channel_left()
            }
        }
    }

    /// Channel `i` ended: it will send nothing more.
    pub fn on_end(&mut self, i: usize) -> ValveOutput {
        let channel = &mut self.channels[i];
        if channel.ended {
            return ValveOutput::default();
        }
        if !channel.idle && channel.watermark < i64::MAX {
            // Invariant: event time only ends when every input's event time ended.
            return ValveOutput::default();
        }
        channel.ended = true;
        channel.aligned = false;
        if self.channels.iter().all(|c| c.ended) {
            return ValveOutput::default();
        }
        self.after_channel_left()
    }

    fn on_active(&mut self, i: usize) -> Option<WatermarkStatus> {
        let output = self.output;
        let channel = &mut self.channels[i];
        if !channel.idle || channel.ended {
            return None;
        }
        channel.idle = false;
        channel.aligned = channel.watermark >= output;
        if self.output_idle {
            self.output_idle = false;
            Some(WatermarkStatus::Active)
        } else {
            None
        }
    }

    /// A channel stopped counting (idle or ended): the minimum may advance, or every live
    /// channel may now be idle.
    fn after_channel_left(&mut self) -> ValveOutput {
        let live_active = self.channels.iter().any(|c| !c.ended && !c.idle);
        if live_active {
            return ValveOutput {
                watermark: self.advance(),
                status: None,
            };
        }
        let max = self
            .channels
            .iter()
            .filter(|c| !c.ended)
            .map(|c| c.watermark)
            .max()
            .unwrap_or(i64::MIN);
        let watermark = (max > self.output).then(|| {
            self.output = max;
            max
        });
        let status = (!self.output_idle).then(|| {
            self.output_idle = true;
            WatermarkStatus::Idle
        });
        ValveOutput { watermark, status }
    }

    /// The minimum over counting channels, if it moved past the output watermark.
    fn advance(&mut self) -> Option<i64> {
        let min = self
            .channels
            .iter()
            .filter(|c| !c.ended && !c.idle && c.aligned)
            .map(|c| c.watermark)
            .min()?;
        if min > self.output {
            self.output = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wm(w: i64) -> ValveOutput {
        ValveOutput {
            watermark: Some(w),
            status: None,
        }
    }

    #[test]
    fn the_watermark_is_the_minimum_over_the_inputs_and_never_decreases() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(v.on_watermark(0, 10), ValveOutput::default());
        assert_eq!(v.on_watermark(1, 5), wm(5));
        assert_eq!(v.on_watermark(1, 3), ValveOutput::default());
        assert_eq!(v.on_watermark(1, 20), wm(10));
        assert_eq!(v.watermark(), 10);
    }

    #[test]
    fn an_idle_input_does_not_hold_the_watermark_back() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        assert_eq!(v.on_status(1, WatermarkStatus::Idle), wm(100));
        assert_eq!(v.on_watermark(0, 150), wm(150));
        assert!(!v.is_idle());
    }

    #[test]
    fn when_every_input_is_idle_the_subtask_advances_to_the_largest_watermark_and_goes_idle() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        v.on_watermark(1, 40);
        assert_eq!(v.watermark(), 40);
        assert_eq!(v.on_status(1, WatermarkStatus::Idle), wm(100));
        let out = v.on_status(0, WatermarkStatus::Idle);
        assert_eq!(out.status, Some(WatermarkStatus::Idle));
        assert!(v.is_idle());
    }

    #[test]
    fn an_input_that_wakes_up_behind_counts_only_once_it_catches_up() {
        let mut v = WatermarkValve::new(2);
        v.on_status(1, WatermarkStatus::Idle);
        v.on_watermark(0, 100);
        assert_eq!(v.watermark(), 100);
        assert_eq!(
            v.on_status(1, WatermarkStatus::Active),
            ValveOutput::default()
        );
        // Channel 1 is behind: its watermark must not pull the output back, nor hold it.
        assert_eq!(v.on_watermark(1, 50), ValveOutput::default());
        assert_eq!(v.on_watermark(0, 200), wm(200));
        assert_eq!(v.on_watermark(1, 210), ValveOutput::default());
        assert_eq!(v.on_watermark(0, 300), wm(210));
    }

    #[test]
    fn waking_up_from_all_idle_says_active_before_any_watermark() {
        let mut v = WatermarkValve::new(1);
        v.on_watermark(0, 10);
        assert_eq!(
            v.on_status(0, WatermarkStatus::Idle).status,
            Some(WatermarkStatus::Idle)
        );
        let out = v.on_watermark(0, 20);
        assert_eq!(out.status, Some(WatermarkStatus::Active));
        assert_eq!(out.watermark, Some(20));
    }

    #[test]
    fn an_input_that_ended_its_event_time_or_was_idle_no_longer_counts_once_it_ends() {
        let mut v = WatermarkValve::new(3);
        v.on_watermark(0, 10);
        v.on_watermark(1, i64::MAX);
        v.on_status(2, WatermarkStatus::Idle);
        assert_eq!(v.on_end(1), ValveOutput::default());
        assert_eq!(v.on_end(2), ValveOutput::default());
        assert_eq!(v.on_watermark(0, 20), wm(20));
    }

    #[test]
    fn an_input_stopped_in_the_middle_of_event_time_holds_it_back() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 10);
        v.on_watermark(1, i64::MAX);
        assert_eq!(v.watermark(), 10);
        // Channel 0's source was stopped: its windows must not fire after the stop.
        assert_eq!(v.on_end(0), ValveOutput::default());
        assert_eq!(v.watermark(), 10);
    }
}
