//! Acknowledgements processed per second at parallelism 1000: 1000 subtasks acknowledge one
//! checkpoint, over and over.
//!
//! `ack_path` times only the acknowledgements (the per-ack hot path); `checkpoint_cycle` times
//! a whole checkpoint: trigger, id, 1000 acknowledgements, metadata confirmation with store,
//! eviction and notifications. Both report elements = acknowledgements.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use weir_checkpoint::*;
use weir_core::{
    CheckpointId, CheckpointKind, HandleKind, JobId, OperatorId, StateHandle, SubtaskId,
    SubtaskState,
};

const PARALLELISM: u32 = 1000;
const JOB: JobId = JobId(7);

struct Bench {
    coordinator: CheckpointCoordinator,
    counter: StandaloneCheckpointIdCounter,
    subtasks: Vec<SubtaskId>,
    now: u64,
    request: RequestId,
}

impl Bench {
    fn new() -> Bench {
        let sources: Vec<SubtaskId> = (0..10)
            .map(|i| SubtaskId::new(OperatorId::from_uid("source"), i))
            .collect();
        let mut subtasks = sources.clone();
        subtasks.extend(
            (0..PARALLELISM - 10).map(|i| SubtaskId::new(OperatorId::from_uid("window"), i)),
        );
        let config = CheckpointConfig {
            timeout: Duration::from_secs(3600),
            ..CheckpointConfig::default()
        };
        let vertices = JobVertices {
            sources,
            all: subtasks.clone(),
        };
        let mut coordinator = CheckpointCoordinator::new(JOB, config, vertices);
        for &subtask in &subtasks {
            coordinator.handle(
                Event::SubtaskStatus {
                    subtask,
                    status: TaskStatus::Running,
                },
                0,
            );
        }
        coordinator.handle(Event::JobStatusChanged(JobStatus::Running), 0);
        Bench {
            coordinator,
            counter: StandaloneCheckpointIdCounter::new(),
            subtasks,
            now: 0,
            request: 0,
        }
    }

    /// Triggers the next checkpoint and returns its id.
    fn trigger(&mut self) -> CheckpointId {
        self.now += 1;
        self.request += 1;
        let kind = CheckpointKind::Checkpoint;
        self.coordinator.handle(
            Event::TriggerRequest {
                request: self.request,
                kind,
            },
            self.now,
        );
        let id = self.counter.get_and_increment().expect("ids");
        let actions = self.coordinator.handle(
            Event::IdAllocated {
                request: self.request,
                id,
            },
            self.now,
        );
        assert!(
            matches!(actions.first(), Some(Action::TriggerSources { .. })),
            "{actions:?}"
        );
        id
    }

    /// One acknowledgement per subtask, each with one private file, as a snapshot sends them.
    fn acks(&self, id: CheckpointId) -> Vec<Event> {
        self.subtasks
            .iter()
            .map(|&subtask| Event::Ack {
                job: JOB,
                subtask,
                checkpoint: id,
                state: SubtaskState::from_handles(vec![StateHandle {
                    path: format!("chk-{id}/{subtask}"),
                    size: 4096,
                    checksum: 0,
                    kind: HandleKind::Operator,
                    shared: false,
                    inline: None,
                }]),
                metrics: AckMetrics {
                    sync_duration_ms: 1,
                    async_duration_ms: 5,
                    alignment_duration_ms: 2,
                    start_delay_ms: 1,
                    ..AckMetrics::default()
                },
            })
            .collect()
    }

    fn ack_all(&mut self, acks: Vec<Event>) -> usize {
        let mut actions = 0;
        for ack in acks {
            actions += self.coordinator.handle(ack, self.now).len();
        }
        actions
    }

    fn confirm(&mut self, id: CheckpointId) {
        self.now += 1;
        let actions = self.coordinator.handle(
            Event::MetadataWritten {
                checkpoint: id,
                metadata_bytes: 1,
            },
            self.now,
        );
        assert!(actions
            .iter()
            .any(|a| matches!(a, Action::NotifyComplete { .. })));
    }
}

fn acks(c: &mut Criterion) {
    let mut group = c.benchmark_group("acks");
    group.throughput(Throughput::Elements(PARALLELISM as u64));

    group.bench_function("ack_path/parallelism_1000", |b| {
        let mut bench = Bench::new();
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let id = bench.trigger();
                let acks = bench.acks(id);
                let start = Instant::now();
                black_box(bench.ack_all(acks));
                timed += start.elapsed();
                bench.confirm(id);
            }
            timed
        })
    });

    group.bench_function("checkpoint_cycle/parallelism_1000", |b| {
        let mut bench = Bench::new();
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let id = CheckpointId(bench.counter.current().0);
                let acks = bench.acks(id);
                let start = Instant::now();
                assert_eq!(bench.trigger(), id);
                black_box(bench.ack_all(acks));
                bench.confirm(id);
                timed += start.elapsed();
            }
            timed
        })
    });
    group.finish();
}

criterion_group!(benches, acks);
criterion_main!(benches);
