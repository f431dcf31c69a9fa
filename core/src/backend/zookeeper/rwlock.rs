//! Read-write locks on ZooKeeper, in Apache Curator's `InterProcessReadWriteLock` layout and
//! protocol, so Curator's read and write locks and fencelock's exclude and admit each other.
//!
//! ```text
//! [/chroot]/fencelock/<encoded name>/_c_<owner id as a UUID>-__READ__<10-digit sequence>
//! [/chroot]/fencelock/<encoded name>/_c_<owner id as a UUID>-__WRIT__<10-digit sequence>
//! ```
//!
//! The folder is the one the mutex of the same name uses (one name is one kind: see
//! [`kinds`](super::kinds)). Nodes are EPHEMERAL_SEQUENTIAL, sorted by their sequence (what
//! follows the last `__READ__` or `__WRIT__`, as Curator's `SortingLockInternalsDriver` reads
//! it; both markers have the same length, which Curator's sort relies on). Node data is the
//! mutex's (the layout version and the holder's description; Curator writes its IP address).
//!
//! - A **writer** holds when its node is the first of all read and write nodes, and watches the
//!   node just before its own (Curator's `StandardLockInternalsDriver` with one lease).
//! - A **reader** holds when no write node comes before its own, so readers that arrive after a
//!   waiting writer queue behind it; it watches the first write node before its own (Curator's
//!   read predicate).
//!
//! The acquire itself (create and list in one round trip, keeping the node across attempts,
//! finding it again by owner id) is the mutex queue's ([`queue`](super::queue)); this file holds
//! the order, the two predicates, and what `inspect` and `force_release` see.
//!
//! **Tokens** are the node's czxid, as for the mutex. A write lease's token is larger than every
//! earlier read or write token of the name: a lease granted before the writer's was granted
//! either had its node before the writer's (created earlier, so a smaller czxid), or was created
//! after it, and then it could not hold while the writer's node existed, that is, not before the
//! writer released. Sequences and czxids both follow creation order within the folder, and a
//! folder removed and made again holds only nodes created after every earlier one.

use zookeeper_client::Stat;

use super::Inner;
use super::error::{QUEUE_KEPT_CHANGING, Retry, ZkError, retry};
use super::layout::{self, Position, RwNode, rw_queue};
use super::session::Session;
use crate::backend::{LeaseInfo, LockInfo, MAX_WAITERS_SHOWN, Waiter};
use crate::error::Result;
use crate::mode::LockKind;
use crate::name::LockName;

/// How many nodes at the front of `queue` hold: the first write node alone, or every read node
/// before the first write node.
pub(super) fn holder_count(queue: &[RwNode]) -> usize {
    match queue.first() {
        None => 0,
        Some(first) if first.write => 1,
        Some(_) => queue.iter().take_while(|n| !n.write).count(),
    }
}

/// Where the node at `path` stands in its folder, whose listing is `children`: it holds, or it
/// waits and watches the node Curator's driver would (a writer its predecessor, a reader the
/// first write node before it).
pub(super) fn position_in(children: &[String], folder: &str, path: &str) -> Position {
    let queue = rw_queue(children);
    let me = path.rsplit('/').next().unwrap_or(path);
    let Some(mine) = queue.iter().position(|n| n.name == me) else {
        return Position::Missing;
    };
    let watched = if queue[mine].write {
        mine.checked_sub(1)
    } else {
        queue[..mine].iter().position(|n| n.write)
    };
    match watched {
        None => Position::First,
        Some(i) => Position::Behind(format!("{folder}/{}", queue[i].name)),
    }
}

impl Inner {
    /// `inspect` of a folder in use as a read-write lock, whose listing is `children`: every
    /// holder as a lease, the rest as waiters in lock order.
    pub(super) async fn inspect_rw(
        &self,
        session: &Session,
        name: &LockName,
        folder: &str,
    ) -> Result<LockInfo> {
        retry("inspect", QUEUE_KEPT_CHANGING, |_| async move {
            let Some(children) = self.list(session, folder, "listing the lock queue").await? else {
                return Ok(LockInfo::free(name, None));
            };
            let queue = rw_queue(&children);
            let holding = holder_count(&queue);
            let mut leases = Vec::with_capacity(holding);
            let mut newest = None;
            for node in &queue[..holding] {
                let (data, stat) = match read_node(session, folder, &node.name).await {
                    Ok(Some(found)) => found,
                    // Released meanwhile: who holds may have changed, look again.
                    Ok(None) => return Err(Retry::Again),
                    Err(e) => return Err(Retry::zk("reading a lock holder", e)),
                };
                let token = stat.czxid as u64;
                newest = newest.max(Some(token));
                leases.push(LeaseInfo {
                    mode: node.mode(),
                    token: Some(token),
                    holder: layout::holder_from_data(&data),
                    time_left: None,
                });
            }
            let mut waiters = Vec::new();
            for node in queue[holding..].iter().take(MAX_WAITERS_SHOWN) {
                match read_node(session, folder, &node.name).await {
                    Ok(Some((data, _))) => waiters.push(Waiter {
                        node: node.name.clone(),
                        holder: layout::holder_from_data(&data),
                    }),
                    // Gave up waiting meanwhile: not a waiter any more.
                    Ok(None) => {}
                    Err(e) => return Err(Retry::zk("reading a waiter", e)),
                }
            }
            let mut info = LockInfo::free(name, newest);
            info.held = !leases.is_empty();
            info.kind = LockKind::ReadWrite;
            info.leases = leases;
            info.waiters = waiters;
            Ok(info)
        })
        .await
    }

    /// Deletes every holder's node of a read-write lock (the writer, or every reader before the
    /// first waiting writer): their own-node watches tell them at once, and the next waiters'
    /// watches wake them. `Ok(false)` when nobody held it.
    pub(super) async fn force_release_rw(&self, session: &Session, folder: &str) -> Result<bool> {
        retry("force release", QUEUE_KEPT_CHANGING, |_| async move {
            let Some(children) = self.list(session, folder, "listing the lock queue").await? else {
                return Ok(false);
            };
            let queue = rw_queue(&children);
            let holding = holder_count(&queue);
            if holding == 0 {
                return Ok(false);
            }
            let mut deleted = false;
            for node in &queue[..holding] {
                match session
                    .client
                    .delete(&format!("{folder}/{}", node.name), None)
                    .await
                {
                    Ok(()) => deleted = true,
                    // Released meanwhile.
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(Retry::zk("deleting a holder's lock node", e)),
                }
            }
            // Every holder left by itself meanwhile: others may hold now, look again.
            if deleted { Ok(true) } else { Err(Retry::Again) }
        })
        .await
    }
}

/// A node's data and stat; `None` when it is gone.
pub(super) async fn read_node(
    session: &Session,
    folder: &str,
    child: &str,
) -> std::result::Result<Option<(Vec<u8>, Stat)>, ZkError> {
    match session.client.get_data(&format!("{folder}/{child}")).await {
        Ok(found) => Ok(Some(found)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::LockMode;

    fn names(children: &[&str]) -> Vec<String> {
        children.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn curator_names_parse_and_sort_by_sequence_whatever_the_side() {
        let children = names(&[
            "_c_b-__WRIT__0000000004",
            "junk",
            "_c_a-lock-0000000001",
            "_c_c-__READ__0000000002",
            "_c_d-__READ__-2147483648",
            "__READ__0000000003",
            "leases",
        ]);
        let queue = rw_queue(&children);
        let order: Vec<(&str, bool)> = queue.iter().map(|n| (n.name.as_str(), n.write)).collect();
        assert_eq!(
            order,
            [
                ("_c_c-__READ__0000000002", false),
                ("__READ__0000000003", false),
                ("_c_b-__WRIT__0000000004", true),
            ]
        );
        assert!(layout::has_rw_nodes(&children));
        assert!(!layout::has_rw_nodes(&names(&[
            "_c_a-lock-0000000001",
            "locks"
        ])));
        assert_eq!(layout::rw_node("_c_x-__WRIT__"), None);
        assert_eq!(layout::mark_of(LockMode::Write), Some("__WRIT__"));
        assert_eq!(layout::mark_of(LockMode::Exclusive), None);
    }

    #[test]
    fn readers_share_until_a_writer_and_queue_behind_a_waiting_one() {
        let children = names(&[
            "_c_r1-__READ__0000000001",
            "_c_r2-__READ__0000000002",
            "_c_w3-__WRIT__0000000003",
            "_c_r4-__READ__0000000004",
            "_c_w5-__WRIT__0000000005",
        ]);
        let at = |node: &str| position_in(&children, "/f", &format!("/f/{node}"));
        assert_eq!(at("_c_r1-__READ__0000000001"), Position::First);
        assert_eq!(at("_c_r2-__READ__0000000002"), Position::First);
        // A writer watches its predecessor, a reader the first writer before it.
        assert_eq!(
            at("_c_w3-__WRIT__0000000003"),
            Position::Behind("/f/_c_r2-__READ__0000000002".into())
        );
        assert_eq!(
            at("_c_r4-__READ__0000000004"),
            Position::Behind("/f/_c_w3-__WRIT__0000000003".into())
        );
        assert_eq!(
            at("_c_w5-__WRIT__0000000005"),
            Position::Behind("/f/_c_r4-__READ__0000000004".into())
        );
        assert_eq!(at("_c_gone-__READ__0000000009"), Position::Missing);
        assert_eq!(holder_count(&rw_queue(&children)), 2);
        let writer_first = names(&["_c_w-__WRIT__0000000007", "_c_r-__READ__0000000008"]);
        assert_eq!(holder_count(&rw_queue(&writer_first)), 1);
        assert_eq!(holder_count(&[]), 0);
    }
}
