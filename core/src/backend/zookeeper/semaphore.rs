//! Semaphores on ZooKeeper, in Apache Curator's `InterProcessSemaphoreV2` layout and protocol,
//! so Curator and fencelock participants together never hold more than N leases.
//!
//! ```text
//! [/chroot]/fencelock/<encoded name>/locks/_c_<owner uuid>-lock-<seq>    Curator's internal mutex
//! [/chroot]/fencelock/<encoded name>/leases/_c_<owner uuid>-lease-<seq>  one per lease
//! ```
//!
//! The folder is the one the mutex of the same name uses; `locks` and `leases` are CONTAINER
//! folders in it. Lock and lease nodes are EPHEMERAL_SEQUENTIAL and carry the holder's
//! description, as the mutex's nodes do.
//!
//! **The protocol** (Curator's): a participant queues on the internal mutex `locks` (the
//! mutex's queue: the first node holds, a waiter watches its predecessor). Holding it, it
//! creates its lease node and lists `leases`: with at most N children it holds a permit, and
//! releases the internal mutex (deletes its `locks` node); with more, it keeps the internal
//! mutex and watches the children of `leases` until a lease goes. Only the participant holding
//! the internal mutex ever has a lease node without a permit, so a waiter never takes a slot
//! from the others. In fencelock the waiter keeps both nodes across the acquire loop's attempts;
//! `abandon` deletes both, release deletes the lease node.
//!
//! **Never more than N**, even with participants that skip the internal mutex: every holder
//! listed the leases after creating its own node, so the holder whose node was created last saw
//! every other holder's node (they exist while they hold) and at most N nodes in all.
//!
//! **Tokens** are the lease node's czxid. Lease nodes are created one at a time, each by the
//! internal mutex's holder, which releases it only once its lease holds: permits are granted in
//! the order their nodes were created, so their czxids increase in grant order. (A holder of the
//! internal mutex checks on each attempt that its `locks` node still exists, so a node deleted by
//! hand cannot let the next participant's lease overtake its own.)
//!
//! **N is stored** in the data of the `locks` folder (`{"fencelock":1,"permits":N}`), which
//! Curator never reads. A participant joins by creating its `locks` node and reading that data
//! in the same round trip: N as stored, it is in (nobody can change N while its node exists);
//! another N is INVALID_ARGUMENT while anybody holds or waits. Changing N (and storing the first
//! one) is one `multi` that deletes the empty `locks` and `leases` folders, makes them again
//! with the new N, and creates the participant's `locks` node: it fails if either folder has a
//! child, so N changes only while the semaphore is idle, and a participant that joined with the
//! old N either made the `multi` fail or reads the new N after its create and refuses. Curator
//! records no N (it creates `locks` without data): fencelock joins a folder in use that only
//! Curator made without checking, so mixed deployments must use the same N (docs/zookeeper.md).

use std::sync::Arc;

use serde_json::Value;

use super::cleanup::DeleteOnDrop;
use super::error::{CONNECTION_KEPT_DROPPING, QUEUE_KEPT_CHANGING, Retry, ZkError, retry};
use super::layout::{Position, leases_folder, locks_folder};
use super::queue::{position_in, wait_for_fresh_proof};
use super::rwlock::read_node;
use super::session::Session;
use super::{Inner, WatchTarget, layout};
use crate::backend::{AcquireRequest, Attempt, LeaseInfo, LockInfo, MAX_WAITERS_SHOWN, Waiter};
use crate::error::{Error, Result};
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::sync::unpoisoned;

/// Curator's `InterProcessSemaphoreV2.LEASE_BASE_NAME`.
pub(super) const LEASE_LABEL: &str = "lease-";

/// The data of the `locks` folder: the layout version and N.
pub(super) fn permits_data(permits: u32) -> Vec<u8> {
    serde_json::json!({ "fencelock": layout::LAYOUT_VERSION, "permits": permits })
        .to_string()
        .into_bytes()
}

/// N as a fencelock participant stored it; `None` for anything else (Curator's empty data).
pub(super) fn stored_permits(data: &[u8]) -> Option<u32> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else {
        return None;
    };
    map.get("fencelock")?;
    map.get("permits")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

/// The lease nodes among the children of `leases`, by sequence: `(sequence, name)`.
pub(super) fn lease_queue(children: &[String]) -> Vec<(i64, String)> {
    let mut nodes: Vec<(i64, String)> = children
        .iter()
        .filter_map(|c| layout::sequence_after(c, LEASE_LABEL).map(|s| (s, c.clone())))
        .collect();
    nodes.sort();
    nodes
}

/// Where a semaphore participant stands, read from its [`Node`](super::Node).
enum Stage {
    /// Queued on the internal mutex, at this `locks` node.
    Queued(String),
    /// Holding the internal mutex at `queue`, with the lease node at `lease` waiting for a
    /// permit.
    Leased { lease: String, queue: String },
}

impl Inner {
    /// One attempt to take a permit of the semaphore `req.name` with `permits` permits.
    pub(super) async fn try_acquire_permit(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        permits: u32,
    ) -> Result<Attempt> {
        let session = self.session().await?;
        let folder = layout::lock_folder(&self.settings.root, req.name);
        let (locks, leases) = (locks_folder(&folder), leases_folder(&folder));
        for _ in 0..3 {
            let stage = match self.known_node(&session, req) {
                Some(node) => match node.queue {
                    Some(queue) => Stage::Leased {
                        lease: node.path,
                        queue,
                    },
                    None => Stage::Queued(node.path),
                },
                None => {
                    let path = self.join_semaphore(&session, req, permits, &folder).await?;
                    // Its czxid is no token: the lease node's is.
                    self.remember(&session, req, &path, 0);
                    Stage::Queued(path)
                }
            };
            let (lease, queue, children) = match stage {
                Stage::Queued(queue) => {
                    let listed = self.list(&session, &locks, "listing the semaphore queue");
                    let position = match listed.await? {
                        Some(children) => position_in(children, &locks, &queue),
                        None => Position::Missing,
                    };
                    match position {
                        Position::Missing => {
                            // Deleted by somebody while we waited: queue again.
                            unpoisoned(&self.nodes).remove(&req.owner);
                            continue;
                        }
                        Position::Behind(predecessor) => {
                            self.set_watch(req, WatchTarget::Node(predecessor));
                            return Ok(Attempt::Held { expires_in: None });
                        }
                        Position::First => {}
                    }
                    // Our turn on the internal mutex: make our lease node.
                    let (lease, children) = self.make_lease(&session, req, &leases, &queue).await?;
                    (lease, queue, children)
                }
                Stage::Leased { lease, queue } => {
                    let (children, queued) = tokio::join!(
                        self.list_leases(&session, &leases),
                        self.exists(&session, &queue)
                    );
                    if !queued? {
                        // Our place on the internal mutex was deleted by somebody: give the
                        // lease node up too, and queue again, so that the participant holding
                        // the internal mutex now cannot see its lease overtaken by ours.
                        let _ = self.delete_own(&session, &lease).await;
                        unpoisoned(&self.nodes).remove(&req.owner);
                        continue;
                    }
                    (lease, queue, children?)
                }
            };
            let me = lease.rsplit('/').next().unwrap_or(&lease);
            if !children.iter().any(|c| c == me) {
                // Our lease node was deleted by somebody: make a new one (we still hold the
                // internal mutex), as Curator does.
                if let Some(node) = unpoisoned(&self.nodes).get_mut(&req.owner) {
                    node.path = queue;
                    node.queue = None;
                }
                continue;
            }
            // Curator counts every child of `leases`.
            if children.len() > permits as usize {
                self.set_watch(
                    req,
                    WatchTarget::Children {
                        path: leases,
                        seen: children.len(),
                    },
                );
                return Ok(Attempt::Held { expires_in: None });
            }
            // A permit: release the internal mutex for the next participant.
            let token = {
                let mut nodes = unpoisoned(&self.nodes);
                let Some(node) = nodes.get_mut(&req.owner) else {
                    // The session ended meanwhile: queue again.
                    continue;
                };
                node.held = true;
                node.queue = None;
                node.watch = None;
                node.czxid as u64
            };
            // Forgotten by the node record above, so handed to the cleanup task should this
            // future be dropped before the delete is confirmed: a delete lost with the
            // connection meanwhile would leave our place at the head of the internal mutex,
            // blocking every participant (Curator's too) until this session ends.
            let mut unconfirmed = DeleteOnDrop {
                inner: self,
                nodes: vec![(session.generation, queue.clone())],
            };
            let _ = self.delete_own(&session, &queue).await;
            // Deleted, or handed to the cleanup task by delete_own when it could not be.
            unconfirmed.nodes.clear();
            wait_for_fresh_proof(&session).await;
            return Ok(Attempt::Acquired {
                token,
                origin: None,
            });
        }
        Err(Error::unavailable(format!(
            "semaphore {:?}: our queue node kept disappearing",
            req.name.as_str()
        )))
    }

    /// Creates our lease node while we hold the internal mutex at `queue`; returns it and the
    /// children of `leases` listed after it. If that fails, a lease node whose create went
    /// through unseen is looked for and deleted: left behind, it would take a permit for as
    /// long as the session lives.
    async fn make_lease(
        &self,
        session: &Session,
        req: &AcquireRequest<'_>,
        leases: &str,
        queue: &str,
    ) -> Result<(String, Vec<String>)> {
        let (lease, czxid, listed) = match self.create_node(session, leases, LEASE_LABEL, req).await
        {
            Ok(made) => made,
            Err(e) => {
                if let Ok(Some((orphan, _))) = self.find_own(session, leases, req.owner).await {
                    let _ = self.delete_own(session, &orphan).await;
                }
                return Err(e);
            }
        };
        if let Some(node) = unpoisoned(&self.nodes).get_mut(&req.owner) {
            node.path = lease.clone();
            node.czxid = czxid;
            node.queue = Some(queue.to_string());
        }
        let children = match listed {
            Some(children) => children,
            None => self.list_leases(session, leases).await?,
        };
        Ok((lease, children))
    }

    /// Whether `path` exists.
    async fn exists(&self, session: &Session, path: &str) -> Result<bool> {
        retry(
            "checking our semaphore queue node",
            CONNECTION_KEPT_DROPPING,
            |_| async move {
                match session.client.check_stat(path).await {
                    Ok(stat) => Ok(stat.is_some()),
                    Err(e) => Err(Retry::zk("checking our semaphore queue node", e)),
                }
            },
        )
        .await
    }

    fn set_watch(&self, req: &AcquireRequest<'_>, target: WatchTarget) {
        if let Some(node) = unpoisoned(&self.nodes).get_mut(&req.owner) {
            node.watch = Some(target);
        }
    }

    async fn list_leases(&self, session: &Session, leases: &str) -> Result<Vec<String>> {
        Ok(self
            .list(session, leases, "listing the semaphore's leases")
            .await?
            .unwrap_or_default())
    }

    /// `inspect` of a folder in use as a semaphore: its stored N, the holders' leases (the
    /// first N lease nodes; every one when N is not stored), and the participants queued on the
    /// internal mutex as waiters (the first of them may already have a lease node, waiting for
    /// a permit).
    pub(super) async fn inspect_semaphore(
        &self,
        session: &Session,
        name: &LockName,
        folder: &str,
    ) -> Result<LockInfo> {
        let (locks, leases) = (&locks_folder(folder), &leases_folder(folder));
        retry("inspect", QUEUE_KEPT_CHANGING, |_| async move {
            let (stored, holders) = semaphore_holders(session, folder).await?;
            let mut infos = Vec::with_capacity(holders.len());
            let mut newest = None;
            for (_, node) in &holders {
                let (data, stat) = match read_node(session, leases, node).await {
                    Ok(Some(found)) => found,
                    // Released meanwhile: another participant may hold now, look again.
                    Ok(None) => return Err(Retry::Again),
                    Err(e) => return Err(Retry::zk("reading a semaphore holder", e)),
                };
                let token = stat.czxid as u64;
                newest = newest.max(Some(token));
                infos.push(LeaseInfo {
                    // 0: N is not stored (only Curator participants use the semaphore).
                    mode: LockMode::Permit {
                        permits: stored.unwrap_or(0),
                    },
                    token: Some(token),
                    holder: layout::holder_from_data(&data),
                    time_left: None,
                });
            }
            let queued = match session.client.list_children(locks).await {
                Ok(children) => layout::queue(children),
                Err(ZkError::NoNode) => Vec::new(),
                Err(e) => return Err(Retry::zk("listing the semaphore queue", e)),
            };
            let mut waiters = Vec::new();
            for (_, node) in queued.iter().take(MAX_WAITERS_SHOWN) {
                match read_node(session, locks, node).await {
                    Ok(Some((data, _))) => waiters.push(Waiter {
                        node: node.clone(),
                        holder: layout::holder_from_data(&data),
                    }),
                    Ok(None) => {}
                    Err(e) => return Err(Retry::zk("reading a semaphore waiter", e)),
                }
            }
            let mut info = LockInfo::free(name, newest);
            info.held = !infos.is_empty();
            info.kind = LockKind::Semaphore;
            info.permits = stored;
            info.leases = infos;
            info.waiters = waiters;
            Ok(info)
        })
        .await
    }

    /// Deletes every holder's lease node (see [`Inner::inspect_semaphore`] for who holds);
    /// their own-node watches tell them at once. With them, any place a holder still has on the
    /// internal mutex: a holder deletes its place once its permit is granted, so one left
    /// behind (its delete lost with a connection) would block every participant, Curator's
    /// too, until that holder's session ended. `Ok(false)` when nobody held a permit.
    pub(super) async fn force_release_semaphore(
        &self,
        session: &Session,
        folder: &str,
    ) -> Result<bool> {
        let (locks, leases) = (&locks_folder(folder), &leases_folder(folder));
        retry("force release", QUEUE_KEPT_CHANGING, |_| async move {
            let (_, holders) = semaphore_holders(session, folder).await?;
            if holders.is_empty() {
                return Ok(false);
            }
            let queued = match session.client.list_children(locks).await {
                Ok(children) => children,
                Err(ZkError::NoNode) => Vec::new(),
                Err(e) => return Err(Retry::zk("listing the semaphore queue", e)),
            };
            // `_c_<owner>-`: a holder's lease node and its place in the queue share it.
            let owners: Vec<&str> = holders
                .iter()
                .filter_map(|(_, node)| node.rsplit_once(LEASE_LABEL).map(|(owner, _)| owner))
                .collect();
            let stranded = queued.iter().filter(|child| {
                owners.iter().any(|owner| child.starts_with(owner))
                    && child.contains(layout::LOCK_LABEL)
            });
            let mut deleted = false;
            let holder_nodes = holders.iter().map(|(_, node)| format!("{leases}/{node}"));
            let stranded_nodes = stranded.map(|child| format!("{locks}/{child}"));
            for path in holder_nodes.chain(stranded_nodes) {
                match session.client.delete(&path, None).await {
                    Ok(()) => deleted = true,
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(Retry::zk("deleting a semaphore holder's node", e)),
                }
            }
            // Every holder left by itself meanwhile: others may hold now, look again.
            if deleted { Ok(true) } else { Err(Retry::Again) }
        })
        .await
    }
}

/// The stored N and the holders' lease nodes, by sequence: the first N (lease nodes are made
/// one at a time, each holding before the next is made, so a lease node beyond the first N is
/// the one still waiting for a permit), or all of them when N is not stored.
async fn semaphore_holders(
    session: &Session,
    folder: &str,
) -> std::result::Result<(Option<u32>, Vec<(i64, String)>), Retry> {
    let (locks, leases) = (&locks_folder(folder), &leases_folder(folder));
    let (stored, listed) = tokio::join!(
        session.client.get_data(locks),
        session.client.list_children(leases)
    );
    let stored = match stored {
        Ok((data, _)) => stored_permits(&data),
        Err(ZkError::NoNode) => None,
        Err(e) => return Err(Retry::zk("reading the semaphore's permits", e)),
    };
    let mut holders = match listed {
        Ok(children) => lease_queue(&children),
        Err(ZkError::NoNode) => Vec::new(),
        Err(e) => return Err(Retry::zk("listing the semaphore's leases", e)),
    };
    if let Some(n) = stored {
        holders.truncate(n as usize);
    }
    Ok((stored, holders))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_folders_and_lease_names() {
        assert_eq!(locks_folder("/fencelock/a"), "/fencelock/a/locks");
        assert_eq!(leases_folder("/fencelock/a"), "/fencelock/a/leases");
        assert!(
            super::layout::is_semaphore_folder("locks")
                && super::layout::is_semaphore_folder("leases")
        );
        assert!(!super::layout::is_semaphore_folder("_c_x-lock-0000000001"));
        let children: Vec<String> = [
            "_c_b-lease-0000000012",
            "junk",
            "_c_a-lease-0000000003",
            "lease-0000000007",
            "_c_w-lease--2147483648",
        ]
        .map(String::from)
        .to_vec();
        let names: Vec<String> = lease_queue(&children).into_iter().map(|(_, n)| n).collect();
        assert_eq!(
            names,
            [
                "_c_a-lease-0000000003",
                "lease-0000000007",
                "_c_b-lease-0000000012"
            ]
        );
    }

    #[test]
    fn the_stored_count_round_trips_and_anything_else_is_none() {
        let data = permits_data(7);
        assert_eq!(stored_permits(&data), Some(7));
        assert!(String::from_utf8(data).unwrap().contains("\"fencelock\":1"));
        // What Curator leaves in `locks`: nothing, or its default data (an IP address).
        assert_eq!(stored_permits(b""), None);
        assert_eq!(stored_permits(b"10.0.0.7"), None);
        assert_eq!(stored_permits(br#"{"permits":3}"#), None);
        assert_eq!(stored_permits(br#"{"fencelock":1,"permits":-1}"#), None);
        assert_eq!(
            stored_permits(br#"{"fencelock":1,"permits":99999999999}"#),
            None
        );
    }
}
