//! Running a job under high availability: contend for leadership in ZooKeeper, run the job
//! while leading, stop at once when leadership goes, and never run a job that already ended.
//!
//! This is the job manager's loop for `high-availability.type: zookeeper`; the `weir` binary
//! and a user's own binary share it ([`run_as_leader`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_core::config::ZooKeeperHaConfig;
use weir_core::JobId;
use weir_ha::{LeadershipEvent, ZooKeeperHaServices};
use weir_runtime::StopHandle;

use crate::error::ClusterError;
use crate::ha::LeaderServices;
use crate::jobmanager::ClusterDeployer;
use crate::jobmanager::JobManager;

/// How a job run under high availability ended here.
#[derive(Debug)]
pub enum LeaderOutcome<E> {
    /// This job manager ran the job to its end (or until stopped by hand): what the run
    /// returned.
    Ran(Result<(), E>),
    /// A job manager had recorded the job's end in ZooKeeper, with this status (FINISHED,
    /// FAILED): nothing was run.
    AlreadyEnded(String),
    /// Stopped by hand while standing by.
    Stopped,
}

/// Contends for leadership of job `job_name` in ZooKeeper as job manager `jm` (which must have
/// been started as a standby), and whenever it leads, calls `run` with the cluster deployer,
/// the leader's ZooKeeper services (the checkpoint id counter and completed checkpoint store,
/// written with its fencing token) and a stop handle. On losing leadership the handle is
/// cancelled — `run` must return promptly —, the task managers are dropped, and the job manager
/// contends again as a new contender, so that a term it wins later is a new one. When `run`
/// returns by itself, the job's end is recorded in ZooKeeper (unless `stop` was used: a job
/// stopped by hand is left to resume), so that no job manager runs it again.
pub fn run_as_leader<E>(
    jm: &JobManager,
    zk: &ZooKeeperHaConfig,
    job_name: &str,
    stop: &StopHandle,
    mut run: impl FnMut(&mut ClusterDeployer, &mut LeaderServices, &StopHandle) -> Result<(), E>,
) -> Result<LeaderOutcome<E>, ClusterError> {
    let services = ZooKeeperHaServices::connect(zk, JobId::from_name(job_name))
        .map_err(|e| ClusterError::Connection(format!("high availability: {e}")))?;
    let contender = jm.address().to_string();
    let mut election = services.leader_election(&contender);
    let mut events = election.subscribe();
    loop {
        tracing::info!(quorum = %zk.quorum, "standing by: waiting for leadership");
        let token = loop {
            if stop.is_stopped() {
                return Ok(LeaderOutcome::Stopped);
            }
            if let Some(token) = election.await_leadership(Duration::from_millis(200)) {
                break token;
            }
        };
        tracing::info!(%token, "granted leadership");
        // A leader that ended the job may have handed over to this one.
        match services.job_result() {
            Ok(Some(status)) => {
                tracing::info!(%status, "the job already ended (recorded in ZooKeeper); nothing to run");
                return Ok(LeaderOutcome::AlreadyEnded(status));
            }
            Ok(None) => {}
            Err(e) => {
                // ZooKeeper went away again: contend again once it is back.
                tracing::warn!(error = %e, "cannot read whether the job already ended");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        }
        jm.grant_leadership(token.epoch);
        let term = StopHandle::new();
        let revoked = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (term, revoked, stop) = (term.clone(), revoked.clone(), stop.clone());
            let events = events.clone();
            let epoch = token.epoch;
            std::thread::spawn(move || loop {
                match events.recv_timeout(Duration::from_millis(50)) {
                    Ok(LeadershipEvent::Revoked { token, reason }) if token.epoch == epoch => {
                        revoked.store(true, Ordering::SeqCst);
                        term.cancel();
                        tracing::error!(%reason, "lost leadership: cancelling the job here");
                        return;
                    }
                    Ok(_) | Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
                }
                if term.is_stopped() && !revoked.load(Ordering::SeqCst) {
                    return; // the term ended by itself
                }
                if stop.is_stopped() {
                    term.stop();
                }
            })
        };
        let mut leader = LeaderServices {
            services: services.clone(),
            token,
        };
        let result = run(&mut jm.deployer(), &mut leader, &term);
        let lost = revoked.load(Ordering::SeqCst);
        if lost {
            jm.revoke_leadership();
        } else {
            term.cancel(); // ends the watcher
        }
        let _ = watcher.join();
        if !lost {
            if !stop.is_stopped() {
                let status = if result.is_ok() { "FINISHED" } else { "FAILED" };
                if let Err(e) = services.record_job_result(&leader.token, status) {
                    tracing::warn!(error = %e, "could not record the job's end in ZooKeeper; a standby may run it again from its final checkpoint");
                }
            }
            return Ok(LeaderOutcome::Ran(result));
        }
        // Invariant: a leadership term never resumes. The election would grant this same
        // token again should the session reconnect with its znode intact, and the job would
        // then run a second time under the term it ran under before: its attempts, numbered
        // from 0 again, would reuse the generations (term and attempt) that task managers
        // already saw, whose data connections they refuse as stale or, worse, take for the
        // old attempt's. Resigning the znode and joining anew gives a later leadership a new,
        // greater epoch, whichever job manager wins it (as Curator's LeaderLatch does after
        // a suspended connection).
        tracing::warn!(
            "the job was cancelled here after losing leadership; joining the election again"
        );
        election.close();
        election = services.leader_election(&contender);
        events = election.subscribe();
    }
}
