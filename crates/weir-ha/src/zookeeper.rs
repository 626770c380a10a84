//! A blocking handle on a ZooKeeper session, for the job manager's plain threads.
//!
//! `zookeeper-client` is async; every call here runs on one small process-wide tokio runtime
//! and blocks the calling thread until ZooKeeper answers or the operation timeout passes
//! (`high-availability.zookeeper.client.connection-timeout`). So a ZooKeeper that is down or
//! restarting turns into prompt errors, never a hang:
//!
//! - while the session is between connections a call fails at once with
//!   [`HaError::Unavailable`] (nothing was sent);
//! - a write whose connection broke after it was sent fails with [`HaError::OutcomeUnknown`];
//! - a session that ended (expired, closed by the server) is replaced by a new one on the next
//!   call, so calls succeed again once ZooKeeper is back. Ephemeral znodes of the old session
//!   are gone with it, and with them any leadership and fencing token it held.
//!
//! The client reconnects by itself within a session: after a short ZooKeeper restart (its data
//! kept) the same session, its ephemeral znodes and its fencing token carry on.
//!
//! Never call this from inside an async runtime: it blocks.

use crate::fencing::{FencedWrite, WriteFailure, WriteOp};
use crate::HaError;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::{watch, Mutex as AsyncMutex};
use weir_core::config::ZooKeeperHaConfig;
use zookeeper_client as zk;

/// The runtime every ZooKeeper session and call of the process runs on.
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-ha-zookeeper")
            .enable_all()
            .build()
            .expect("start the ZooKeeper client runtime")
    })
}

/// A handle on one ZooKeeper session (replaced by a new session when it ends). Cloning shares
/// the session.
#[derive(Clone, Debug)]
pub struct ZooKeeper {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    quorum: String,
    session_timeout: Duration,
    operation_timeout: Duration,
    client: AsyncMutex<Option<zk::Client>>,
    closed: watch::Sender<bool>,
}

impl ZooKeeper {
    /// Connects to `quorum` (`host:port,…`) with a session of `session_timeout`; each call
    /// (and the connection itself) gives up after `operation_timeout`.
    pub fn connect(
        quorum: &str,
        session_timeout: Duration,
        operation_timeout: Duration,
    ) -> Result<ZooKeeper, HaError> {
        let zk = ZooKeeper {
            inner: Arc::new(Inner {
                quorum: quorum.to_string(),
                session_timeout,
                operation_timeout,
                client: AsyncMutex::new(None),
                closed: watch::Sender::new(false),
            }),
        };
        // Connect now: a wrong quorum fails at start, not at the first checkpoint.
        block_on(zk.client("connect"))?;
        Ok(zk)
    }

    /// Connects as the `high-availability.zookeeper.*` options say.
    pub fn from_config(config: &ZooKeeperHaConfig) -> Result<ZooKeeper, HaError> {
        Self::connect(
            &config.quorum,
            config.session_timeout,
            config.connection_timeout,
        )
    }

    pub fn quorum(&self) -> &str {
        &self.inner.quorum
    }

    /// How long one call may take before it fails.
    pub fn operation_timeout(&self) -> Duration {
        self.inner.operation_timeout
    }

    /// The current session's id, if a session is open.
    pub fn session_id(&self) -> Option<i64> {
        self.current().map(|c| c.session_id().0)
    }

    /// Whether the session is connected now.
    pub fn is_connected(&self) -> bool {
        self.current()
            .is_some_and(|c| c.state() == zk::SessionState::SyncConnected)
    }

    /// Closes the session: its ephemeral znodes (a leader's contender znode) go at once, so
    /// a standby takes over without waiting for the session timeout. Every later call fails
    /// with [`HaError::Closed`].
    pub fn close(&self) {
        self.inner.closed.send_replace(true);
        let client = block_on(async { self.inner.client.lock().await.take() });
        if let Some(client) = client {
            tracing::info!(session = %client.session_id(), quorum = %self.inner.quorum, "closing the ZooKeeper session");
        }
    }

    /// A live client: the current session's, or a new session's if it ended.
    pub(crate) async fn client(&self, operation: &str) -> Result<zk::Client, HaError> {
        let closed = || HaError::Closed {
            quorum: self.inner.quorum.clone(),
            operation: operation.to_string(),
        };
        if *self.inner.closed.borrow() {
            return Err(closed());
        }
        let mut slot = self.inner.client.lock().await;
        if *self.inner.closed.borrow() {
            return Err(closed());
        }
        if let Some(client) = slot.as_ref() {
            let state = client.state();
            if !state.is_terminated() {
                return Ok(client.clone());
            }
            tracing::warn!(session = %client.session_id(), %state, quorum = %self.inner.quorum,
                "ZooKeeper session ended; opening a new one");
            *slot = None;
        }
        let connect = zk::Client::connector()
            .with_session_timeout(self.inner.session_timeout)
            .with_fail_eagerly()
            .connect(&self.inner.quorum);
        let client = tokio::time::timeout(self.inner.operation_timeout, connect)
            .await
            .map_err(|_| {
                self.unavailable(
                    operation,
                    format!("no session within {:?}", self.inner.operation_timeout),
                )
            })?
            .map_err(|e| self.error(operation, false, e))?;
        tracing::info!(session = %client.session_id(), quorum = %self.inner.quorum,
            timeout_ms = client.session_timeout().as_millis() as u64, "ZooKeeper session opened");
        *slot = Some(client.clone());
        Ok(client)
    }

    fn current(&self) -> Option<zk::Client> {
        block_on(async { self.inner.client.lock().await.clone() })
    }

    /// Resolves when the handle is closed.
    pub(crate) fn closed_signal(&self) -> watch::Receiver<bool> {
        self.inner.closed.subscribe()
    }

    /// Runs one ZooKeeper call `f` on a connected session within the operation timeout.
    /// `write` says whether a lost connection leaves its outcome unknown.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &str,
        write: bool,
        f: F,
    ) -> Result<T, HaError>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        let client = self.client(operation).await?;
        let state = client.state();
        if state != zk::SessionState::SyncConnected {
            // Nothing is sent while the session reconnects: failing now beats queueing a
            // request that might be applied long after its caller gave up.
            return Err(self.unavailable(operation, format!("session {state}")));
        }
        match tokio::time::timeout(self.inner.operation_timeout, f(client)).await {
            Ok(result) => result.map_err(|e| self.error(operation, write, e)),
            Err(_) => {
                let reason = format!("no answer within {:?}", self.inner.operation_timeout);
                Err(if write {
                    self.outcome_unknown(operation, reason)
                } else {
                    self.unavailable(operation, reason)
                })
            }
        }
    }

    /// [`ZooKeeper::call`], blocking.
    pub(crate) fn call_blocking<T, F, Fut>(
        &self,
        operation: &str,
        write: bool,
        f: F,
    ) -> Result<T, HaError>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        block_on(self.call(operation, write, f))
    }

    /// Creates the persistent znode `path` and its missing ancestors.
    pub(crate) fn ensure_path(&self, path: &str) -> Result<(), HaError> {
        let operation = format!("create {path}");
        let path = path.to_string();
        self.call_blocking(&operation, false, |c| async move {
            c.mkdir(
                &path,
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
        })
    }

    /// A znode's data and version, or `None` if it does not exist.
    pub(crate) fn get_data(&self, path: &str) -> Result<Option<(Vec<u8>, i32)>, HaError> {
        let operation = format!("read {path}");
        let path = path.to_string();
        self.call_blocking(&operation, false, |c| async move {
            match c.get_data(&path).await {
                Ok((data, stat)) => Ok(Some((data, stat.version))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// The names of a znode's children (empty if it does not exist).
    pub(crate) fn children(&self, path: &str) -> Result<Vec<String>, HaError> {
        let operation = format!("list {path}");
        let path = path.to_string();
        self.call_blocking(&operation, false, |c| async move {
            match c.list_children(&path).await {
                Ok(children) => Ok(children),
                Err(zk::Error::NoNode) => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        })
    }

    /// Applies `write.ops` atomically, and only while `write.token`'s znode exists.
    // Invariant: only the leader writes. Every write of the counter and the store goes
    // through here, and ZooKeeper refuses the whole multi-operation once the token's znode is
    // gone, whatever its writer believes.
    pub(crate) fn fenced_write(&self, write: &FencedWrite<'_>) -> Result<(), WriteFailure> {
        let token_znode = write.token.znode.clone();
        let ops = write.ops.clone();
        let result = self.call_blocking(&write.operation, true, |c| async move {
            let mut multi = c.new_multi_writer();
            multi.add_check_version(&token_znode, -1)?;
            let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            for op in &ops {
                match op {
                    WriteOp::Create { path, data } => multi.add_create(path, data, &persistent)?,
                    WriteOp::SetData {
                        path,
                        data,
                        version,
                    } => multi.add_set_data(path, data, Some(*version))?,
                    WriteOp::Delete { path } => multi.add_delete(path, None)?,
                }
            }
            Ok(multi.commit().await)
        })?;
        match result {
            Ok(_) => Ok(()),
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: zk::Error::NoNode,
            }) => Err(WriteFailure::Ha(HaError::Fenced {
                operation: write.operation.clone(),
                token: write.token.clone(),
            })),
            Err(zk::MultiWriteError::OperationFailed { index: 0, source }) => {
                Err(self.error(&write.operation, true, source).into())
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) => Err(WriteFailure::Op {
                index: index - 1,
                error: source,
            }),
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                Err(self.error(&write.operation, true, source).into())
            }
        }
    }

    /// Turns a ZooKeeper error into an [`HaError`] for `operation`.
    pub(crate) fn error(&self, operation: &str, write: bool, e: zk::Error) -> HaError {
        let reason = e.to_string();
        match e {
            zk::Error::ConnectionLoss | zk::Error::Timeout if write => {
                self.outcome_unknown(operation, reason)
            }
            zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::SessionExpired
            | zk::Error::SessionMoved
            | zk::Error::ClientClosed
            | zk::Error::Throttled
            | zk::Error::NotReadOnly => self.unavailable(operation, reason),
            _ => HaError::ZooKeeper {
                quorum: self.inner.quorum.clone(),
                operation: operation.to_string(),
                reason,
            },
        }
    }

    pub(crate) fn unavailable(&self, operation: &str, reason: String) -> HaError {
        HaError::Unavailable {
            quorum: self.inner.quorum.clone(),
            operation: operation.to_string(),
            reason,
        }
    }

    fn outcome_unknown(&self, operation: &str, reason: String) -> HaError {
        HaError::OutcomeUnknown {
            quorum: self.inner.quorum.clone(),
            operation: operation.to_string(),
            reason,
        }
    }
}

/// Runs `future` to completion on the ZooKeeper runtime, blocking the calling thread.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}
