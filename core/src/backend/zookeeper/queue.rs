//! The lock queue: taking a place in it (making the folder and our node), finding our node
//! again, reading where it stands and what the queue holds, and leaving it (deleting our node).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{Acls, CreateMode};

use super::cleanup::DeleteOnDrop;
use super::error::{
    CONNECTION_KEPT_DROPPING, QUEUE_KEPT_CHANGING, Retry, ZkError, is_connection_loss,
    is_session_gone, retry,
};
use super::session::Session;
use super::{Inner, Node, layout};
use crate::backend::{AcquireRequest, Attempt, LockInfo};
use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::sync::unpoisoned;

enum Position {
    First,
    Behind(String),
    /// Our node is not in the queue (deleted by somebody while we waited).
    Missing,
}

/// Where `path` stands in the queue that `children` (its folder's listing) make.
fn position_in(children: Vec<String>, folder: &str, path: &str) -> Position {
    let queue = layout::queue(children);
    let me = path.rsplit('/').next().unwrap_or(path);
    match queue.iter().position(|(_, name)| name == me) {
        None => Position::Missing,
        Some(0) => Position::First,
        Some(i) => Position::Behind(format!("{folder}/{}", queue[i - 1].1)),
    }
}

impl Inner {
    /// One attempt to take the lock: joins the queue (or keeps our place in it) and holds if
    /// our node is first; else remembers the node just ahead, for the waiter's watch.
    pub(super) async fn try_acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let session = self.session().await?;
        let folder = layout::lock_folder(&self.settings.root, req.name);
        for _ in 0..3 {
            let known = {
                let mut nodes = unpoisoned(&self.nodes);
                match nodes.get(&req.owner) {
                    Some(node) if node.generation == session.generation => Some(node.path.clone()),
                    Some(_) => {
                        // Made on a session that ended: it is gone, queue again.
                        nodes.remove(&req.owner);
                        None
                    }
                    None => None,
                }
            };
            let (path, listed) = match known {
                Some(path) => (path, None),
                None => {
                    let (path, czxid, listed) = self.create_node(&session, &folder, req).await?;
                    if czxid <= 0 {
                        let _ = self.delete_own(&session, &path).await;
                        return Err(Error::internal(
                            "the ZooKeeper server answered a create without its stat",
                        ));
                    }
                    if layout::sequence(&path).is_none() {
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
                    let node = Node {
                        path: path.clone(),
                        czxid,
                        generation: session.generation,
                        held: false,
                        predecessor: None,
                        events: None,
                        heartbeat: session.heartbeat.clone(),
                    };
                    unpoisoned(&self.nodes).insert(req.owner, node);
                    session.heartbeat.wake.notify_one();
                    (path, listed)
                }
            };
            let position = match listed {
                Some(children) => position_in(children, &folder, &path),
                None => self.position(&session, &folder, &path).await?,
            };
            let acquired = {
                let mut nodes = unpoisoned(&self.nodes);
                match position {
                    Position::First => match nodes.get_mut(&req.owner) {
                        Some(node) => {
                            node.held = true;
                            node.predecessor = None;
                            Some(node.czxid as u64)
                        }
                        // Removed meanwhile (the session ended): queue again.
                        None => None,
                    },
                    Position::Behind(predecessor) => {
                        if let Some(node) = nodes.get_mut(&req.owner) {
                            node.predecessor = Some(predecessor);
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
                // The lease's client deadline counts from the heartbeat's proof: wait until
                // that leaves it at least a heartbeat gap (a session idle for long, or new).
                let proof_needed =
                    BootInstant::now().saturating_sub(session.timeout.saturating_sub(
                        drift_margin(session.timeout, Duration::ZERO) + session.heartbeat.gap(),
                    ));
                session.heartbeat.proven_since(proof_needed).await;
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

    /// Creates the lock's folder and any missing ancestor as CONTAINER nodes.
    async fn make_folder(&self, session: &Session, folder: &str) -> Result<()> {
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
    async fn create_node(
        &self,
        session: &Session,
        folder: &str,
        req: &AcquireRequest<'_>,
    ) -> Result<(String, i64, Option<Vec<String>>)> {
        let prefix = &layout::node_prefix(folder, req.owner);
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
    async fn find_own(
        &self,
        session: &Session,
        folder: &str,
        owner: OwnerId,
    ) -> Result<Option<(String, i64)>> {
        const CONTEXT: &str = "looking for our lock node";
        let mine = &layout::node_name_prefix(owner);
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

    /// The first node of the queue is the holder; the rest are waiters, in order.
    pub(super) async fn inspect_in(&self, session: &Session, name: &LockName) -> Result<LockInfo> {
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

    /// Where `path` stands in its folder's queue.
    async fn position(&self, session: &Session, folder: &str, path: &str) -> Result<Position> {
        let Some(children) = self.list(session, folder, "listing the lock queue").await? else {
            return Ok(Position::Missing);
        };
        Ok(position_in(children, folder, path))
    }

    /// Deletes our node; `Ok(false)` when it was already gone (not ours any more). A delete
    /// whose reply was lost is retried: gone then means deleted by us.
    async fn delete_own(&self, session: &Session, path: &str) -> Result<bool> {
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

    /// Deletes `owner`'s node (waiting or held): by the path we know, else by searching the
    /// folder for the owner id (an attempt whose outcome is unknown).
    pub(super) async fn delete_by_owner(
        self: &Arc<Self>,
        name: &LockName,
        owner: OwnerId,
    ) -> Result<bool> {
        let node = unpoisoned(&self.nodes).remove(&owner);
        let mut unfinished = DeleteOnDrop {
            inner: self,
            node: node.as_ref().map(|n| (n.generation, n.path.clone())),
        };
        let session = self.session().await?;
        let deleted = match node {
            Some(node) if node.generation != session.generation => Ok(false),
            Some(node) => self.delete_own(&session, &node.path).await,
            None => {
                let folder = layout::lock_folder(&self.settings.root, name);
                match self.find_own(&session, &folder, owner).await? {
                    Some((path, _)) => self.delete_own(&session, &path).await,
                    None => Ok(false),
                }
            }
        };
        // Deleted, or handed to the cleanup task by delete_own when it could not be.
        unfinished.node = None;
        deleted
    }
}
