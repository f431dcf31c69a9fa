//! One name, one kind, on ZooKeeper: what a lock folder is in use as, read from its children's
//! names, the way the three Curator recipes lay them out in the one folder of a name:
//!
//! - a mutex: `_c_<uuid>-lock-<seq>` nodes ([`layout`]);
//! - a read-write lock: `_c_<uuid>-__READ__<seq>` / `-__WRIT__<seq>` nodes ([`rwlock`](super::rwlock));
//! - a semaphore: the `locks` and `leases` folders ([`semaphore`](super::semaphore)), in use
//!   while either has a child (they are containers, and linger a while once empty; Curator may
//!   make them persistent).
//!
//! Every acquire creates its node first and then lists (the folder, and for a semaphore's
//! folders their children): of two participants of different kinds, the one whose node was
//! created later lists after both creates, so it sees the other's node and refuses (it deletes
//! its node and answers INVALID_ARGUMENT). They are never both admitted, with no lock around the
//! check. The check runs once per acquire, when its node is new: a node that was admitted stays
//! admitted, and a later participant of another kind refuses itself. Curator participants do not
//! check; fencelock still refuses to join a folder they use as another kind.

use super::error::{CONNECTION_KEPT_DROPPING, Retry, ZkError, retry};
use super::session::Session;
use super::{Inner, layout};
use crate::backend::LockInfo;
use crate::error::Result;
use crate::mode::{LockKind, kind_conflict};
use crate::name::LockName;

/// What the names in one listing of a lock folder say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FolderUse {
    pub(super) mutex: bool,
    pub(super) read_write: bool,
    /// The `locks` or `leases` folder exists (the semaphore is in use if either has children).
    pub(super) semaphore_folders: bool,
}

impl FolderUse {
    pub(super) fn of(children: &[String]) -> Self {
        FolderUse {
            mutex: children.iter().any(|c| layout::sequence(c).is_some()),
            read_write: layout::has_rw_nodes(children),
            semaphore_folders: children.iter().any(|c| layout::is_semaphore_folder(c)),
        }
    }
}

impl Inner {
    /// The kind, other than `wanted`, that the folder of `name` is in use as, given a listing
    /// of it taken after our own node was created; reads the semaphore's folders when they
    /// exist. Mutex and read-write nodes are seen in `children` itself.
    pub(super) async fn other_kind_in_use(
        &self,
        session: &Session,
        folder: &str,
        children: &[String],
        wanted: LockKind,
    ) -> Result<Option<LockKind>> {
        let found = FolderUse::of(children);
        if wanted != LockKind::Mutex && found.mutex {
            return Ok(Some(LockKind::Mutex));
        }
        if wanted != LockKind::ReadWrite && found.read_write {
            return Ok(Some(LockKind::ReadWrite));
        }
        if wanted != LockKind::Semaphore
            && found.semaphore_folders
            && self.semaphore_in_use(session, folder).await?
        {
            return Ok(Some(LockKind::Semaphore));
        }
        Ok(None)
    }

    /// [`Inner::other_kind_in_use`] as the acquire's error: our node at `path` (just created)
    /// is deleted first, so a refused participant leaves nothing behind.
    pub(super) async fn refuse_other_kind(
        &self,
        session: &Session,
        name: &LockName,
        folder: &str,
        children: &[String],
        wanted: LockKind,
        own_nodes: &[&str],
    ) -> Result<()> {
        let Some(found) = self
            .other_kind_in_use(session, folder, children, wanted)
            .await?
        else {
            return Ok(());
        };
        for path in own_nodes {
            let _ = self.delete_own(session, path).await;
        }
        Err(kind_conflict(name.as_str(), wanted, found))
    }

    /// What the folder of `name` is in use as now (`None`: nobody holds or waits), with its
    /// listing. A folder used as several kinds at once (only Curator participants can do that)
    /// answers the first of mutex, read-write lock, semaphore.
    pub(super) async fn kind_in_use(
        &self,
        session: &Session,
        folder: &str,
    ) -> Result<Option<LockKind>> {
        let Some(children) = self
            .list(session, folder, "listing the lock folder")
            .await?
        else {
            return Ok(None);
        };
        let found = FolderUse::of(&children);
        Ok(if found.mutex {
            Some(LockKind::Mutex)
        } else if found.read_write {
            Some(LockKind::ReadWrite)
        } else if found.semaphore_folders && self.semaphore_in_use(session, folder).await? {
            Some(LockKind::Semaphore)
        } else {
            None
        })
    }

    /// What `name` is used as, and its holders and waiters.
    pub(super) async fn inspect_in(&self, session: &Session, name: &LockName) -> Result<LockInfo> {
        let folder = &layout::lock_folder(&self.settings.root, name);
        match self.kind_in_use(session, folder).await? {
            None => Ok(LockInfo::free(name, None)),
            Some(LockKind::Mutex) => self.inspect_mutex(session, name).await,
            Some(LockKind::ReadWrite) => self.inspect_rw(session, name, folder).await,
            Some(LockKind::Semaphore) => self.inspect_semaphore(session, name, folder).await,
        }
    }

    /// Deletes the node of every holder of `name`, whatever its kind. `Ok(false)` when nobody
    /// held it.
    pub(super) async fn force_release_in(
        &self,
        session: &Session,
        name: &LockName,
    ) -> Result<bool> {
        let folder = &layout::lock_folder(&self.settings.root, name);
        // The operator's server may lag behind the holders' (an ensemble): without the sync
        // its listing can miss a holder that then keeps its lease. Best effort: when the sync
        // fails, so does the listing below, with the error that says why.
        let _ = session.client.sync(folder).await;
        match self.kind_in_use(session, folder).await? {
            None => Ok(false),
            Some(LockKind::Mutex) => self.force_release_mutex(session, folder).await,
            Some(LockKind::ReadWrite) => self.force_release_rw(session, folder).await,
            Some(LockKind::Semaphore) => self.force_release_semaphore(session, folder).await,
        }
    }

    /// Whether the semaphore folders under `folder` have any child (a lease, or a participant
    /// queued on the internal mutex), both listed in one round trip.
    pub(super) async fn semaphore_in_use(&self, session: &Session, folder: &str) -> Result<bool> {
        let (locks, leases) = (layout::locks_folder(folder), layout::leases_folder(folder));
        retry(
            "listing the semaphore's folders",
            CONNECTION_KEPT_DROPPING,
            |_| {
                let (locks, leases) = (&locks, &leases);
                async move {
                    let (a, b) = tokio::join!(
                        session.client.list_children(locks),
                        session.client.list_children(leases)
                    );
                    let count = |r: std::result::Result<Vec<String>, ZkError>| match r {
                        Ok(children) => Ok(children.len()),
                        Err(ZkError::NoNode) => Ok(0),
                        Err(e) => Err(Retry::zk("listing a semaphore folder", e)),
                    };
                    Ok(count(a)? + count(b)? > 0)
                }
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_read_from_its_node_names() {
        let of = |children: &[&str]| {
            FolderUse::of(&children.iter().map(|c| c.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(of(&[]), FolderUse::default());
        assert!(of(&["_c_a-lock-0000000001"]).mutex);
        assert!(!of(&["_c_a-lock-0000000001"]).read_write);
        assert!(of(&["_c_a-__READ__0000000001"]).read_write);
        assert!(!of(&["_c_a-__WRIT__0000000001"]).mutex);
        assert!(of(&["leases"]).semaphore_folders);
        assert!(of(&["locks"]).semaphore_folders);
        assert!(!of(&["locks"]).mutex);
        assert_eq!(of(&["unrelated", "lock-"]), FolderUse::default());
    }
}
