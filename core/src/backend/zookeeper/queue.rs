//! The lock queue of the mutex and of the read-write lock (the nodes in the name's folder):
//! taking a place in it (making the folder and our node), finding our node again, reading where
//! it stands and what the queue holds, and leaving it (deleting our nodes, also a semaphore's).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{Acls, CreateMode};

use super::cleanup::DeleteOnDrop;
use super::error::{
    CONNECTION_KEPT_DROPPING, QUEUE_KEPT_CHANGING, Retry, ZkError, is_connection_loss,
    is_session_gone, retry,
};
use super::layout::{Position, leases_folder, locks_folder};
use super::session::Session;
use super::{Inner, Node, WatchTarget, layout, rwlock};
use crate::backend::{AcquireRequest, Attempt, LockInfo};
use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::sync::unpoisoned;

/// Where `path` stands in the mutex queue that `children` (its folder's listing) make.
pub(super) fn position_in(children: Vec<String>, folder: &str, path: &str) -> Position {
    let queue = layout::queue(children);
    let me = path.rsplit('/').next().unwrap_or(path);
    match queue.iter().position(|(_, name)| name == me) {
        None => Position::Missing,
        Some(0) => Position::First,
        Some(i) => Position::Behind(format!("{folder}/{}", queue[i - 1].1)),
    }
}

/// The label of a node of `mode` in the name's folder (before the sequence).
fn label_of(mode: LockMode) -> &'static str {
    layout::mark_of(mode).unwrap_or(layout::LOCK_LABEL)
}

/// Where `path` stands among its folder's nodes of `mode`'s kind.
fn position_of(mode: LockMode, children: Vec<String>, folder: &str, path: &str) -> Position {
    match mode {
        LockMode::Read | LockMode::Write => rwlock::position_in(&children, folder, path),
        LockMode::Exclusive | LockMode::Permit { .. } => position_in(children, folder, path),
    }
}

/// The lease's client deadline counts from the heartbeat's proof: waits until that leaves it
/// at least a heartbeat gap (a session idle for long, or new).
pub(super) async fn wait_for_fresh_proof(session: &Session) {
    let proof_needed =
        BootInstant::now().saturating_sub(session.timeout.saturating_sub(
            drift_margin(session.timeout, Duration::ZERO) + session.heartbeat.gap(),
        ));
    session.heartbeat.proven_since(proof_needed).await;
}

impl Inner {
    /// One attempt to take a mutex, or a read-write lock's read or write side: joins the queue
    /// (or keeps our place in it) and holds if our node's position allows (the mutex: first; see
    /// [`rwlock`] for the other two); else remembers the node to watch. A new node first checks
    /// that the name is not in use as another kind ([`kinds`](super::kinds)).
    pub(super) async fn try_acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let session = self.session().await?;
        let folder = layout::lock_folder(&self.settings.root, req.name);
        for _ in 0..3 {
            let (path, children) = match self.known_node(&session, req) {
                Some(node) => {
                    let children = self
                        .list(&session, &folder, "listing the lock queue")
                        .await?;
                    (node.path, children)
                }
                None => {
                    let (path, czxid, listed) = self
                        .create_node(&session, &folder, label_of(req.mode), req)
                        .await?;
                    if czxid <= 0 {
                        let _ = self.delete_own(&session, &path).await;
                        return Err(Error::internal(
                            "the ZooKeeper server answered a create without its stat",
                        ));
                    }
                    let sequence = match req.mode {
                        LockMode::Read | LockMode::Write => {
                            layout::rw_node(&path).map(|n| n.sequence)
                        }
                        _ => layout::sequence(&path),
                    };
                    if sequence.is_none() {
                        // ZooKeeper's sequence is a signed 32-bit counter per folder: past 2^31
                        // creates it goes negative, and the queue order with it. Such a node
                        // never holds (nobody counts it); say so instead of queueing forever.
                        let _ = self.delete_own(&session, &path).await;
                        return Err(Error::backend(format!(
                            "lock {:?}: ZooKeeper's sequence counter of its folder {folder} \
                             has passed 2^31 and wrapped; no new node can queue there. Delete \
                             the folder once nobody holds or waits (it is made again, counting \
                             from 0)",
                            req.name.as_str()
                        )));
                    }
                    let children = match listed {
                        Some(children) => Some(children),
                        None => {
                            self.list(&session, &folder, "listing the lock queue")
                                .await?
                        }
                    };
                    if let Some(children) = &children {
                        self.refuse_other_kind(
                            &session,
                            req.name,
                            &folder,
                            children,
                            req.mode.kind(),
                            &[&path],
                        )
                        .await?;
                    }
                    self.remember(&session, req, &path, czxid);
                    (path, children)
                }
            };
            let position = match children {
                Some(children) => position_of(req.mode, children, &folder, &path),
                None => Position::Missing,
            };
            let acquired = {
                let mut nodes = unpoisoned(&self.nodes);
                match position {
                    Position::First => match nodes.get_mut(&req.owner) {
                        Some(node) => {
                            node.held = true;
                            node.watch = None;
                            Some(node.czxid as u64)
                        }
                        // Removed meanwhile (the session ended): queue again.
                        None => None,
                    },
                    Position::Behind(watched) => {
                        if let Some(node) = nodes.get_mut(&req.owner) {
                            node.watch = Some(WatchTarget::Node(watched));
                        }
                        return Ok(Attempt::Held { expires_in: None });
                    }
                    Position::Missing => {
                        // Deleted by somebody while we waited: take a new place at the end.
                        nodes.remove(&req.owner);
                        None
                    }
                }
            };
            if let Some(token) = acquired {
                wait_for_fresh_proof(&session).await;
                return Ok(Attempt::Acquired {
                    token,
                    origin: None,
                });
            }
        }
        Err(Error::unavailable(format!(
            "lock {:?}: our queue node kept disappearing",
            req.name.as_str()
        )))
    }

    /// `req.owner`'s node made on the live session, if any; one made on a session that ended
    /// is gone with it, and forgotten here.
    pub(super) fn known_node(&self, session: &Session, req: &AcquireRequest<'_>) -> Option<Node> {
        let mut nodes = unpoisoned(&self.nodes);
        match nodes.get(&req.owner) {
            Some(node) if node.generation == session.generation => Some(node.clone()),
            Some(_) => {
                nodes.remove(&req.owner);
                None
            }
            None => None,
        }
    }

    /// Records `req.owner`'s new node (waiting).
    pub(super) fn remember(
        &self,
        session: &Session,
        req: &AcquireRequest<'_>,
        path: &str,
        czxid: i64,
    ) {
        let node = Node {
            path: path.to_string(),
            czxid,
            generation: session.generation,
            held: false,
            watch: None,
            queue: None,
            events: None,
            heartbeat: session.heartbeat.clone(),
        };
        unpoisoned(&self.nodes).insert(req.owner, node);
        session.heartbeat.wake.notify_one();
    }

    /// Creates the lock's folder (or a semaphore's) and any missing ancestor as CONTAINER
    /// nodes.
    pub(super) async fn make_folder(&self, session: &Session, folder: &str) -> Result<()> {
        let acls = self.settings.folder_acls();
        let options = &CreateMode::Container.with_acls(Acls::new(&acls));
        retry(
            "creating the lock folder",
            CONNECTION_KEPT_DROPPING,
            |_| async move {
                match session.client.mkdir(folder, options).await {
                    Ok(()) | Err(ZkError::NodeExists) => Ok(()),
                    Err(ZkError::NoNode) => Err(Retry::Fail(Error::backend(format!(
                        "the ZooKeeper chroot {:?} does not exist any more",
                        self.settings.chroot
                    )))),
                    Err(e) => Err(Retry::zk("creating the lock folder", e)),
                }
            },
        )
        .await
    }

    /// Creates `owner`'s node; returns its path and czxid, and the folder's listing taken with
    /// it. The first create is sent together with the listing, without waiting for its answer:
    /// ZooKeeper answers a session's requests in the order sent, so the listing already holds
    /// the new node, and an uncontended acquire takes one round trip (Curator's recipe waits for
    /// the create first). The listing is `None` when that first create failed (a retried create
    /// is sent alone) or the listing itself failed: the caller lists again. A create whose reply
    /// was lost is found by the owner id in the name instead of being made twice.
    pub(super) async fn create_node(
        &self,
        session: &Session,
        folder: &str,
        label: &str,
        req: &AcquireRequest<'_>,
    ) -> Result<(String, i64, Option<Vec<String>>)> {
        let prefix = &layout::node_prefix(folder, req.owner, label);
        let data = &layout::node_data(req.holder);
        let acls = self.settings.node_acls();
        let options = &CreateMode::EphemeralSequential.with_acls(Acls::new(&acls));
        retry(
            "creating the lock node",
            CONNECTION_KEPT_DROPPING,
            |attempt| async move {
                // Both are queued on the session when called, in this order.
                let create = session.client.create(prefix, data, options);
                let (created, listed) = if attempt == 0 {
                    let (created, listed) =
                        tokio::join!(create, session.client.list_children(folder));
                    (created, listed.ok())
                } else {
                    (create.await, None)
                };
                match created {
                    Ok((stat, sequence)) => Ok((format!("{prefix}{sequence}"), stat.czxid, listed)),
                    Err(ZkError::NoNode) => {
                        self.make_folder(session, folder).await?;
                        Err(Retry::Again)
                    }
                    Err(e) if is_connection_loss(&e) => {
                        match self.find_own(session, folder, req.owner).await? {
                            Some((path, czxid)) => {
                                self.hook("zk_create_found_by_owner");
                                Ok((path, czxid, None))
                            }
                            None => Err(Retry::Again),
                        }
                    }
                    Err(e) => Err(Retry::zk("creating the lock node", e)),
                }
            },
        )
        .await
    }

    /// Finds `owner`'s node in `folder` after a `sync`, so a server that lags behind the
    /// leader cannot hide a create that was applied.
    pub(super) async fn find_own(
        &self,
        session: &Session,
        folder: &str,
        owner: OwnerId,
    ) -> Result<Option<(String, i64)>> {
        const CONTEXT: &str = "looking for our lock node";
        let mine = &layout::owner_prefix(owner);
        retry(CONTEXT, CONNECTION_KEPT_DROPPING, |_| async move {
            let listed = async {
                session.client.sync(folder).await?;
                session.client.list_children(folder).await
            }
            .await;
            let children = match listed {
                Ok(children) => children,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) => return Err(Retry::zk(CONTEXT, e)),
            };
            let Some(child) = children.into_iter().find(|c| c.starts_with(mine)) else {
                return Ok(None);
            };
            let path = format!("{folder}/{child}");
            match session.client.check_stat(&path).await {
                Ok(Some(stat)) => Ok(Some((path, stat.czxid))),
                Ok(None) => Ok(None),
                Err(e) => Err(Retry::zk(CONTEXT, e)),
            }
        })
        .await
    }

    /// A mutex: the first node of the queue is the holder; the rest are waiters, in order.
    pub(super) async fn inspect_mutex(
        &self,
        session: &Session,
        name: &LockName,
    ) -> Result<LockInfo> {
        let folder = &layout::lock_folder(&self.settings.root, name);
        retry("inspect", QUEUE_KEPT_CHANGING, |_| async move {
            let Some(children) = self.list(session, folder, "listing the lock queue").await? else {
                return Ok(LockInfo::free(name, None));
            };
            let queue = layout::queue(children);
            let Some((_, first)) = queue.first() else {
                return Ok(LockInfo::free(name, None));
            };
            let (data, stat) = match session.client.get_data(&format!("{folder}/{first}")).await {
                Ok(found) => found,
                // Released meanwhile, or the connection dropped: look again.
                Err(ZkError::NoNode) => return Err(Retry::Again),
                Err(e) => return Err(Retry::zk("reading the lock holder", e)),
            };
            let mut waiters = Vec::new();
            for (_, node) in queue.iter().skip(1).take(crate::backend::MAX_WAITERS_SHOWN) {
                let holder = match session.client.get_data(&format!("{folder}/{node}")).await {
                    Ok((data, _)) => layout::holder_from_data(&data),
                    // Gave up waiting meanwhile: not a waiter any more.
                    Err(ZkError::NoNode) => continue,
                    Err(e) => return Err(Retry::zk("reading a waiter", e)),
                };
                waiters.push(crate::backend::Waiter {
                    node: node.clone(),
                    holder,
                });
            }
            Ok(LockInfo {
                name: name.to_string(),
                held: true,
                token: Some(stat.czxid as u64),
                holder: layout::holder_from_data(&data),
                time_left: None,
                waiters,
                kind: crate::mode::LockKind::Mutex,
                permits: None,
                leases: Vec::new(),
            })
        })
        .await
    }

    pub(super) async fn list(
        &self,
        session: &Session,
        folder: &str,
        context: &str,
    ) -> Result<Option<Vec<String>>> {
        retry(context, CONNECTION_KEPT_DROPPING, |_| async move {
            match session.client.list_children(folder).await {
                Ok(children) => Ok(Some(children)),
                Err(ZkError::NoNode) => Ok(None),
                Err(e) => Err(Retry::zk(context, e)),
            }
        })
        .await
    }

    /// A mutex's forced release: deletes the first node of the queue (the holder's, whoever's
    /// it is).
    pub(super) async fn force_release_mutex(
        &self,
        session: &Session,
        folder: &str,
    ) -> Result<bool> {
        retry("force release", QUEUE_KEPT_CHANGING, |_| async move {
            let Some(children) = self.list(session, folder, "listing the lock queue").await? else {
                return Ok(false);
            };
            let Some((_, first)) = layout::queue(children).into_iter().next() else {
                return Ok(false);
            };
            match session
                .client
                .delete(&format!("{folder}/{first}"), None)
                .await
            {
                Ok(()) => Ok(true),
                // Released meanwhile (then the next one holds: look again), or the outcome
                // of a delete is unknown (look again: a first node gone is what we wanted).
                Err(ZkError::NoNode) => Err(Retry::Again),
                Err(e) => Err(Retry::zk("deleting the holder's lock node", e)),
            }
        })
        .await
    }

    /// Deletes our node; `Ok(false)` when it was already gone (not ours any more). A delete
    /// whose reply was lost is retried: gone then means deleted by us.
    pub(super) async fn delete_own(&self, session: &Session, path: &str) -> Result<bool> {
        let deleted = retry(
            "deleting the lock node",
            "the connection kept dropping; it is retried in the background",
            |attempt| async move {
                match session.client.delete(path, None).await {
                    Ok(()) => Ok(true),
                    Err(ZkError::NoNode) => Ok(attempt > 0),
                    Err(e) if is_session_gone(&e) => Ok(false),
                    Err(e) => Err(Retry::zk("deleting the lock node", e)),
                }
            },
        )
        .await;
        if deleted.is_err() {
            // Not deleted (an error, or the connection kept dropping): the cleanup task goes on.
            self.schedule_delete(session.generation, path);
        }
        deleted
    }

    /// Deletes `owner`'s nodes (waiting or held; a semaphore waiter may have two): by the paths
    /// we know, else by searching the folders of `mode` for the owner id (an attempt whose
    /// outcome is unknown). `Ok(false)` when the node the lease held by was gone already.
    pub(super) async fn delete_by_owner(
        self: &Arc<Self>,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
    ) -> Result<bool> {
        let node = unpoisoned(&self.nodes).remove(&owner);
        let mut unfinished = DeleteOnDrop {
            inner: self,
            nodes: node.iter().flat_map(|n| n.paths()).collect(),
        };
        let session = self.session().await?;
        let deleted = match node {
            Some(node) if node.generation != session.generation => Ok(false),
            Some(node) => {
                // The lease node first, so that the next holder of a semaphore's internal
                // mutex does not count it.
                let deleted = self.delete_own(&session, &node.path).await;
                if let Some(queue) = &node.queue {
                    let _ = self.delete_own(&session, queue).await;
                } else if matches!(mode, LockMode::Permit { .. }) && !node.held {
                    // A waiter given up on while it held the internal mutex may have had its
                    // lease node's create in flight, unrecorded: left behind, that node would
                    // take a permit for as long as the session lives. The session answers in
                    // order, so a create sent before this listing is found by it.
                    let folder = layout::lock_folder(&self.settings.root, name);
                    let leases = leases_folder(&folder);
                    if let Ok(Some((orphan, _))) = self.find_own(&session, &leases, owner).await {
                        let _ = self.delete_own(&session, &orphan).await;
                    }
                }
                deleted
            }
            None => {
                let folder = layout::lock_folder(&self.settings.root, name);
                let folders = match mode {
                    LockMode::Permit { .. } => vec![leases_folder(&folder), locks_folder(&folder)],
                    LockMode::Exclusive | LockMode::Read | LockMode::Write => vec![folder],
                };
                let mut deleted = Ok(false);
                for (i, folder) in folders.iter().enumerate() {
                    if let Some((path, _)) = self.find_own(&session, folder, owner).await? {
                        let outcome = self.delete_own(&session, &path).await;
                        if i == 0 {
                            deleted = outcome;
                        }
                    }
                }
                deleted
            }
        };
        // Deleted, or handed to the cleanup task by delete_own when it could not be.
        unfinished.nodes.clear();
        deleted
    }
}
