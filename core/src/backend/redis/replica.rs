//! Replica acknowledgement on one Redis instance: while the master reports replicas, acquires
//! and renewals are followed by `WAIT 1` on a connection of their own. Whether it has replicas
//! is asked again during the Locker's life (replicas can be added at any time), not only at
//! connect.

use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::Mutex;

use super::conn::Conn;
use super::connect::{RedisSettings, manager_config};
use super::error::map_error;
use crate::clock::BootInstant;
use crate::error::Result;

/// How long an answer to "does the master have replicas?" is trusted.
const RECHECK: Duration = Duration::from_secs(5);

pub(crate) struct ReplicaAck {
    client: redis::Client,
    operation_timeout: Duration,
    /// The URL with its password redacted, for messages.
    url: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    checked: Option<BootInstant>,
    /// Present while the master reports replicas.
    conn: Option<ConnectionManager>,
}

impl ReplicaAck {
    pub(crate) fn new(client: redis::Client, operation_timeout: Duration, url: String) -> Self {
        ReplicaAck {
            client,
            operation_timeout,
            url,
            state: Mutex::default(),
        }
    }

    /// The acknowledgement connection while the master reports replicas, `None` while it
    /// reports none. Asks the master again (INFO replication on `main`) when the last answer
    /// is older than [`RECHECK`].
    pub(crate) async fn connection(
        &self,
        main: &Conn,
        settings: &RedisSettings,
    ) -> Result<Option<ConnectionManager>> {
        let mut state = self.state.lock().await;
        if state.checked.is_none_or(|at| at.elapsed() >= RECHECK) {
            let replicas =
                super::checks::count_replicas(&mut main.clone(), settings, &self.url).await?;
            if replicas == 0 {
                state.conn = None;
            } else if state.conn.is_none() {
                let conn = self
                    .client
                    .get_connection_manager_with_config(manager_config(self.operation_timeout))
                    .await
                    .map_err(|e| map_error(&format!("connecting to {}", self.url), e))?;
                state.conn = Some(conn);
            }
            state.checked = Some(BootInstant::now());
        }
        Ok(state.conn.clone())
    }
}
