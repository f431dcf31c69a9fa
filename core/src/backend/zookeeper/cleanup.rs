//! The background cleanup task: deletes the lock nodes that must go (a lost lease's, a failed
//! release's, an abandoned waiter's) while their session lives, retrying after reconnects.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Inner;
use super::error::{ZkError, is_session_gone};
use crate::ids::OwnerId;
use crate::sync::unpoisoned;

pub(super) enum Cleanup {
    /// Delete this node while its session lives (retried after reconnects).
    Delete { generation: u64, path: String },
    /// The session (re)connected: retry, and delete the nodes of leases no longer held.
    Reconnected,
    /// A lease was lost: delete its node.
    Lost(OwnerId),
}

/// A node taken out of `nodes` to be deleted: if the future deleting it ends first (dropped by
/// a caller's timeout during a partition, or failing before it reached the server), the
/// cleanup task deletes it. A waiter's node left behind would reach the head of the queue and
/// block every later waiter for as long as the session lives.
pub(super) struct DeleteOnDrop<'a> {
    pub(super) inner: &'a Inner,
    /// `(generation, path)` of each node still to delete.
    pub(super) nodes: Vec<(u64, String)>,
}

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        for (generation, path) in self.nodes.drain(..) {
            self.inner.schedule_delete(generation, &path);
        }
    }
}

impl Inner {
    pub(super) fn schedule_delete(&self, generation: u64, path: &str) {
        let _ = self.cleanup.send(Cleanup::Delete {
            generation,
            path: path.to_string(),
        });
    }
}

/// Deletes nodes that must go, retrying while their session lives.
pub(super) async fn cleanup_task(weak: Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Cleanup>) {
    let mut pending: Vec<(u64, String)> = Vec::new();
    loop {
        let message = if pending.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(message) => message,
                Err(_) => Some(Cleanup::Reconnected),
            }
        };
        let Some(message) = message else { return };
        let Some(inner) = weak.upgrade() else { return };
        match message {
            Cleanup::Delete { generation, path } => pending.push((generation, path)),
            Cleanup::Lost(owner) => {
                let mut nodes = unpoisoned(&inner.nodes);
                if let Some(node) = nodes.get(&owner).filter(|n| n.held) {
                    pending.extend(node.paths());
                    nodes.remove(&owner);
                }
            }
            Cleanup::Reconnected => {
                // Leases that ended while the node could not be deleted (a release that
                // failed, a loss noticed by the deadline watchdog alone).
                let mut nodes = unpoisoned(&inner.nodes);
                let gone: Vec<OwnerId> = nodes
                    .iter()
                    .filter(|(_, n)| n.held && n.events.as_ref().is_some_and(|e| !e.is_held()))
                    .map(|(o, _)| *o)
                    .collect();
                for owner in gone {
                    if let Some(node) = nodes.remove(&owner) {
                        pending.extend(node.paths());
                    }
                }
            }
        }
        let Some(session) = inner.live_session() else {
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            continue;
        };
        drop(inner);
        pending.retain(|(generation, _)| *generation == session.generation);
        if pending.is_empty() || !session.is_connected() {
            continue;
        }
        let mut still = Vec::new();
        for (generation, path) in pending.drain(..) {
            match tokio::time::timeout(Duration::from_secs(5), session.client.delete(&path, None))
                .await
            {
                Ok(Ok(()) | Err(ZkError::NoNode)) => {}
                Ok(Err(e)) if is_session_gone(&e) => {}
                _ => still.push((generation, path)),
            }
        }
        pending = still;
    }
}
