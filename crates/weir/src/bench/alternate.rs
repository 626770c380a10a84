//! `--alternate PHASE`: what checkpointing costs, measured within one run.
//!
//! Two runs side by side differ in more than their checkpointing: memory layout, hash seeds,
//! which core each thread lands on. Those differences move per-core throughput by a few per
//! cent from run to run, as much as the cost being measured. So here one job runs with
//! periodic checkpointing off, and the benchmark itself triggers checkpoints every
//! `--checkpoint-interval` in every other phase of `PHASE` (through the job's handle, the way
//! the REST API does). The phases come in pairs, one with checkpoints and one without, in an
//! order that alternates from pair to pair (off–on, on–off, …) so that a drift of the machine's
//! speed during the run cancels; each pair gives the change in per-core throughput that
//! checkpointing made (events over the process's CPU seconds).
//!
//! A phase is measured from one interval after its start to its end: in a phase with
//! checkpoints, the first checkpoint carries the changes of the whole phase before it (the
//! checkpoints are incremental), so it is left out, and the window holds exactly
//! `PHASE / interval - 1` checkpoints each an interval apart, as in a run that checkpoints
//! throughout; a phase without them skips the same first interval, which holds the end of the
//! previous phase's last checkpoint. The run begins with at least one unmeasured phase without
//! checkpoints, to warm up.
//!
//! The machine's speed also changes from second to second (other virtual machines on the same
//! host, memory bandwidth), and the phases of one run see different seconds. Two runs started
//! together, one of them with `--alternate-on-first`, alternate in opposite step: the first
//! measured pair begins on a whole multiple of four phases of the system clock in both, so at
//! every moment one of them checkpoints and the other does not. The warm-up thus lasts one to
//! five phases, and the pairs are as many as fit in `--duration` after five.
//! `benchmarks/checkpoint-cost.sh --alternate` combines the two: the geometric mean of their
//! changes in the same pair cancels both the difference between the runs and the machine's
//! change of speed between the two phases.

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir_checkpoint::JobStatus;
use weir_runtime::graph::NodeRole;
use weir_runtime::JobHandle;

use crate::CliError;

/// The phases of an alternating run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alternation {
    pub phase: Duration,
    /// How often checkpoints are triggered in a phase with checkpoints.
    pub every: Duration,
    /// Pairs of measured phases (after the warm-up phase).
    pub pairs: usize,
    /// A control: the phases "with checkpoints" trigger none either.
    pub control: bool,
    /// The first pair runs its phase with checkpoints first (the opposite step).
    pub on_first: bool,
}

/// What one pair of phases measured: events per CPU second without and with checkpoints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    pub off: f64,
    pub on: f64,
}

impl Pair {
    /// The change in per-core throughput that checkpointing made, in per cent (negative: it
    /// cost throughput); `None` if a phase saw no events (a source held back all phase long,
    /// as behind a window firing), which leaves nothing to compare.
    pub fn change_percent(&self) -> Option<f64> {
        (self.off > 0.0 && self.on > 0.0).then(|| (self.on / self.off - 1.0) * 100.0)
    }
}

/// The changes of many pairs, summarised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub pairs: usize,
    pub mean: f64,
    /// The 95 % confidence interval of the mean (Student's t).
    pub low: f64,
    pub high: f64,
    pub median: f64,
    pub sd: f64,
}

/// What an alternating run measured, for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub alternation: Alternation,
    pub pairs: Vec<Pair>,
    /// Checkpoints the benchmark asked for.
    pub triggered: u64,
    /// Why the run measured fewer pairs than planned, if it did.
    pub cut_short: Option<String>,
    /// When the first measured pair began, by the system clock (ms since 1970).
    pub first_pair_unix_ms: u64,
    /// Events in all measured phases without and with checkpoints.
    pub events: [u64; 2],
    /// CPU seconds of each group of threads in all measured phases without and with
    /// checkpoints: where the cost goes.
    pub thread_cpu: BTreeMap<String, [f64; 2]>,
}

impl Alternation {
    /// The alternation `--alternate phase` asks for in a run of `duration` with checkpoints
    /// every `every`, or a usage error that says what to change.
    pub fn new(
        phase: Duration,
        every: Option<Duration>,
        duration: Option<Duration>,
    ) -> Result<Alternation, CliError> {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let Some(every) = every.filter(|e| !e.is_zero()) else {
            return Err(CliError::usage(
                "--alternate needs --checkpoint-interval: how often to checkpoint in the phases with checkpoints",
            ));
        };
        let Some(duration) = duration else {
            return Err(CliError::usage(
                "--alternate needs --duration: the run is cut into phases of that length",
            ));
        };
        let cycles = phase.as_nanos() / every.as_nanos();
        if cycles < 2 || !phase.as_nanos().is_multiple_of(every.as_nanos()) {
            return Err(CliError::usage(format!(
                "--alternate ({}) must be a whole multiple, at least twice, of --checkpoint-interval ({})",
                show(phase),
                show(every)
            )));
        }
        // A warm-up of up to five phases (see `first_pair_in`), then two phases a pair.
        let pairs = (duration.as_nanos() / phase.as_nanos()).saturating_sub(5) / 2;
        if pairs < 2 {
            return Err(CliError::usage(format!(
                "--duration ({}) holds fewer than 2 pairs of --alternate phases ({}): it needs at least 9 phases",
                show(duration),
                show(phase)
            )));
        }
        Ok(Alternation {
            phase,
            every,
            pairs: pairs as usize,
            control: false,
            on_first: false,
        })
    }

    /// This alternation in opposite step (`on_first`): its first pair checkpoints first.
    pub fn opposite(self, on_first: bool) -> Alternation {
        Alternation { on_first, ..self }
    }

    /// This alternation as a control (`control`), whose phases all run without checkpoints.
    pub fn control(self, control: bool) -> Alternation {
        Alternation { control, ..self }
    }

    /// Whether pair `n` (from 0) runs its phase with checkpoints first.
    pub fn checkpoints_first(&self, n: usize) -> bool {
        n.is_multiple_of(2) == self.on_first
    }

    /// How long after `now_unix_ms` (the system clock) the first measured pair begins: after
    /// one phase at least, on a whole multiple of four phases.
    pub fn first_pair_in(&self, now_unix_ms: u64) -> Duration {
        let cycle = (self.phase.as_millis() as u64 * 4).max(1);
        let earliest = now_unix_ms + self.phase.as_millis() as u64;
        Duration::from_millis(earliest.div_ceil(cycle) * cycle - now_unix_ms)
    }

    /// Drives `handle`'s job through the phases on a thread of its own, then stops it.
    pub fn start(self, handle: JobHandle) -> JoinHandle<Measured> {
        std::thread::Builder::new()
            .name("bench-alternate".into())
            .spawn(move || {
                let measured = self.drive(&handle);
                handle.stop();
                measured
            })
            .expect("spawning a thread")
    }

    fn drive(self, handle: &JobHandle) -> Measured {
        let mut measured = Measured {
            alternation: self,
            pairs: Vec::with_capacity(self.pairs),
            triggered: 0,
            cut_short: None,
            first_pair_unix_ms: 0,
            events: [0; 2],
            thread_cpu: BTreeMap::new(),
        };
        if let Err(why) = wait_running(handle) {
            measured.cut_short = Some(why);
            return measured;
        }
        // The warm-up; each phase then sleeps until its start.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let wait = self.first_pair_in(now_ms);
        let mut start = Instant::now() + wait;
        measured.first_pair_unix_ms = now_ms + wait.as_millis() as u64;
        for n in 0..self.pairs {
            let order = if self.checkpoints_first(n) {
                [true, false]
            } else {
                [false, true]
            };
            let mut pair = Pair { off: 0.0, on: 0.0 };
            for on in order {
                let phase = match self.phase_at(handle, start, on, &mut measured.triggered) {
                    Ok(phase) => phase,
                    Err(why) => {
                        measured.cut_short = Some(why);
                        return measured;
                    }
                };
                start += self.phase;
                let rate = phase.events as f64 / phase.cpu_seconds;
                let side = usize::from(on);
                measured.events[side] += phase.events;
                for (name, cpu) in phase.threads {
                    measured.thread_cpu.entry(name).or_default()[side] += cpu;
                }
                if on {
                    pair.on = rate;
                } else {
                    pair.off = rate;
                }
            }
            tracing::info!(
                pair = n + 1,
                off = pair.off,
                on = pair.on,
                change_percent = pair.change_percent(),
                "alternating phases measured"
            );
            measured.pairs.push(pair);
        }
        measured
    }

    /// Runs one phase from `start`, triggering checkpoints if `on`; returns its events and CPU
    /// time, measured from one interval in to its end.
    fn phase_at(
        &self,
        handle: &JobHandle,
        start: Instant,
        on: bool,
        triggered: &mut u64,
    ) -> Result<Usage, String> {
        let cycles = (self.phase.as_nanos() / self.every.as_nanos()) as u32;
        let mut from = None;
        for k in 0..cycles {
            sleep_until(start + self.every * k);
            if k == 1 {
                from = Some(sample(handle));
            }
            if on && !self.control {
                handle
                    .trigger_checkpoint()
                    .map_err(|e| format!("a checkpoint could not be triggered: {e}"))?;
                *triggered += 1;
            }
        }
        sleep_until(start + self.phase);
        let to = sample(handle);
        let from = from.expect("a phase has at least two cycles");
        if from.attempt != to.attempt {
            return Err("the job restarted during a phase".to_string());
        }
        if handle.status() != JobStatus::Running {
            return Err(format!("the job stopped running ({})", handle.status()));
        }
        let phase = to.usage.since(&from.usage);
        if phase.cpu_seconds <= 0.0 {
            return Err("no CPU time passed in a phase".to_string());
        }
        Ok(phase)
    }
}

/// Events the sources emitted and CPU time used: so far at one moment, or between two.
struct Usage {
    events: u64,
    /// The whole process's.
    cpu_seconds: f64,
    /// By group of threads (see [`thread_cpu`]).
    threads: BTreeMap<String, f64>,
}

impl Usage {
    /// What was used between `earlier` and this.
    fn since(&self, earlier: &Usage) -> Usage {
        let threads = self
            .threads
            .iter()
            .map(|(name, cpu)| {
                let before = earlier.threads.get(name).copied().unwrap_or(0.0);
                (name.clone(), (cpu - before).max(0.0))
            })
            .collect();
        Usage {
            events: self.events.saturating_sub(earlier.events),
            cpu_seconds: self.cpu_seconds - earlier.cpu_seconds,
            threads,
        }
    }
}

/// The usage so far at one moment, and the job's attempt then.
struct Sample {
    usage: Usage,
    attempt: u32,
}

/// CPU seconds (user + system) of this process's threads so far, summed by name up to a `#`:
/// the subtasks of one operator (`nexmark#0`, `nexmark#1`) are one group; a name without `#`
/// (`weir-snapshot-0`, `weir-storage-io`) is a group of its own. Threads that ended are not
/// counted.
fn thread_cpu() -> BTreeMap<String, f64> {
    let mut groups = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return groups;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (name) state …`: the name may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let group = name.split('#').next().unwrap_or(name).to_string();
        if let Some(cpu) = super::process::stat_cpu_seconds(&stat) {
            *groups.entry(group).or_insert(0.0) += cpu;
        }
    }
    groups
}

fn sample(handle: &JobHandle) -> Sample {
    let attempt = handle.attempt();
    let vertices = handle.vertices();
    let events = handle
        .subtask_counts()
        .iter()
        .filter(|c| vertices.get(c.vertex).map(|v| v.role) == Some(NodeRole::Source))
        .map(|c| c.records_out)
        .sum();
    Sample {
        usage: Usage {
            events,
            cpu_seconds: super::process::cpu_seconds(),
            threads: thread_cpu(),
        },
        attempt,
    }
}

/// Waits (up to a minute) for the job to be running: its subtasks deployed, its coordinator
/// taking requests.
fn wait_running(handle: &JobHandle) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match handle.status() {
            JobStatus::Running => return Ok(()),
            JobStatus::Created | JobStatus::Failing | JobStatus::Restarting => {}
            other => return Err(format!("the job ended before the phases began ({other})")),
        }
        if Instant::now() >= deadline {
            return Err("the job was not running a minute after it started".to_string());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// Student's t for a two-sided 95 % interval with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
        2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.00,
        61..=120 => 1.98,
        _ => 1.96,
    }
}

/// The mean, its 95 % confidence interval, the median and the standard deviation of
/// `values`; `None` for fewer than two.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let half = t95(n - 1) * sd / (n as f64).sqrt();
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        pairs: n,
        mean,
        low: mean - half,
        high: mean + half,
        median,
        sd,
    })
}

impl Measured {
    /// CPU nanoseconds per event of each group of threads, without and with checkpoints, over
    /// all measured phases.
    pub fn ns_per_event_by_thread(&self) -> Vec<(String, [f64; 2])> {
        let per_event = |cpu: f64, events: u64| {
            if events == 0 {
                0.0
            } else {
                cpu * 1e9 / events as f64
            }
        };
        self.thread_cpu
            .iter()
            .map(|(name, [off, on])| {
                (
                    name.clone(),
                    [
                        per_event(*off, self.events[0]),
                        per_event(*on, self.events[1]),
                    ],
                )
            })
            .collect()
    }

    /// The change of every pair that has one (see [`Pair::change_percent`]).
    fn changes(&self) -> Vec<f64> {
        self.pairs.iter().filter_map(Pair::change_percent).collect()
    }

    pub fn summary(&self) -> Option<Summary> {
        summarize(&self.changes())
    }

    /// The `"alternation":{…},` field of the JSON report.
    pub fn json_field(&self) -> String {
        let a = &self.alternation;
        let changes = self.changes();
        let stats = match summarize(&changes) {
            Some(s) => format!(
                "\"change_percent\":{:.2},\"change_ci95_percent\":[{:.2},{:.2}],\"change_median_percent\":{:.2},\"change_sd_percent\":{:.2}",
                s.mean, s.low, s.high, s.median, s.sd
            ),
            None => "\"change_percent\":null".to_string(),
        };
        let pairs: Vec<String> = self
            .pairs
            .iter()
            .map(|p| format!("[{:.0},{:.0}]", p.off, p.on))
            .collect();
        let threads: Vec<String> = self
            .ns_per_event_by_thread()
            .iter()
            .map(|(name, [off, on])| format!("{}:[{off:.1},{on:.1}]", serde_json::json!(name)))
            .collect();
        let cut_short = match &self.cut_short {
            Some(why) => serde_json::json!(why).to_string(),
            None => "null".to_string(),
        };
        format!(
            "\"alternation\":{{\"phase_ms\":{},\"checkpoint_every_ms\":{},\"control\":{},\"on_first\":{},\"first_pair_unix_ms\":{},\"pairs_planned\":{},\"pairs\":{},\"pairs_compared\":{},{stats},\"checkpoints_triggered\":{},\"cut_short\":{cut_short},\"ns_per_event_by_thread_off_on\":{{{}}},\"per_core_off_on\":[{}]}},",
            a.phase.as_millis(),
            a.every.as_millis(),
            a.control,
            a.on_first,
            self.first_pair_unix_ms,
            a.pairs,
            self.pairs.len(),
            changes.len(),
            self.triggered,
            threads.join(","),
            pairs.join(","),
        )
    }

    /// One sentence for a terminal.
    pub fn sentence(&self) -> String {
        let a = &self.alternation;
        let what = format!(
            "{} every {} in alternate phases of {}",
            if a.control {
                "control: no checkpoints, not even"
            } else {
                "checkpoints"
            },
            humantime::format_duration(a.every),
            humantime::format_duration(a.phase)
        );
        let mut line = match self.summary() {
            Some(s) => format!(
                "{what}: per-core throughput {:+.2} % (95 % confidence {:+.2} to {:+.2} %, median {:+.2} %, {} pairs)",
                s.mean, s.low, s.high, s.median, s.pairs
            ),
            None => format!("{what}: fewer than 2 pairs measured"),
        };
        if let Some(why) = &self.cut_short {
            line.push_str(&format!("; cut short: {why}"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn phases_are_whole_multiples_of_the_interval_and_the_run_holds_two_pairs_at_least() {
        let a = Alternation::new(5 * S, Some(S), Some(60 * S)).unwrap();
        // 12 phases: up to five to warm up, 3 pairs, one left over.
        assert_eq!(a.pairs, 3);
        assert_eq!(
            Alternation::new(5 * S, Some(S), Some(45 * S))
                .unwrap()
                .pairs,
            2
        );
        let refused = |phase, every, duration| {
            Alternation::new(phase, every, duration)
                .unwrap_err()
                .message
        };
        assert!(refused(5 * S, Some(S), Some(44 * S)).contains("fewer than 2 pairs"));
        assert!(refused(S, Some(S), Some(60 * S)).contains("at least twice"));
        assert!(refused(5 * S, Some(2 * S), Some(60 * S)).contains("whole multiple"));
        assert!(refused(5 * S, None, Some(60 * S)).contains("needs --checkpoint-interval"));
        assert!(refused(5 * S, Some(S), None).contains("needs --duration"));
    }

    #[test]
    fn the_order_of_the_phases_alternates_from_pair_to_pair_and_in_opposite_step() {
        let a = Alternation::new(5 * S, Some(S), Some(60 * S)).unwrap();
        let order: Vec<bool> = (0..4).map(|n| a.checkpoints_first(n)).collect();
        assert_eq!(order, [false, true, false, true]);
        let b = a.opposite(true);
        let order: Vec<bool> = (0..4).map(|n| b.checkpoints_first(n)).collect();
        assert_eq!(order, [true, false, true, false]);
    }

    #[test]
    fn the_first_pair_begins_after_a_phase_on_a_multiple_of_four_phases() {
        let a = Alternation::new(5 * S, Some(S), Some(60 * S)).unwrap();
        // Four phases are 20 s: from 101 s, the first boundary after 106 s is 120 s.
        assert_eq!(a.first_pair_in(101_000), Duration::from_millis(19_000));
        // From 115 s, 120 s is just a phase away; a moment later it is too soon: 140 s.
        assert_eq!(a.first_pair_in(115_000), Duration::from_millis(5_000));
        assert_eq!(a.first_pair_in(115_001), Duration::from_millis(24_999));
        // Two runs that reach it at slightly different moments begin together.
        assert_eq!(
            101_000 + a.first_pair_in(101_000).as_millis(),
            103_500 + a.first_pair_in(103_500).as_millis()
        );
    }

    #[test]
    fn a_pair_reports_the_change_checkpointing_made() {
        let pair = Pair {
            off: 2_000_000.0,
            on: 1_900_000.0,
        };
        assert!((pair.change_percent().unwrap() + 5.0).abs() < 1e-9);
        let idle = Pair { off: 0.0, on: 1.0 };
        assert_eq!(idle.change_percent(), None);
    }

    #[test]
    fn the_summary_has_the_mean_its_interval_and_the_median() {
        let s = summarize(&[-1.0, -3.0, -2.0, -6.0]).unwrap();
        assert_eq!(s.pairs, 4);
        assert!((s.mean + 3.0).abs() < 1e-9);
        assert!((s.median + 2.5).abs() < 1e-9);
        // sd = sqrt(14 / 3); half width = t(3) * sd / 2.
        let sd = (14.0f64 / 3.0).sqrt();
        assert!((s.sd - sd).abs() < 1e-9);
        assert!((s.high - (-3.0 + 3.18 * sd / 2.0)).abs() < 1e-9);
        assert!((s.low - (-3.0 - 3.18 * sd / 2.0)).abs() < 1e-9);
        assert_eq!(summarize(&[1.0]), None);
    }

    #[test]
    fn the_report_carries_every_pair_and_says_why_it_was_cut_short() {
        let measured = Measured {
            alternation: Alternation::new(2 * S, Some(S), Some(20 * S)).unwrap(),
            pairs: vec![
                Pair {
                    off: 100.0,
                    on: 99.0,
                },
                Pair {
                    off: 100.0,
                    on: 97.0,
                },
                // A phase without events: reported, not compared.
                Pair { off: 0.0, on: 50.0 },
            ],
            triggered: 4,
            cut_short: Some("the job \"x\" stopped".into()),
            first_pair_unix_ms: 120_000,
            events: [1_000_000, 500_000],
            thread_cpu: BTreeMap::from([("q4-select".to_string(), [0.1, 0.06])]),
        };
        let json = measured.json_field();
        assert!(json.contains("\"change_percent\":-2.00,"), "{json}");
        assert!(
            json.contains("\"per_core_off_on\":[[100,99],[100,97],[0,50]]"),
            "{json}"
        );
        assert!(json.contains("\"pairs\":3,\"pairs_compared\":2,"), "{json}");
        // 0.1 s over 1 M events, 0.06 s over 500 K.
        assert!(
            json.contains("\"ns_per_event_by_thread_off_on\":{\"q4-select\":[100.0,120.0]},"),
            "{json}"
        );
        assert!(!json.contains("inf") && !json.contains("NaN"), "{json}");
        assert!(
            json.contains("\"cut_short\":\"the job \\\"x\\\" stopped\""),
            "{json}"
        );
        assert!(json.contains("\"checkpoints_triggered\":4,"), "{json}");
        let sentence = measured.sentence();
        assert!(
            sentence.contains("per-core throughput -2.00 %"),
            "{sentence}"
        );
        assert!(sentence.contains("2 pairs"), "{sentence}");
    }
}
