//! The placement of each attempt of the job on the task managers' slots, and its end there.

use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::SubtaskId;
use weir_runtime::control::{ControlSender, CoordinatorMessage, JobEvent, TaskControl};
use weir_runtime::deploy::{Deployed, Deployer, RemoteAttempt, Restore};
use weir_runtime::error::JobError;
use weir_runtime::graph::{JobGraph, NodeRole};
use weir_runtime::metrics::SubtaskMetrics;
use weir_runtime::snapshot::SnapshotWorkers;
use weir_runtime::ExecutionConfig;

use super::{message, AttemptState, Outbox, Shared};
use crate::proto::{from_job_manager, Deploy};
use crate::wire::{self, DeploymentPlan, RestorePlan};

/// Deploys each attempt of the job on the task managers' slots.
///
/// Slots are shared as in Flink: slot `i` holds subtask `i` of every operator, so a job needs
/// as many slots as its highest parallelism. Slots are taken round-robin over the task
/// managers (the first slot of each, then the second of each, …), which spreads the job.
pub struct ClusterDeployer {
    shared: Arc<Shared>,
}

impl ClusterDeployer {
    pub(crate) fn new(shared: Arc<Shared>) -> ClusterDeployer {
        ClusterDeployer { shared }
    }

    /// Waits until the registered task managers offer `needed` slots (and, with `min_tms`,
    /// are that many); returns the slots in order.
    fn wait_for_slots(&self, needed: u32, min_tms: u32) -> Result<Vec<(String, String)>, JobError> {
        let deadline = Instant::now() + self.shared.options.slot_timeout;
        let mut state = self.shared.state.lock().expect("state lock");
        let mut logged = false;
        loop {
            if !state.leading {
                return Err(JobError::Failed(
                    "this job manager lost leadership; it deploys nothing more".into(),
                ));
            }
            let offered: u32 = state.task_managers.values().map(|t| t.slots).sum();
            if offered >= needed && state.task_managers.len() >= min_tms as usize {
                let mut slots = Vec::new();
                let most = state
                    .task_managers
                    .values()
                    .map(|t| t.slots)
                    .max()
                    .unwrap_or(0);
                for round in 0..most {
                    for (id, tm) in &state.task_managers {
                        if round < tm.slots {
                            slots.push((id.clone(), tm.data_address.clone()));
                        }
                    }
                }
                slots.truncate(needed as usize);
                return Ok(slots);
            }
            if Instant::now() >= deadline {
                return Err(JobError::Failed(format!(
                    "the job needs {needed} slots on at least {min_tms} task managers; {} task managers offer {offered} (waited {} s; slot.request.timeout)",
                    state.task_managers.len(),
                    self.shared.options.slot_timeout.as_secs()
                )));
            }
            if !logged {
                tracing::info!(
                    needed,
                    offered,
                    "waiting for task managers to offer enough slots"
                );
                logged = true;
            }
            state = self.shared.wait(state);
        }
    }
}

impl Deployer for ClusterDeployer {
    fn deploy(
        &mut self,
        graph: &JobGraph,
        _config: &ExecutionConfig,
        restore: Option<Restore<'_>>,
        attempt: u32,
        coordinator: &Sender<CoordinatorMessage>,
        events: &Sender<JobEvent>,
        _workers: &SnapshotWorkers,
    ) -> Result<Deployed, JobError> {
        let needed = graph.nodes.iter().map(|n| n.parallelism).max().unwrap_or(1);
        let min_tms = if attempt == 0 {
            self.shared.options.min_task_managers
        } else {
            1
        };
        // The sessions of the task managers the slots are on; one that left meanwhile means
        // counting the slots again.
        let (slots, peers, outboxes) = loop {
            let slots = self.wait_for_slots(needed, min_tms)?;
            let peers: BTreeMap<String, String> = slots.iter().cloned().collect();
            let state = self.shared.state.lock().expect("state lock");
            let outboxes: Option<Vec<(String, Outbox)>> = peers
                .keys()
                .map(|tm| {
                    let outbox = state.task_managers.get(tm)?.outbox.clone();
                    Some((tm.clone(), outbox))
                })
                .collect();
            if let Some(outboxes) = outboxes {
                break (slots, peers, outboxes);
            }
        };
        let mut placement = Vec::new();
        let mut hosts: HashMap<String, Vec<SubtaskId>> = HashMap::new();
        let mut deployed = Deployed::new(attempt);
        let mut metrics_by_subtask = HashMap::new();
        let mut forwarders: HashMap<String, Sender<(SubtaskId, TaskControl)>> = HashMap::new();
        for (tm, outbox) in outboxes {
            let forwarder = spawn_control_forwarder(&tm, attempt, outbox)?;
            forwarders.insert(tm, forwarder);
        }
        for (node_index, node) in graph.nodes.iter().enumerate() {
            for index in 0..node.parallelism {
                let subtask = SubtaskId::new(node.id(), index);
                let tm = slots[index as usize].0.clone();
                placement.push((subtask, tm.clone()));
                hosts.entry(tm.clone()).or_default().push(subtask);
                let metrics = Arc::new(SubtaskMetrics::default());
                metrics_by_subtask.insert(subtask, metrics.clone());
                deployed
                    .metrics
                    .push((subtask, node_index, index, metrics.clone()));
                deployed.uids.insert(subtask, node.uid.clone());
                deployed.controls.insert(
                    subtask,
                    ControlSender::Remote {
                        subtask,
                        to: forwarders[&tm].clone(),
                    },
                );
                deployed.all.push(subtask);
                if node.role == NodeRole::Source {
                    deployed.sources.push(subtask);
                    deployed.source_metrics.push(metrics);
                }
            }
        }
        drop(forwarders);
        let term = self.shared.state.lock().expect("state lock").term;
        let plan = DeploymentPlan {
            term,
            attempt,
            placement,
            peers: peers.into_iter().collect(),
            restore: restore.map(|r| RestorePlan {
                metadata: r.metadata.clone(),
                savepoint: r.savepoint.map(|p| p.to_path_buf()),
            }),
        };
        let bytes = wire::encode(&plan, "the deployment plan")
            .map_err(|e| JobError::Failed(e.to_string()))?;
        // Invariant: the driver knows the new attempt before any of its subtasks can report.
        let _ = coordinator.send(CoordinatorMessage::NewAttempt {
            attempt,
            controls: deployed.controls.clone(),
        });
        {
            let mut state = self.shared.state.lock().expect("state lock");
            state.current = Some(AttemptState {
                attempt,
                coordinator: coordinator.clone(),
                events: events.clone(),
                hosts: hosts.clone(),
                stopped: HashSet::new(),
                metrics: metrics_by_subtask,
                failed: false,
            });
            for tm in hosts.keys() {
                let sent = state.task_managers.get(tm).is_some_and(|t| {
                    t.outbox
                        .send(Ok(message(from_job_manager::Kind::Deploy(Deploy {
                            attempt,
                            plan: bytes.clone(),
                        }))))
                        .is_ok()
                });
                if !sent {
                    // It left after the slots were counted: this attempt fails at once.
                    let current = state.current.as_mut().expect("just set");
                    current.failed = true;
                    current.stopped.insert(tm.clone());
                    let _ = events.send(JobEvent::TaskFailed {
                        subtask: hosts[tm][0],
                        error: format!("task manager {tm} left before the deployment reached it"),
                        recoverable: true,
                    });
                }
            }
        }
        let spread: Vec<String> = hosts
            .iter()
            .map(|(tm, s)| format!("{tm}: {} subtasks", s.len()))
            .collect();
        tracing::info!(attempt, task_managers = ?spread, "deployed the attempt");
        deployed.remote = Some(Box::new(AttemptOnTaskManagers {
            shared: self.shared.clone(),
            attempt,
        }));
        Ok(deployed)
    }
}

/// Turns the driver's and executor's controls for the subtasks of one task manager into
/// messages of its session.
fn spawn_control_forwarder(
    tm: &str,
    attempt: u32,
    outbox: Outbox,
) -> Result<Sender<(SubtaskId, TaskControl)>, JobError> {
    let (tx, rx) = crossbeam_channel::unbounded::<(SubtaskId, TaskControl)>();
    std::thread::Builder::new()
        .name(format!("controls-{tm}"))
        .spawn(move || {
            for (subtask, control) in rx {
                let Ok(bytes) = wire::encode_control(&control) else {
                    continue;
                };
                let msg = message(from_job_manager::Kind::Control(crate::proto::Control {
                    attempt,
                    operator: subtask.operator.0,
                    index: subtask.index,
                    control: bytes,
                }));
                if outbox.send(Ok(msg)).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| JobError::Failed(format!("cannot start a control forwarder: {e}")))?;
    Ok(tx)
}

/// Waits for the task managers of an attempt to stop its subtasks.
struct AttemptOnTaskManagers {
    shared: Arc<Shared>,
    attempt: u32,
}

/// How long a shut-down attempt may take to stop on its task managers.
const STOP_WAIT: Duration = Duration::from_secs(60);

impl RemoteAttempt for AttemptOnTaskManagers {
    fn wait_stopped(self: Box<Self>) {
        let deadline = Instant::now() + STOP_WAIT;
        let mut state = self.shared.state.lock().expect("state lock");
        loop {
            let pending: Vec<String> = match &state.current {
                Some(c) if c.attempt == self.attempt => c
                    .hosts
                    .keys()
                    .filter(|tm| !c.stopped.contains(*tm))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            };
            if pending.is_empty() {
                // The executor restores or ends next: nothing more is taken from this attempt.
                if state
                    .current
                    .as_ref()
                    .is_some_and(|c| c.attempt == self.attempt)
                {
                    state.current = None;
                }
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(attempt = self.attempt, task_managers = ?pending, "task managers did not report the attempt stopped in time");
                return;
            }
            state = self.shared.wait(state);
        }
    }
}
