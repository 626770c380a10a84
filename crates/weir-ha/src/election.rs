//! Leader election among a job's job managers, with fencing tokens.
//!
//! Each contender creates an ephemeral sequential znode under `<root>/<job-id>/leader` (the
//! Curator-compatible `_c_<uuid>-latch-<seq>`); the lowest sequence leads and every other
//! contender watches its predecessor, so one deletion wakes one contender. The leader's
//! [`FencingToken`] is its znode and epoch (the sequence number, greater for every later
//! leader); the counter and the store write only while that znode exists.
//!
//! Leadership ends **at once**, with a [`LeadershipEvent::Revoked`]:
//! - when the connection to ZooKeeper drops: the session may still be alive, but a job
//!   manager that cannot hear ZooKeeper cannot know it still leads. If the same session
//!   reconnects with its znode intact, leadership is granted again with the same token;
//! - when the session expires or is closed: the znode is gone, and a standby takes over. The
//!   job manager then joins again with a new session, as a standby, with a new token;
//! - when the leader resigns ([`LeaderElection::close`]), or its znode is deleted by hand.
//!
//! Revocation is a prompt hint for the job manager to stop acting; safety does not depend on
//! it, because ZooKeeper itself refuses a stale leader's writes ([`crate::fencing`]).
//!
//! ```no_run
//! # use weir_ha::*;
//! # use std::time::Duration;
//! # fn run(zk: &ZooKeeper, znodes: &JobZnodes) {
//! let election = LeaderElection::start(zk, znodes, "jobmanager-1:6123");
//! let events = election.subscribe();
//! if let Some(token) = election.await_leadership(Duration::from_secs(30)) {
//!     // Recover the store and the counter with `token`, then run the job until
//!     // `events` says LeadershipEvent::Revoked.
//! }
//! # }
//! ```

use crate::znodes::LATCH_NAME;
use crate::zookeeper::{block_on, runtime};
use crate::{FencingToken, HaError, JobZnodes, ZooKeeper};
use crossbeam_channel::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use zookeeper_client as zk;

/// A change of leadership, as seen by one contender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeadershipEvent {
    /// This contender leads; write with this token.
    Granted(FencingToken),
    /// This contender no longer leads: stop acting for the job now.
    Revoked { token: FencingToken, reason: String },
}

/// Who leads a job, as ZooKeeper says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// What the leader announced when it joined (its address, for instance).
    pub contender: String,
    pub epoch: u64,
}

/// One job manager's part in the election of its job's leader. It contends in the background
/// from [`LeaderElection::start`] until [`LeaderElection::close`] or drop.
#[derive(Debug)]
pub struct LeaderElection {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    timeout: Duration,
}

#[derive(Debug)]
struct Shared {
    contender: String,
    znodes: JobZnodes,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    leader: Option<FencingToken>,
    subscribers: Vec<Sender<LeadershipEvent>>,
}

impl LeaderElection {
    /// Joins the election of `znodes`' job as `contender` (shown to others by
    /// [`LeaderElection::current_leader`]). Never fails: while ZooKeeper is unreachable the
    /// contender keeps trying in the background.
    pub fn start(zk: &ZooKeeper, znodes: &JobZnodes, contender: &str) -> LeaderElection {
        let shared = Arc::new(Shared {
            contender: contender.to_string(),
            znodes: znodes.clone(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let (stop, stopped) = watch::channel(false);
        let task = runtime().spawn(contend_until_stopped(zk.clone(), shared.clone(), stopped));
        LeaderElection {
            shared,
            stop,
            task: Some(task),
            timeout: zk.operation_timeout(),
        }
    }

    /// Whether this contender leads now.
    pub fn is_leader(&self) -> bool {
        self.shared.lock().leader.is_some()
    }

    /// The token to write with, while this contender leads.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.shared.lock().leader.clone()
    }

    /// Every later change of leadership; a [`LeadershipEvent::Granted`] first if this
    /// contender leads already.
    pub fn subscribe(&self) -> Receiver<LeadershipEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut state = self.shared.lock();
        if let Some(token) = &state.leader {
            let _ = tx.send(LeadershipEvent::Granted(token.clone()));
        }
        state.subscribers.push(tx);
        rx
    }

    /// Waits until this contender leads, at most `timeout`.
    pub fn await_leadership(&self, timeout: Duration) -> Option<FencingToken> {
        self.shared
            .wait_until(timeout, |s| s.leader.is_some())
            .leader
            .clone()
    }

    /// Waits until this contender does not lead, at most `timeout`; true if it does not.
    pub fn await_revocation(&self, timeout: Duration) -> bool {
        self.shared
            .wait_until(timeout, |s| s.leader.is_none())
            .leader
            .is_none()
    }

    /// The job's leader as ZooKeeper says: the contender with the lowest znode, if any.
    pub fn current_leader(
        zk: &ZooKeeper,
        znodes: &JobZnodes,
    ) -> Result<Option<LeaderInfo>, HaError> {
        let dir = znodes.leader_dir();
        let lowest = zk
            .children(&dir)?
            .into_iter()
            .filter_map(|name| JobZnodes::parse_epoch(&name).map(|epoch| (epoch, name)))
            .min();
        let Some((epoch, name)) = lowest else {
            return Ok(None);
        };
        // Gone between the listing and the read: the next contender is about to lead.
        let Some((data, _)) = zk.get_data(&format!("{dir}/{name}"))? else {
            return Ok(None);
        };
        Ok(Some(LeaderInfo {
            contender: String::from_utf8_lossy(&data).into_owned(),
            epoch,
        }))
    }

    /// Resigns: leadership is revoked, the contender znode deleted (a standby takes over at
    /// once) and the election left. Returns when done, or after the operation timeout.
    pub fn close(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let wait = self.timeout + Duration::from_secs(1);
            let _ = block_on(async { tokio::time::timeout(wait, task).await });
        }
    }
}

impl Drop for LeaderElection {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-changed: every change is
        // one assignment. Carry on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&State) -> bool,
    ) -> MutexGuard<'_, State> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state
    }

    fn grant(&self, token: &FencingToken) {
        let mut state = self.lock();
        if state.leader.as_ref() == Some(token) {
            return;
        }
        tracing::info!(contender = %self.contender, %token, "granted leadership");
        state.leader = Some(token.clone());
        let event = LeadershipEvent::Granted(token.clone());
        state.subscribers.retain(|s| s.send(event.clone()).is_ok());
        self.changed.notify_all();
    }

    fn revoke(&self, reason: &str) {
        let mut state = self.lock();
        let Some(token) = state.leader.take() else {
            return;
        };
        tracing::warn!(contender = %self.contender, %token, %reason, "leadership revoked");
        let event = LeadershipEvent::Revoked {
            token,
            reason: reason.to_string(),
        };
        state.subscribers.retain(|s| s.send(event.clone()).is_ok());
        self.changed.notify_all();
    }
}

/// How one round of contention ended.
enum Ended {
    Stopped,
    /// Lost the znode or the session; join again.
    Lost,
}

async fn contend_until_stopped(
    zk: ZooKeeper,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut closed = zk.closed_signal();
    let mut backoff = Duration::from_millis(50);
    loop {
        if *stop.borrow() || *closed.borrow() {
            break;
        }
        match contend(&zk, &shared, &mut stop, &mut closed).await {
            Ok(Ended::Stopped) => break,
            Ok(Ended::Lost) => backoff = Duration::from_millis(50),
            Err(e) => {
                shared.revoke(&e.to_string());
                tracing::warn!(contender = %shared.contender, error = %e, "cannot take part in the leader election; retrying");
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => {}
            _ = closed.changed() => {}
        }
    }
    shared.revoke("left the leader election");
}

/// One round: join with the current session, wait to lead, lead until the znode or the
/// session is lost or the election is stopped.
async fn contend(
    zk: &ZooKeeper,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    closed: &mut watch::Receiver<bool>,
) -> Result<Ended, HaError> {
    let operation = "join the leader election";
    let client = zk.client(operation).await?;
    let mut session = client.state_watcher();
    let dir = shared.znodes.leader_dir();
    let refused = |e: zk::Error| zk.error(operation, true, e);
    let prefix = zk::LockPrefix::new_curator(&dir, LATCH_NAME).map_err(refused)?;
    let options = zk::LockOptions::new(zk::Acls::anyone_all())
        .with_ancestor_options(zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))
        .map_err(refused)?;
    let lock = tokio::select! {
        lock = client.lock(prefix, shared.contender.as_bytes(), options) => lock.map_err(refused)?,
        _ = session_ended(&mut session) => return Ok(Ended::Lost),
        _ = stop.changed() => {
            withdraw(&client, &dir, zk.operation_timeout()).await;
            return Ok(Ended::Stopped);
        }
        _ = closed.changed() => return Ok(Ended::Stopped),
    };
    let lock = lock.into_owned();
    let znode = lock.lock_path().to_string();
    let token = FencingToken {
        epoch: JobZnodes::parse_epoch(&znode).unwrap_or(0),
        session_id: client.session_id().0,
        znode: znode.clone(),
    };
    loop {
        // Every pass looks at the session's state now, so no transition goes unnoticed.
        let state = session.state();
        if state.is_terminated() {
            shared.revoke(&format!("ZooKeeper session {state}"));
            return Ok(Ended::Lost);
        }
        // Leadership only while connected, with the znode confirmed and watched.
        let mut watch = None;
        if state == zk::SessionState::SyncConnected {
            let check = client.check_and_watch_stat(&znode);
            match tokio::time::timeout(zk.operation_timeout(), check).await {
                Ok(Ok((Some(_), watcher))) => {
                    shared.grant(&token);
                    watch = Some(watcher);
                }
                Ok(Ok((None, _))) => {
                    shared.revoke("the leader znode was deleted");
                    return Ok(Ended::Lost);
                }
                Ok(Err(e)) => shared.revoke(&format!("cannot confirm the leader znode: {e}")),
                Err(_) => {
                    shared.revoke("cannot confirm the leader znode: no answer from ZooKeeper")
                }
            }
        } else {
            shared.revoke(&format!("connection to ZooKeeper lost (session {state})"));
        }
        // Connected but unconfirmed: try again shortly; disconnected: wait for the session.
        let retry = watch.is_none() && state == zk::SessionState::SyncConnected;
        let znode_changed = async {
            match watch {
                Some(watcher) => Some(watcher.changed().await),
                None if retry => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    None
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = znode_changed => {
                if event.is_some_and(|e| e.event_type == zk::EventType::NodeDeleted) {
                    shared.revoke("the leader znode was deleted");
                    return Ok(Ended::Lost);
                }
            }
            _ = session.changed() => {}
            _ = stop.changed() => {
                shared.revoke("resigned");
                let delete = lock.client().delete(&znode, None);
                let _ = tokio::time::timeout(zk.operation_timeout(), delete).await;
                return Ok(Ended::Stopped);
            }
            _ = closed.changed() => {
                shared.revoke("the ZooKeeper connection was closed");
                return Ok(Ended::Stopped);
            }
        }
    }
}

/// Deletes the contender znodes this session holds in `dir` (the election's queue), after a
/// join given up midway. The client deletes an abandoned znode in the background, but not in
/// every case (one given up while being created can be missed), and a znode of a live session
/// left in the queue would hold a place ahead of every later join, which would then never lead.
// Invariant: only one election of a job contends per session at a time (a job manager closes
// one before it starts the next), so every znode of this session in the queue is this one's.
async fn withdraw(client: &zk::Client, dir: &str, timeout: Duration) {
    let session = client.session_id().0;
    let work = async {
        let Ok(children) = client.list_children(dir).await else {
            return;
        };
        for child in children {
            let path = format!("{dir}/{child}");
            if let Ok(Some(stat)) = client.check_stat(&path).await {
                if stat.ephemeral_owner == session {
                    let _ = client.delete(&path, None).await;
                }
            }
        }
    };
    let _ = tokio::time::timeout(timeout, work).await;
}

/// Resolves when the session ends for good (expired, closed, failed authentication).
async fn session_ended(session: &mut zk::StateWatcher) {
    while !session.peek_state().is_terminated() {
        session.changed().await;
    }
}
