//! Joining a semaphore's `locks` queue: the check of N and of the name's kind, and storing N
//! while the semaphore is idle (the argument is in [`semaphore`](super::semaphore)'s header).

use zookeeper_client::{Acls, CreateMode, MultiWriteResult, Stat};

use super::error::{
    CONNECTION_KEPT_DROPPING, Retry, ZkError, is_connection_loss, map_error, retry,
};
use super::layout::{leases_folder, locks_folder};
use super::semaphore::{permits_data, stored_permits};
use super::session::Session;
use super::{Inner, layout};
use crate::backend::AcquireRequest;
use crate::error::{Error, Result};
use crate::mode::{LockKind, permits_conflict};

/// How often a join is tried again when other participants changed the folders meanwhile.
const JOIN_ATTEMPTS: usize = 8;

/// The outcome of one try at joining.
enum Joined {
    /// Our `locks` node.
    In(String),
    /// The folders changed under us: try again.
    Again,
    /// The semaphore is in use by participants that store no N (Curator's alone): join it
    /// without a check.
    Unchecked,
}

impl Inner {
    /// Takes a place in the `locks` queue of the semaphore in `folder`; returns our node.
    pub(super) async fn join_semaphore(
        &self,
        session: &Session,
        req: &AcquireRequest<'_>,
        permits: u32,
        folder: &str,
    ) -> Result<String> {
        let mut unchecked = false;
        for _ in 0..JOIN_ATTEMPTS {
            match self
                .try_join(session, req, permits, folder, unchecked)
                .await?
            {
                Joined::In(path) => return Ok(path),
                Joined::Again => {}
                Joined::Unchecked => unchecked = true,
            }
        }
        Err(Error::unavailable(format!(
            "semaphore {:?}: other participants kept changing its folders while it joined",
            req.name.as_str()
        )))
    }

    /// Creates our `locks` node and, in the same round trip, reads the stored N and lists the
    /// folder (for the kind): both see our node, so a change of N or another kind that they do
    /// not show came after it, and refuses itself.
    async fn try_join(
        &self,
        session: &Session,
        req: &AcquireRequest<'_>,
        permits: u32,
        folder: &str,
        unchecked: bool,
    ) -> Result<Joined> {
        let locks = &locks_folder(folder);
        let prefix = &layout::node_prefix(locks, req.owner, layout::LOCK_LABEL);
        let data = &layout::node_data(req.holder);
        let acls = self.settings.node_acls();
        let options = &CreateMode::EphemeralSequential.with_acls(Acls::new(&acls));
        // Sent in this order on the session, so both reads come after the create.
        let (created, stored, listing) = tokio::join!(
            session.client.create(prefix, data, options),
            session.client.get_data(locks),
            session.client.list_children(folder)
        );
        let (path, reads) = match created {
            Ok((_, sequence)) => (format!("{prefix}{sequence}"), Some((stored, listing))),
            // No `locks` folder yet (or it was removed, empty): store N, making it, unless the
            // name is plainly in use as another kind (then nothing of ours exists to undo).
            Err(ZkError::NoNode) => {
                let children = listing.unwrap_or_default();
                self.refuse_other_kind(
                    session,
                    req.name,
                    folder,
                    &children,
                    LockKind::Semaphore,
                    &[],
                )
                .await?;
                return self.set_permits(session, req, permits, folder).await;
            }
            Err(e) if is_connection_loss(&e) => {
                match self.find_own(session, locks, req.owner).await? {
                    // Our create went through; its reads' answers are lost with it.
                    Some((path, _)) => (path, None),
                    None => return Ok(Joined::Again),
                }
            }
            Err(e) => return Err(map_error("creating the semaphore queue node", e)),
        };
        if layout::sequence(&path).is_none() {
            let _ = self.delete_own(session, &path).await;
            return Err(wrapped(req.name.as_str(), locks));
        }
        let (stored, children) = match reads {
            Some((Ok((data, _)), Ok(children))) => (stored_permits(&data), children),
            _ => match self.read_join(session, folder).await {
                Ok(read) => read,
                Err(e) => {
                    let _ = self.delete_own(session, &path).await;
                    return Err(e);
                }
            },
        };
        self.refuse_other_kind(
            session,
            req.name,
            folder,
            &children,
            LockKind::Semaphore,
            &[&path],
        )
        .await?;
        if stored == Some(permits) || (stored.is_none() && unchecked) {
            return Ok(Joined::In(path));
        }
        // Another N, or none stored: leave, then store ours if the semaphore is idle.
        let _ = self.delete_own(session, &path).await;
        self.set_permits(session, req, permits, folder).await
    }

    /// The stored N and the folder's listing, read again.
    async fn read_join(
        &self,
        session: &Session,
        folder: &str,
    ) -> Result<(Option<u32>, Vec<String>)> {
        let locks = &locks_folder(folder);
        retry(
            "joining the semaphore",
            CONNECTION_KEPT_DROPPING,
            |_| async move {
                let (stored, listing) = tokio::join!(
                    session.client.get_data(locks),
                    session.client.list_children(folder)
                );
                let stored = match stored {
                    Ok((data, _)) => stored_permits(&data),
                    Err(ZkError::NoNode) => None,
                    Err(e) => return Err(Retry::zk("reading the semaphore's permits", e)),
                };
                match listing {
                    Ok(children) => Ok((stored, children)),
                    Err(ZkError::NoNode) => Ok((stored, Vec::new())),
                    Err(e) => Err(Retry::zk("listing the lock folder", e)),
                }
            },
        )
        .await
    }

    /// Stores N and joins, in one `multi` that makes the `locks` and `leases` folders again
    /// (deleting them first where they exist) with our `locks` node: it fails if either has a
    /// child, so N changes only while nobody holds or waits.
    async fn set_permits(
        &self,
        session: &Session,
        req: &AcquireRequest<'_>,
        permits: u32,
        folder: &str,
    ) -> Result<Joined> {
        let (locks, leases) = (&locks_folder(folder), &leases_folder(folder));
        let (locks_now, leases_now) = tokio::join!(
            session.client.get_data(locks),
            session.client.check_stat(leases)
        );
        let locks_now: Option<(Option<u32>, Stat)> = match locks_now {
            Ok((data, stat)) => Some((stored_permits(&data), stat)),
            Err(ZkError::NoNode) => None,
            Err(e) if is_connection_loss(&e) => return Ok(Joined::Again),
            Err(e) => return Err(map_error("reading the semaphore's permits", e)),
        };
        let leases_now = match leases_now {
            Ok(stat) => stat,
            Err(e) if is_connection_loss(&e) => return Ok(Joined::Again),
            Err(e) => return Err(map_error("reading the semaphore's leases", e)),
        };
        let in_use = locks_now.as_ref().is_some_and(|(_, s)| s.num_children > 0)
            || leases_now.as_ref().is_some_and(|s| s.num_children > 0);
        if in_use {
            return match locks_now.and_then(|(stored, _)| stored) {
                // Stored meanwhile by somebody who agrees: join.
                Some(n) if n == permits => Ok(Joined::Again),
                Some(n) => Err(permits_conflict(req.name.as_str(), permits, n)),
                None => Ok(Joined::Unchecked),
            };
        }
        let folder_acls = self.settings.folder_acls();
        let folder_options = &CreateMode::Container.with_acls(Acls::new(&folder_acls));
        let node_acls = self.settings.node_acls();
        let node_options = &CreateMode::EphemeralSequential.with_acls(Acls::new(&node_acls));
        let prefix = &layout::node_prefix(locks, req.owner, layout::LOCK_LABEL);
        let mut multi = session.client.new_multi_writer();
        let mut build = || -> std::result::Result<(), ZkError> {
            if let Some((_, stat)) = &locks_now {
                multi.add_delete(locks, Some(stat.version))?;
            }
            multi.add_create(locks, &permits_data(permits), folder_options)?;
            if leases_now.is_some() {
                multi.add_delete(leases, None)?;
            }
            multi.add_create(leases, &[], folder_options)?;
            multi.add_create(prefix, &layout::node_data(req.holder), node_options)
        };
        build().map_err(|e| map_error("storing the semaphore's permits", e))?;
        // Sent in this order on the session, so the listing comes after the multi.
        let (committed, listing) =
            tokio::join!(multi.commit(), session.client.list_children(folder));
        let path = match committed.map_err(ZkError::from) {
            Ok(mut results) => match results.pop() {
                Some(MultiWriteResult::Create { path, .. }) => path,
                _ => {
                    return Err(Error::internal(
                        "the ZooKeeper server answered a multi without its create",
                    ));
                }
            },
            // The lock folder itself is missing (a container removed once empty).
            Err(ZkError::NoNode) => {
                self.make_folder(session, folder).await?;
                return Ok(Joined::Again);
            }
            // Somebody joined, left or stored N meanwhile: look again.
            Err(ZkError::NotEmpty | ZkError::NodeExists | ZkError::BadVersion) => {
                return Ok(Joined::Again);
            }
            Err(e) if is_connection_loss(&e) => {
                // Applied (our node exists, N is stored) or not at all: the next try tells,
                // joining by the ordinary path.
                if let Some((path, _)) = self.find_own(session, locks, req.owner).await? {
                    let _ = self.delete_own(session, &path).await;
                }
                return Ok(Joined::Again);
            }
            Err(e) => return Err(map_error("storing the semaphore's permits", e)),
        };
        let children = match listing {
            Ok(children) => children,
            Err(_) => self.read_join(session, folder).await?.1,
        };
        self.refuse_other_kind(
            session,
            req.name,
            folder,
            &children,
            LockKind::Semaphore,
            &[&path],
        )
        .await?;
        Ok(Joined::In(path))
    }
}

fn wrapped(name: &str, folder: &str) -> Error {
    Error::backend(format!(
        "semaphore {name:?}: ZooKeeper's sequence counter of its folder {folder} has passed \
         2^31 and wrapped; no new node can queue there. Delete the folder once nobody holds or \
         waits (it is made again, counting from 0)"
    ))
}
