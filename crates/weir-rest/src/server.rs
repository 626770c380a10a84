//! The REST server's life: bind (synchronously, so a taken port is an error at start), serve
//! on a thread of its own with a small tokio runtime beside the job, sample record rates once
//! a second, and stop.
//!
//! A job stopped through the API ends the process soon after; [`RestServer::linger`] keeps
//! answering until the caller has fetched the outcome of every operation it triggered (the
//! savepoint's location), so that `flink stop` sees its savepoint complete.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use weir_runtime::{JobHandle, RequestStatus};

use crate::config::RestConfig;
use crate::error::StartError;
use crate::routes::operations::outcome;
use crate::routes::{router, AppState, Shared};

/// How often record counters are sampled for rates.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A running REST server. Dropping it stops it.
pub struct RestServer {
    addr: SocketAddr,
    state: Shared,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RestServer {
    /// Starts serving `job` (whose graph has `max_parallelism` key groups) as `config` says.
    pub fn start(
        config: RestConfig,
        job: JobHandle,
        max_parallelism: u32,
    ) -> Result<RestServer, StartError> {
        config.validate()?;
        let wanted = config.socket_addr();
        let listener = std::net::TcpListener::bind(wanted).map_err(|source| StartError::Bind {
            addr: wanted,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(StartError::Runtime)?;
        let addr = listener.local_addr().map_err(StartError::Runtime)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .thread_name("weir-rest")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let state: Shared = Arc::new(AppState::new(job, config, max_parallelism));
        let app = router(state.clone());
        let (shutdown, stopped) = oneshot::channel::<()>();
        let sampled = state.clone();
        let thread = std::thread::Builder::new()
            .name("weir-rest".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "the REST server could not listen");
                            return;
                        }
                    };
                    let sampler = tokio::spawn(sample(sampled));
                    let served = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                    sampler.abort();
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the REST server stopped");
                    }
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(StartError::Runtime)?;
        tracing::info!(%addr, "REST API and dashboard listening");
        Ok(RestServer {
            addr,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port picked, if 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port/`: the dashboard, and the base of the API.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Waits (at most `max`) until every triggered operation that finished has had its
    /// outcome fetched by someone.
    pub fn linger(&self, max: Duration) {
        let deadline = Instant::now() + max;
        while Instant::now() < deadline {
            let job = &self.state.job;
            let waiting = self
                .state
                .operations
                .unreported()
                .into_iter()
                .filter(|r| outcome(job, *r) != RequestStatus::InProgress)
                .count();
            if waiting == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops serving: open requests finish, the thread ends (waited for at most 2 s).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Samples record counters for rates, and learns what finished operations wrote.
async fn sample(state: Shared) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state
            .rates
            .sample(&state.job.subtask_counts(), Instant::now());
        state.learn_all();
    }
}
