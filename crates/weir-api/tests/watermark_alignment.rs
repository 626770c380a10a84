//! Watermark alignment: a fast source of an alignment group waits for a slow one instead of
//! running ahead of it, so what it emits stays within the allowed drift of the slow one's event
//! time — and runs free again once the slow one is exhausted.

use std::time::Duration;
use weir_api::prelude::*;
use weir_runtime::{execute, ExecutionConfig, StartMode, StopHandle};

/// (source, event time in ms)
type Tick = (u8, i64);

const PER_POLL: i64 = 10;
const DRIFT: Duration = Duration::from_millis(100);

/// Emits `PER_POLL` ticks a poll, 1 ms of event time apart, up to `limit`; sleeps `pause`
/// before each poll (a slow source) or not at all, and `start` before the first.
#[derive(Clone)]
struct Ticks {
    id: u8,
    next: i64,
    limit: i64,
    pause: Duration,
    start: Duration,
}

impl SourceFunction<Tick> for Ticks {
    fn open(&mut self, _: &OperatorContext, _: Option<Vec<Vec<u8>>>) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_batch(&mut self, batch: &mut Vec<Tick>, _: usize) -> Result<SourceStatus, TaskError> {
        if self.next >= self.limit {
            return Ok(SourceStatus::Exhausted);
        }
        std::thread::sleep(if self.next == 0 {
            self.start
        } else {
            self.pause
        });
        let end = (self.next + PER_POLL).min(self.limit);
        batch.extend((self.next..end).map(|t| (self.id, t)));
        self.next = end;
        Ok(SourceStatus::Emitted)
    }
    fn snapshot_position(&mut self) -> Result<Vec<Vec<u8>>, TaskError> {
        Ok(Vec::new())
    }
}

const SLOW_LIMIT: i64 = 1_000;
const FAST_LIMIT: i64 = 20_000;

/// Runs a slow and a fast source into one sink and returns the ticks in the order it got them.
fn run(aligned: bool) -> Vec<Tick> {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new("alignment");
    env.set_parallelism(1);
    let time = (|t: &Tick| t.1) as fn(&Tick) -> i64;
    let strategy = || {
        let s = WatermarkStrategy::for_monotonous_timestamps(time);
        if aligned {
            s.with_watermark_alignment("ticks", DRIFT)
        } else {
            s
        }
    };
    // A member without a watermark yet does not hold its group back, so the fast source starts
    // a little after the slow one has published one.
    let source = |id, limit, pause, start| Ticks {
        id,
        next: 0,
        limit,
        pause,
        start,
    };
    let sink = CollectSink::default();
    let slow = source(0, SLOW_LIMIT, Duration::from_millis(1), Duration::ZERO);
    let fast = source(1, FAST_LIMIT, Duration::ZERO, Duration::from_millis(50));
    env.source_with_watermarks("slow", slow, strategy())
        .union(env.source_with_watermarks("fast", fast, strategy()))
        .sink("out", sink.clone());
    let graph = env.build().unwrap();
    let mut config = ExecutionConfig {
        start: StartMode::Fresh,
        // Every poll's ticks travel on their own, so the sink sees them as they are emitted.
        batch_size: PER_POLL as usize,
        ..ExecutionConfig::default()
    };
    config.checkpoint.dir = dir.path().to_path_buf();
    execute(&graph, &config, &StopHandle::new(), &mut |_| {}).unwrap();
    sink.records()
}

/// The largest lead of the fast source's event time over the slow one's, as the sink saw them,
/// while the slow one was still running; and how far the fast one got in all.
fn lead(ticks: &[Tick]) -> (i64, i64) {
    let (mut slow, mut fast, mut lead) = (-1, -1, 0);
    for &(id, t) in ticks {
        if id == 0 {
            slow = t;
        } else {
            fast = t;
        }
        if (0..SLOW_LIMIT - 1).contains(&slow) {
            lead = lead.max(fast - slow);
        }
    }
    (lead, fast)
}

#[test]
fn an_aligned_fast_source_stays_within_the_drift_of_the_slow_one() {
    let ticks = run(true);
    let (lead, fast_end) = lead(&ticks);
    // The fast one stops before a poll once its watermark is past the slow one's plus the
    // drift, so it is at most one poll further; the slow one's own poll in flight adds one more.
    let bound = DRIFT.as_millis() as i64 + 3 * PER_POLL;
    assert!(
        lead <= bound,
        "the fast source led by {lead} ms (bound {bound} ms)"
    );
    assert_eq!(
        fast_end,
        FAST_LIMIT - 1,
        "the fast source did not run to its end"
    );
    assert_eq!(
        ticks.len() as i64,
        SLOW_LIMIT + FAST_LIMIT,
        "ticks lost or repeated"
    );
}

#[test]
fn without_alignment_the_fast_source_runs_far_ahead() {
    let (lead, _) = lead(&run(false));
    assert!(
        lead > 5 * DRIFT.as_millis() as i64,
        "the fast source led by only {lead} ms"
    );
}
