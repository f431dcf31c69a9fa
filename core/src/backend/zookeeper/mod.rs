//! The ZooKeeper backend (docs/design.md §3.4), in the layouts of Apache Curator's recipes, so
//! services migrating from Curator share locks with fencelock: the mutex is Curator's protected
//! `InterProcessMutex` (see [`layout`]), the read-write lock its `InterProcessReadWriteLock`
//! ([`rwlock`]), the semaphore its `InterProcessSemaphoreV2` ([`semaphore`]), all three in the
//! one folder of a name, which is one kind at a time ([`kinds`]). What follows is the mutex's;
//! the others differ where their files say.
//!
//! - acquire: create `…/_c_<owner uuid>-lock-` EPHEMERAL_SEQUENTIAL (the folder, a CONTAINER,
//!   is made again if the server removed it) and list the children, both sent at once (one
//!   round trip: the session answers in order, so the listing has the new node); the lowest
//!   sequence holds.
//!   A waiter keeps its node, and its place, across the acquire loop's attempts (the core keeps
//!   the owner id after a `Held` answer) and watches only its immediate predecessor, so one
//!   release wakes one waiter, in FIFO order. A create whose reply was lost to a disconnect is
//!   found again by the owner id in its name (after a `sync`, so a lagging server cannot hide
//!   it); a waiter that gives up, times out or is cancelled deletes its node (`abandon`).
//! - token: the node's czxid, global to the ensemble, never reused, and ordered like the
//!   queue: a later holder's node was created after this holder's (it was behind it in the
//!   queue, or created once this one held).
//! - liveness is the session. The lease's ttl is the negotiated session timeout
//!   ([`Backend::lease_ttl`]). One heartbeat per session, a write the leader must commit,
//!   proves until when the leader keeps the session ([`heartbeat`], docs/zookeeper.md), and the
//!   client deadline of every held lease counts from that proof. One standing exists-watch per
//!   held node, set once it has been held for 100 ms, reports its deletion (a forced release)
//!   within that delay. A disconnect marks the Locker's leases suspended; an expired session
//!   makes them lost at once, and the backend makes a new session by itself.
//! - with credentials (`zk://user:password@…`), the session authenticates with the digest
//!   scheme and everything fencelock creates is readable and deletable only by that identity
//!   (see [`settings::ZkSettings::folder_acls`]); docs/zookeeper.md says what that does not
//!   protect.
//!
//! Nothing here blocks a thread; every ZooKeeper error becomes a fencelock error in
//! [`error::map_error`].
//!
//! The parts: [`session`] (the session's lifecycle and heartbeats), [`queue`] (the lock
//! queue's operations, for the mutex and the read-write lock), [`rwlock`] (the read-write
//! lock's order and predicates), [`semaphore`] and [`semaphore_join`], [`kinds`] (what a name is
//! in use as), [`watches`] (on a held node, on what a waiter waits for), [`cleanup`]
//! (deleting nodes in the background), [`error`] (mapping errors, retrying after a dropped
//! connection), [`heartbeat`] (the proof that the leader keeps the session), [`layout`] and
//! [`settings`]; the [`Backend`] implementation is here.

mod cleanup;
mod error;
mod heartbeat;
mod kinds;
mod layout;
mod queue;
mod rwlock;
mod semaphore;
mod semaphore_join;
mod session;
mod settings;
mod watches;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use self::cleanup::{Cleanup, cleanup_task};
use self::heartbeat::Heartbeat;
use self::session::Session;
use self::settings::ZkSettings;
use self::watches::{PredecessorWatch, watch_own_node};
use super::{AcquireRequest, Attempt, Backend, LeaseEvents, LockInfo, ReleaseWatch, Renewal};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::options::{LockerOptions, TestHook};
use crate::signal::LossReason;
use crate::sync::unpoisoned;
use crate::url::{BackendKind, LockerUrl};

pub struct ZkBackend {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ZkSettings,
    deployment_id: String,
    hook: Option<TestHook>,
    runtime: Handle,
    /// The current session; replaced only after it ended.
    current: Mutex<Option<Arc<Session>>>,
    /// Serializes making a new session.
    connecting: tokio::sync::Mutex<()>,
    next_generation: AtomicU64,
    closed: AtomicBool,
    /// This Locker's lock nodes, waiting or held, by owner id.
    nodes: Mutex<HashMap<OwnerId, Node>>,
    /// Nodes to delete in the background (a lost lease's, a failed release's).
    cleanup: mpsc::UnboundedSender<Cleanup>,
}

/// One of this Locker's lock nodes, waiting or held.
#[derive(Clone)]
struct Node {
    /// The node the lease holds by: a mutex's or read-write lock's node, a semaphore's lease
    /// node; a semaphore waiter's `locks` node until it makes its lease node.
    path: String,
    czxid: i64,
    /// The session that created it.
    generation: u64,
    held: bool,
    /// What a waiter watches, as its last attempt saw it.
    watch: Option<WatchTarget>,
    /// A semaphore waiter's `locks` node (its place on Curator's internal mutex) while `path`
    /// is its lease node waiting for a permit.
    queue: Option<String>,
    events: Option<LeaseEvents>,
    /// Its session's heartbeat, which proves until when the node lives.
    heartbeat: Arc<Heartbeat>,
}

impl Node {
    /// Every node it has, generation with each: what to delete when it ends.
    fn paths(&self) -> Vec<(u64, String)> {
        std::iter::once(&self.path)
            .chain(&self.queue)
            .map(|p| (self.generation, p.clone()))
            .collect()
    }
}

/// Whether the node at `path` created at `czxid` still exists, read after a sync so that the
/// answer is no older than the call (a lagging server of an ensemble would still show a node
/// deleted through another).
async fn node_still_there(session: &Session, path: &str, czxid: i64) -> Result<bool> {
    const CONTEXT: &str = "checking that the lock node is still ours";
    session
        .client
        .sync(path)
        .await
        .map_err(|e| self::error::map_error(CONTEXT, e))?;
    match session.client.check_stat(path).await {
        Ok(stat) => Ok(stat.is_some_and(|s| s.czxid == czxid)),
        Err(e) => Err(self::error::map_error(CONTEXT, e)),
    }
}

/// What a waiter watches to learn that its turn may have come.
#[derive(Clone, Debug, PartialEq, Eq)]
enum WatchTarget {
    /// The node ahead of it (its deletion): the mutex's, the read-write lock's, a semaphore's
    /// internal mutex.
    Node(String),
    /// The children of a semaphore's `leases` folder, of which the last attempt saw `seen`.
    Children { path: String, seen: usize },
}

impl ZkBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let settings = ZkSettings::from_url(url)?;
        let mut hosts: Vec<&str> = settings.hosts.split(',').collect();
        hosts.sort_unstable();
        let deployment_id = format!(
            "zookeeper:{}{}{}",
            hosts.join(","),
            settings.chroot,
            settings.root
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            settings,
            deployment_id,
            hook: options.test_hook.clone(),
            runtime: Handle::current(),
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            next_generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            nodes: Mutex::new(HashMap::new()),
            cleanup: tx,
        });
        inner.session().await?;
        inner
            .runtime
            .spawn(cleanup_task(Arc::downgrade(&inner), rx));
        Ok(ZkBackend { inner })
    }
}

impl Inner {
    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        Ok(())
    }

    fn hook(&self, point: &'static str) {
        if let Some(hook) = &self.hook {
            (hook.0)(point);
        }
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    fn deployment_id(&self) -> &str {
        &self.inner.deployment_id
    }

    /// The negotiated session timeout: the session is the lease.
    fn lease_ttl(&self, _requested: Duration) -> Duration {
        self.inner
            .live_session()
            .map_or(self.inner.settings.session_timeout, |s| s.timeout)
    }

    fn server_expiry(&self) -> bool {
        false
    }

    /// Every kind, in the layouts of Curator's recipes.
    fn offers(&self, _kind: LockKind) -> bool {
        true
    }

    fn track(&self, _name: &LockName, _mode: LockMode, owner: OwnerId, events: LeaseEvents) {
        let inner = &self.inner;
        let node = {
            let mut nodes = unpoisoned(&inner.nodes);
            let Some(node) = nodes.get_mut(&owner) else {
                // The session ended between the answer and now.
                drop(nodes);
                events.lost(LossReason::SessionExpired);
                return;
            };
            node.events = Some(events.clone());
            node.clone()
        };
        match inner.session_of(node.generation) {
            None => {
                events.lost(LossReason::SessionExpired);
                return;
            }
            Some(session) if !session.is_connected() => events.set_suspended(true),
            Some(_) => {}
        }
        let cleanup = inner.cleanup.clone();
        events.on_lost(move |_| {
            let _ = cleanup.send(Cleanup::Lost(owner));
        });
        inner.runtime.spawn(watch_own_node(
            Arc::downgrade(inner),
            node.path,
            node.czxid,
            node.generation,
            events,
        ));
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        match req.mode {
            LockMode::Permit { permits } => self.inner.try_acquire_permit(req, permits).await,
            LockMode::Exclusive | LockMode::Read | LockMode::Write => {
                self.inner.try_acquire(req).await
            }
        }
    }

    async fn renew(
        &self,
        _name: &LockName,
        _mode: LockMode,
        owner: OwnerId,
        _ttl: Duration,
    ) -> Result<Renewal> {
        let inner = &self.inner;
        inner.ensure_open()?;
        let Some(node) = unpoisoned(&inner.nodes)
            .get(&owner)
            .filter(|n| n.held)
            .cloned()
        else {
            return Ok(Renewal::NotOurs);
        };
        let Some(session) = inner.session_of(node.generation) else {
            // The session ended and the monitor has not said so yet: say why first.
            if let Some(events) = &node.events {
                events.lost(LossReason::SessionExpired);
            }
            return Ok(Renewal::NotOurs);
        };
        if !session.is_connected() {
            return Err(Error::unavailable(
                "disconnected from ZooKeeper: the lease is suspended until the session reconnects",
            ));
        }
        // One heartbeat per session renews every lease of it. The heartbeat says nothing of
        // the node: the own-node watch reports its deletion by somebody else, but maybe after
        // this answer (the watch is set a moment after the grant, and the holder's server may
        // apply a delete made on another one later). So the node is read too, after a sync:
        // a forced release that returned before this renewal began is seen.
        let (beat, present) = tokio::join!(
            session.heartbeat.next(),
            node_still_there(&session, &node.path, node.czxid)
        );
        beat?;
        if present? {
            Ok(Renewal::Renewed)
        } else {
            Ok(Renewal::NotOurs)
        }
    }

    fn expiry_counted_from(&self, owner: OwnerId) -> Option<BootInstant> {
        let nodes = unpoisoned(&self.inner.nodes);
        // A node forgotten already (its session ended) proves nothing: count from boot.
        Some(nodes.get(&owner).map_or_else(
            || BootInstant::now().saturating_sub(BootInstant::now().since_boot()),
            |n| n.heartbeat.proven_from(),
        ))
    }

    async fn release(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<bool> {
        self.inner.delete_by_owner(name, mode, owner).await
    }

    /// Deletes the waiter's node (both, for a semaphore waiter holding Curator's internal
    /// mutex with a lease node).
    async fn abandon(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<()> {
        self.inner
            .delete_by_owner(name, mode, owner)
            .await
            .map(|_| ())
    }

    /// Read after a sync: this Locker's server may lag behind the one that just served a
    /// holder (an ensemble), and without it an observer could read a lock just taken elsewhere
    /// as free. Best effort, as for force release: when the sync fails, so does the read.
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let inner = &self.inner;
        let session = inner.session().await?;
        let _ = session
            .client
            .sync(&layout::lock_folder(&inner.settings.root, name))
            .await;
        inner.inspect_in(&session, name).await
    }

    /// The lock folders under the root whose decoded names start with `prefix` (folders are
    /// containers: the server removes them some time after they empty, so a free lock may
    /// still have one; only held locks are listed).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        let inner = &self.inner;
        let session = inner.session().await?;
        // One sync serves the whole listing: it brings this Locker's server up to the leader.
        let _ = session.client.sync(&inner.settings.root).await;
        let Some(folders) = inner
            .list(&session, &inner.settings.root, "listing the lock folders")
            .await?
        else {
            return Ok(Vec::new());
        };
        let encoded_prefix = crate::name::encode(prefix);
        let mut names: Vec<LockName> = folders
            .into_iter()
            .filter(|f| f.starts_with(&encoded_prefix))
            .filter_map(|f| crate::name::decode(&f).and_then(|n| LockName::new(n).ok()))
            .collect();
        names.sort();
        let mut locks = Vec::new();
        for name in names {
            if locks.len() >= limit {
                break;
            }
            let info = inner.inspect_in(&session, &name).await?;
            if info.held {
                locks.push(info);
            }
        }
        Ok(locks)
    }

    /// Deletes every holder's node, whatever the kind (see [`kinds`]): their own-node watches
    /// tell them at once, and the next waiters' watches wake them.
    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let inner = &self.inner;
        let session = inner.session().await?;
        inner.force_release_in(&session, name).await
    }

    async fn watch_for(
        &self,
        _name: &LockName,
        _mode: LockMode,
        owner: OwnerId,
    ) -> Result<Box<dyn ReleaseWatch>> {
        self.inner.ensure_open()?;
        let mut watch = PredecessorWatch::new(Arc::downgrade(&self.inner), owner);
        watch.arm().await;
        Ok(Box::new(watch))
    }

    async fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        // The last clone of the client going away closes the session; its ephemeral nodes
        // go with it.
        let session = unpoisoned(&inner.current).take();
        drop(session);
        unpoisoned(&inner.nodes).clear();
    }
}
