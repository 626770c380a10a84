//! The Nexmark source: the generator's events spread over the source's subtasks.
//!
//! Subtask `i` of `p` emits the events `n ≡ i (mod p)` in order, so every subtask's events are
//! in event-time order, the subtasks advance in step, and the job sees the same stream of
//! events at any parallelism. A subtask's position — the next event of its split — is all a
//! checkpoint records; a restored source regenerates exactly the events after it.
//!
//! Unthrottled, the source generates as fast as the job takes events; throttled, each subtask
//! emits its share of `events_per_second` in wall-clock time.
//!
//! ```
//! use weir_connectors::nexmark::{NexmarkConfig, NexmarkSource};
//!
//! let source = NexmarkSource::new(NexmarkConfig::default()).with_limit(1_000_000);
//! assert_eq!(source.limit(), Some(1_000_000));
//! ```

use std::time::Instant;
use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

use super::generator::{NexmarkConfig, NexmarkGenerator};
use super::model::Event;

/// One split of the event numbers: `index, index + stride, …`, read up to `next`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    index: u64,
    stride: u64,
    /// How many events of the split were emitted.
    emitted: u64,
}

impl Split {
    fn encode(&self) -> Vec<u8> {
        [self.index, self.stride, self.emitted]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn decode(bytes: &[u8]) -> Result<Split, TaskError> {
        if bytes.len() != 24 {
            return Err(TaskError::user(format!(
                "a Nexmark source position is 24 bytes, not {}: the checkpoint was not written by this source",
                bytes.len()
            )));
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        let split = Split {
            index: word(0),
            stride: word(1),
            emitted: word(2),
        };
        if split.stride == 0 || split.index >= split.stride {
            return Err(TaskError::user("a Nexmark source position is malformed"));
        }
        Ok(split)
    }
}

/// A replayable source of Nexmark events; see the module documentation.
#[derive(Clone, Debug)]
pub struct NexmarkSource {
    generator: NexmarkGenerator,
    /// Events of the whole stream; `None` is unbounded.
    limit: Option<u64>,
    throttled: bool,
    splits: Vec<Split>,
    next_split: usize,
    opened: Option<Instant>,
    /// Events this subtask emitted since it opened (for the throttle).
    emitted: u64,
    /// This subtask's share of the rate, events per second.
    rate: f64,
}

impl NexmarkSource {
    /// An unbounded, unthrottled source of `config`'s events.
    pub fn new(config: NexmarkConfig) -> NexmarkSource {
        NexmarkSource {
            generator: NexmarkGenerator::new(config),
            limit: None,
            throttled: false,
            splits: Vec::new(),
            next_split: 0,
            opened: None,
            emitted: 0,
            rate: 0.0,
        }
    }

    /// Ends after the first `events` events of the stream (over all subtasks).
    pub fn with_limit(mut self, events: u64) -> NexmarkSource {
        self.limit = Some(events);
        self
    }

    /// Emits events at the configured `events_per_second` of wall-clock time.
    pub fn throttled(mut self) -> NexmarkSource {
        self.throttled = true;
        self
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    pub fn generator(&self) -> &NexmarkGenerator {
        &self.generator
    }

    /// Events left in `split` before the limit.
    fn remaining(&self, split: &Split) -> u64 {
        match self.limit {
            None => u64::MAX,
            Some(limit) => {
                let total = if limit > split.index {
                    (limit - split.index).div_ceil(split.stride)
                } else {
                    0
                };
                total.saturating_sub(split.emitted)
            }
        }
    }
}

impl SourceFunction<Event> for NexmarkSource {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.splits = match restored {
            Some(elements) => elements
                .iter()
                .map(|e| Split::decode(e))
                .collect::<Result<_, _>>()?,
            None => vec![Split {
                index: ctx.index as u64,
                stride: ctx.parallelism.max(1) as u64,
                emitted: 0,
            }],
        };
        self.rate =
            self.generator.config().events_per_second as f64 / ctx.parallelism.max(1) as f64;
        self.opened = Some(Instant::now());
        self.emitted = 0;
        Ok(())
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<Event>,
        mut max: usize,
    ) -> Result<SourceStatus, TaskError> {
        if let (true, Some(opened)) = (self.throttled, self.opened) {
            let allowed = (opened.elapsed().as_secs_f64() * self.rate) as u64;
            let budget = allowed.saturating_sub(self.emitted);
            if budget == 0 {
                return Ok(SourceStatus::Idle);
            }
            max = max.min(budget as usize);
        }
        let n = self.splits.len();
        for k in 0..n {
            let i = (self.next_split + k) % n;
            let split = self.splits[i];
            let count = self.remaining(&split).min(max as u64);
            if count == 0 {
                continue;
            }
            let first = split.index + split.emitted * split.stride;
            batch.reserve(count as usize);
            for j in 0..count {
                batch.push(self.generator.event(first + j * split.stride));
            }
            self.splits[i].emitted += count;
            self.emitted += count;
            self.next_split = (i + 1) % n;
            return Ok(SourceStatus::Emitted);
        }
        Ok(SourceStatus::Exhausted)
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(self.splits.iter().map(Split::encode).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::KeyGroupRange;

    fn ctx(index: u32, parallelism: u32) -> OperatorContext {
        OperatorContext {
            uid: "nexmark".into(),
            name: "nexmark".into(),
            index,
            parallelism,
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 0),
            state_backend: Default::default(),
            metrics: Default::default(),
        }
    }

    fn drain(source: &mut NexmarkSource) -> Vec<Event> {
        let mut out = Vec::new();
        while source.poll_batch(&mut out, 100).unwrap() == SourceStatus::Emitted {}
        out
    }

    #[test]
    fn the_subtasks_together_emit_each_event_of_the_stream_once_in_order_per_subtask() {
        let config = NexmarkConfig {
            events_per_second: 1_000,
            ..NexmarkConfig::default()
        };
        let mut all = Vec::new();
        for index in 0..3 {
            let mut s = NexmarkSource::new(config.clone()).with_limit(1_000);
            s.open(&ctx(index, 3), None).unwrap();
            let events = drain(&mut s);
            assert!(events
                .windows(2)
                .all(|w| w[0].date_time() <= w[1].date_time()));
            all.extend(events);
        }
        let generator = NexmarkGenerator::new(config);
        let mut expected: Vec<Event> = (0..1_000).map(|n| generator.event(n)).collect();
        let key = |e: &Event| format!("{e:?}");
        all.sort_by_key(key);
        expected.sort_by_key(key);
        assert_eq!(all, expected);
    }

    #[test]
    fn a_restored_source_emits_exactly_the_events_after_its_position() {
        let config = NexmarkConfig::default();
        let mut a = NexmarkSource::new(config.clone()).with_limit(2_000);
        a.open(&ctx(1, 2), None).unwrap();
        let mut first = Vec::new();
        a.poll_batch(&mut first, 300).unwrap();
        let position = a.snapshot_position().unwrap();
        let rest_a = drain(&mut a);
        let mut b = NexmarkSource::new(config).with_limit(2_000);
        b.open(&ctx(1, 2), Some(position)).unwrap();
        assert_eq!(drain(&mut b), rest_a);
        assert_eq!(first.len() + rest_a.len(), 1_000);
    }

    #[test]
    fn a_position_of_the_wrong_shape_is_a_clear_error() {
        let mut s = NexmarkSource::new(NexmarkConfig::default());
        let err = s.open(&ctx(0, 1), Some(vec![vec![0; 12]])).unwrap_err();
        assert!(err.to_string().contains("24 bytes"), "{err}");
    }
}
