//! The replication connection: `START_REPLICATION` on the slot with `pgoutput`, read by a task
//! on the source's runtime into a bounded queue the task loop drains without blocking. The
//! position acknowledged to the server (the slot's confirmed position) is only ever the one
//! the source hands over after a checkpoint completed.

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent};
use tokio::sync::{mpsc, watch};

use crate::error::PgError;
use crate::url::PgUrl;

/// Session settings that make text values parse the same way everywhere.
pub(crate) const SESSION_OPTIONS: &str =
    "-c DateStyle=ISO -c TimeZone=UTC -c extra_float_digits=3 -c bytea_output=hex";

/// What the replication task hands the task loop.
pub(crate) enum StreamEvent {
    Begin { xid: u32 },
    Data(bytes::Bytes),
    Commit { end_lsn: u64 },
    Failed(String),
}

/// The running replication stream of one source subtask.
pub(crate) struct ReplicationStream {
    pub events: mpsc::Receiver<StreamEvent>,
    acknowledge: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl ReplicationStream {
    /// Starts streaming `publication` from `slot` at `start`; acknowledges `start` at first.
    pub(crate) async fn start(
        url: &PgUrl,
        slot: &str,
        publication: &str,
        start: u64,
    ) -> Result<ReplicationStream, PgError> {
        let config = ReplicationConfig::new(
            url.host.clone(),
            url.user.clone(),
            url.password().to_string(),
            url.database.clone(),
            slot.to_string(),
            publication.to_string(),
        )
        .with_port(url.port)
        .with_start_lsn(Lsn(start))
        .with_ack_lsn(Lsn(start))
        .with_status_interval(std::time::Duration::from_secs(1))
        .with_options(SESSION_OPTIONS)
        .with_application_name("weir-cdc");
        let mut client =
            ReplicationClient::connect(config)
                .await
                .map_err(|e| PgError::Connection {
                    url: url.to_string(),
                    message: format!("cannot start replication from slot {slot}: {e}"),
                })?;
        let (events_tx, events) = mpsc::channel(4096);
        let (acknowledge, mut acknowledged) = watch::channel(start);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    event = client.recv() => {
                        let event = match event {
                            Ok(Some(ReplicationEvent::Begin { xid, .. })) => StreamEvent::Begin { xid },
                            Ok(Some(ReplicationEvent::XLogData { data, .. })) => StreamEvent::Data(data),
                            Ok(Some(ReplicationEvent::Commit { end_lsn, .. })) => {
                                StreamEvent::Commit { end_lsn: end_lsn.0 }
                            }
                            Ok(Some(_)) => continue,
                            Ok(None) => StreamEvent::Failed("the server ended the replication stream".into()),
                            Err(e) => StreamEvent::Failed(e.to_string()),
                        };
                        let failed = matches!(event, StreamEvent::Failed(_));
                        if events_tx.send(event).await.is_err() || failed {
                            break;
                        }
                    }
                    changed = acknowledged.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let lsn = *acknowledged.borrow_and_update();
                        client.update_applied_lsn(Lsn(lsn));
                    }
                }
            }
            client.stop();
        });
        Ok(ReplicationStream {
            events,
            acknowledge,
            task,
        })
    }

    /// Tells the server that everything up to `lsn` is durable downstream: it may discard the
    /// WAL before it.
    pub(crate) fn acknowledge(&self, lsn: u64) {
        self.acknowledge.send_if_modified(|current| {
            if lsn > *current {
                *current = lsn;
                true
            } else {
                false
            }
        });
    }
}

impl Drop for ReplicationStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
