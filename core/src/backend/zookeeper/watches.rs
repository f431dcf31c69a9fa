//! The watches: a held lease's watch on its own node (a forced release, the session's end), and
//! a waiter's watch on what its turn depends on: the node ahead of it in the queue, or for a
//! semaphore waiter with a lease node, the children of `leases` (a lease may have gone).

use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use zookeeper_client::{EventType, OneshotWatcher, WatchedEvent};

use super::error::{is_connection_loss, is_session_gone, map_error};
use super::{Inner, WatchTarget};
use crate::backend::{LeaseEvents, ReleaseWatch};
use crate::ids::OwnerId;
use crate::signal::LossReason;
use crate::sync::unpoisoned;

/// Waits for a one-shot watch in a task of its own, so whatever happens inside the client's
/// watcher stays contained; `None` if that task ends without an event.
fn spawn_watch(runtime: &Handle, watcher: OneshotWatcher) -> JoinHandle<WatchedEvent> {
    runtime.spawn(watcher.changed())
}

/// How long a lease is held before the watch on its own node is set. Most critical sections
/// are shorter, and skipping the watch for them saves a request, a watch notification and two
/// tasks per acquisition (the uncontended cycle against Curator's, bench/RESULTS.md). A node
/// deleted before the watch is set is seen when it is set (the `exists` finds it gone), so a
/// forced release is noticed within this delay at worst.
const OWN_NODE_WATCH_DELAY: Duration = Duration::from_millis(100);

/// Watches a held lease's own node: its deletion (a forced release) or the session's end
/// makes the lease lost within [`OWN_NODE_WATCH_DELAY`], instead of at the next renewal.
pub(super) async fn watch_own_node(
    weak: Weak<Inner>,
    path: String,
    czxid: i64,
    generation: u64,
    events: LeaseEvents,
) {
    tokio::time::sleep(OWN_NODE_WATCH_DELAY).await;
    loop {
        if !events.is_held() {
            return;
        }
        let (session, runtime) = {
            let Some(inner) = weak.upgrade() else { return };
            (inner.session_of(generation), inner.runtime.clone())
        };
        let Some(session) = session else {
            events.lost(LossReason::SessionExpired);
            return;
        };
        let result = session.client.check_and_watch_stat(&path).await;
        drop(session);
        match result {
            Ok((Some(stat), watcher)) if stat.czxid == czxid => {
                let Ok(event) = spawn_watch(&runtime, watcher).await else {
                    return;
                };
                match event.event_type {
                    EventType::NodeDeleted => {
                        if events.is_held()
                            && let Some(inner) = weak.upgrade()
                        {
                            inner.hook("zk_own_node_deleted");
                        }
                        events.lost(LossReason::TakenOver);
                        return;
                    }
                    EventType::Session => {
                        events.lost(LossReason::SessionExpired);
                        return;
                    }
                    _ => continue,
                }
            }
            Ok(_) => {
                events.lost(LossReason::TakenOver);
                return;
            }
            Err(e) if is_session_gone(&e) => {
                events.lost(LossReason::SessionExpired);
                return;
            }
            Err(e) => {
                if !is_connection_loss(&e) {
                    let e = map_error("exists", e);
                    flog!(warn, "watching a lock node failed, retrying: {e}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A waiter's watch on what its last attempt saw it wait for ([`WatchTarget`]).
pub(super) struct PredecessorWatch {
    inner: Weak<Inner>,
    owner: OwnerId,
    /// What is watched, and the task waiting for its event.
    armed: Option<(WatchTarget, JoinHandle<WatchedEvent>)>,
    /// The predecessor was already gone (or unknown) when arming: the next wait returns at once.
    fired: bool,
}

impl PredecessorWatch {
    /// `owner`'s watch, not armed yet.
    pub(super) fn new(inner: Weak<Inner>, owner: OwnerId) -> Self {
        PredecessorWatch {
            inner,
            owner,
            armed: None,
            fired: false,
        }
    }

    /// Watches what the last attempt saw the waiter wait for, unless it is watched already.
    pub(super) async fn arm(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            self.fired = true;
            return;
        };
        let node = unpoisoned(&inner.nodes).get(&self.owner).cloned();
        let Some((target, generation)) = node.and_then(|n| n.watch.map(|w| (w, n.generation)))
        else {
            self.fired = true;
            return;
        };
        if let Some((watched, task)) = &self.armed
            && *watched == target
            && !task.is_finished()
        {
            return;
        }
        if let Some((_, task)) = self.armed.take() {
            task.abort();
        }
        let Some(session) = inner.session_of(generation) else {
            self.fired = true;
            return;
        };
        let watcher = match &target {
            WatchTarget::Node(path) => match session.client.check_and_watch_stat(path).await {
                Ok((Some(_), watcher)) => Some(watcher),
                // Gone already (the watch for its creation is dropped), or the connection
                // failed: the waiter looks again at once.
                Ok((None, _)) | Err(_) => None,
            },
            WatchTarget::Children { path, seen } => {
                match session.client.list_and_watch_children(path).await {
                    // A lease went between the attempt and now: look again at once.
                    Ok((children, _)) if children.len() < *seen => None,
                    Ok((_, watcher)) => Some(watcher),
                    Err(_) => None,
                }
            }
        };
        match watcher {
            Some(watcher) => self.armed = Some((target, spawn_watch(&inner.runtime, watcher))),
            None => self.fired = true,
        }
    }
}

#[async_trait]
impl ReleaseWatch for PredecessorWatch {
    async fn wait(&mut self, max: Duration) {
        self.arm().await;
        if std::mem::take(&mut self.fired) {
            return;
        }
        let Some((_, task)) = self.armed.as_mut() else {
            tokio::time::sleep(max).await;
            return;
        };
        if tokio::time::timeout(max, task).await.is_ok() {
            self.armed = None;
            if let Some(inner) = self.inner.upgrade() {
                inner.hook("zk_watch_event");
            }
        }
    }
}

impl Drop for PredecessorWatch {
    fn drop(&mut self) {
        if let Some((_, task)) = self.armed.take() {
            task.abort();
        }
    }
}
