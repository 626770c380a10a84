//! A replayable generator of purchase events: user `u` spent `amount`.
//!
//! The generator is split into `splits` independent sequences (one per subtask when the job
//! starts). Event `n` of split `s` is a pure function of `(seed, s, n)`, so a split's position
//! — a single number — is all a checkpoint needs to record, and a restored job produces exactly
//! the same events after it.
//!
//! Splits are list state: after a rescale a subtask may hold several, or none (then it emits
//! nothing). A subtask with several reads the one furthest behind first, so the positions it
//! emits, which jobs may use as event time, only ever go back by less than a batch.

use weir_runtime::{OperatorContext, SourceFunction, SourceStatus, TaskError};

/// One generated event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    pub user: u64,
    pub amount: u64,
    /// Position of the event in its split.
    pub seq: u64,
}

/// The generator source. Clone it into `StreamEnv::source`; each subtask opens its own splits.
#[derive(Clone, Debug)]
pub struct EventGenerator {
    seed: u64,
    users: u64,
    /// Events per split; `None` is unbounded.
    limit: Option<u64>,
    /// Events per second per subtask; `None` is as fast as possible.
    rate: Option<u64>,
    /// (split, next position) of the splits this subtask reads.
    splits: Vec<(u32, u64)>,
    /// Since when, and how many events this subtask emitted, for the rate limit.
    opened: Option<std::time::Instant>,
    emitted: u64,
}

impl EventGenerator {
    /// An unbounded generator over `users` distinct users.
    pub fn new(seed: u64, users: u64) -> EventGenerator {
        EventGenerator {
            seed,
            users: users.max(1),
            limit: None,
            rate: None,
            splits: Vec::new(),
            opened: None,
            emitted: 0,
        }
    }

    /// Emits at most `events_per_second` per subtask.
    pub fn with_rate(mut self, events_per_second: u64) -> EventGenerator {
        self.rate = Some(events_per_second.max(1));
        self
    }

    /// Stops every split after `events` events: a bounded source.
    pub fn with_limit(mut self, events_per_split: u64) -> EventGenerator {
        self.limit = Some(events_per_split);
        self
    }

    /// Event `position` of `split`.
    pub fn event(&self, split: u32, position: u64) -> Event {
        let h = splitmix64(
            self.seed ^ ((split as u64) << 40) ^ position.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        Event {
            user: h % self.users,
            amount: (h >> 40) % 100 + 1,
            seq: position,
        }
    }
}

/// splitmix64: a well-mixed 64-bit hash of `x` (the generator's, and anyone's who needs
/// deterministic pseudo-random bytes).
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn decode_split(bytes: &[u8]) -> Result<(u32, u64), TaskError> {
    if bytes.len() != 12 {
        return Err(TaskError::user(format!(
            "generator position is {} bytes, expected 12: the checkpoint was not written by this source",
            bytes.len()
        )));
    }
    let split = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let position = u64::from_le_bytes(bytes[4..].try_into().expect("8 bytes"));
    Ok((split, position))
}

impl SourceFunction<Event> for EventGenerator {
    fn open(
        &mut self,
        ctx: &OperatorContext,
        restored: Option<Vec<Vec<u8>>>,
    ) -> Result<(), TaskError> {
        self.splits = match restored {
            Some(elements) => elements
                .iter()
                .map(|e| decode_split(e))
                .collect::<Result<_, _>>()?,
            None => vec![(ctx.index, 0)],
        };
        self.opened = Some(std::time::Instant::now());
        self.emitted = 0;
        Ok(())
    }

    fn poll_batch(
        &mut self,
        batch: &mut Vec<Event>,
        mut max: usize,
    ) -> Result<SourceStatus, TaskError> {
        if let (Some(rate), Some(opened)) = (self.rate, self.opened) {
            let allowed = (opened.elapsed().as_secs_f64() * rate as f64) as u64;
            let budget = allowed.saturating_sub(self.emitted);
            if budget == 0 {
                return Ok(SourceStatus::Idle);
            }
            max = max.min(budget as usize);
        }
        let limit = self.limit.unwrap_or(u64::MAX);
        // The split furthest behind, ties to the first.
        let behind = (0..self.splits.len())
            .filter(|&i| self.splits[i].1 < limit)
            .min_by_key(|&i| self.splits[i].1);
        let Some(i) = behind else {
            return Ok(SourceStatus::Exhausted);
        };
        let (split, position) = self.splits[i];
        let end = limit.min(position.saturating_add(max as u64));
        batch.extend((position..end).map(|p| self.event(split, p)));
        self.splits[i].1 = end;
        self.emitted += end - position;
        Ok(SourceStatus::Emitted)
    }

    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(self
            .splits
            .iter()
            .map(|(split, position)| {
                let mut bytes = split.to_le_bytes().to_vec();
                bytes.extend_from_slice(&position.to_le_bytes());
                bytes
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::KeyGroupRange;

    fn ctx(index: u32) -> OperatorContext {
        OperatorContext {
            uid: "gen".into(),
            name: "gen".into(),
            index,
            parallelism: 2,
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 0),
            state_backend: Default::default(),
            metrics: Default::default(),
        }
    }

    #[test]
    fn a_restored_generator_continues_with_exactly_the_events_after_its_position() {
        let mut a = EventGenerator::new(7, 1000).with_limit(5000);
        a.open(&ctx(1), None).unwrap();
        let mut first = Vec::new();
        a.poll_batch(&mut first, 1000).unwrap();
        let position = a.snapshot_position().unwrap();
        let mut rest_a = Vec::new();
        while a.poll_batch(&mut rest_a, 1000).unwrap() == SourceStatus::Emitted {}

        let mut b = EventGenerator::new(7, 1000).with_limit(5000);
        b.open(&ctx(1), Some(position)).unwrap();
        let mut rest_b = Vec::new();
        while b.poll_batch(&mut rest_b, 1000).unwrap() == SourceStatus::Emitted {}
        assert_eq!(rest_a, rest_b);
        assert_eq!(first.len() + rest_a.len(), 5000);
    }

    #[test]
    fn a_position_of_the_wrong_shape_is_a_clear_error() {
        let mut g = EventGenerator::new(7, 10);
        let err = g.open(&ctx(0), Some(vec![vec![1, 2, 3]])).unwrap_err();
        assert!(err.to_string().contains("expected 12"), "{err}");
    }
}
