//! The ZooKeeper backend (docs/design.md §3.4), in Apache Curator's protected `InterProcessMutex`
//! layout (see [`layout`]), so services migrating from Curator share locks with fencelock.
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
//!   held node, set once it has been held for 100 ms,
//!   reports its deletion (a forced release) within that delay. A disconnect marks the Locker's leases suspended; an expired session makes them
//!   lost at once, and the backend makes a new session by itself.
//! - with credentials (`zk://user:password@…`), the session authenticates with the digest
//!   scheme and everything fencelock creates is readable and deletable only by that identity
//!   (see [`settings::ZkSettings::folder_acls`]); docs/zookeeper.md says what that does not
//!   protect.
//!
//! Nothing here blocks a thread; every ZooKeeper error becomes a fencelock error in
//! [`settings::map_error`].

mod heartbeat;
mod layout;
mod settings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zookeeper_client::{
    Acls, Client, CreateMode, EventType, OneshotWatcher, SessionState, WatchedEvent,
};

use self::heartbeat::Heartbeat;
use self::settings::{ZkSettings, map_error};
use super::{AcquireRequest, Attempt, Backend, LeaseEvents, LockInfo, ReleaseWatch, Renewal};
use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::options::{LockerOptions, TestHook};
use crate::signal::{LossReason, lock};
use crate::url::{BackendKind, LockerUrl};

type ZkError = zookeeper_client::Error;

/// How often an operation that failed with ConnectionLoss (outcome unknown, or not sent) is
/// tried again inside one backend call; the client queues requests until it reconnects, and
/// the core bounds the whole call by its operation timeout.
const CONNECTION_RETRIES: usize = 5;

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

/// One ZooKeeper session. A session that ended (expired, closed, refused) is never revived:
/// its ephemeral nodes are gone and a new one is made.
struct Session {
    client: Client,
    generation: u64,
    /// The negotiated session timeout.
    timeout: Duration,
    /// Proves until when the leader keeps this session (see [`heartbeat`]).
    heartbeat: Arc<Heartbeat>,
}

impl Session {
    fn state(&self) -> SessionState {
        self.client.state()
    }

    fn is_ended(&self) -> bool {
        self.state().is_terminated()
    }

    fn is_connected(&self) -> bool {
        matches!(
            self.state(),
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        )
    }
}

#[derive(Clone)]
struct Node {
    path: String,
    czxid: i64,
    /// The session that created it.
    generation: u64,
    held: bool,
    /// The node just ahead in the queue, as the last attempt saw it (waiters only).
    predecessor: Option<String>,
    events: Option<LeaseEvents>,
    /// Its session's heartbeat, which proves until when the node lives.
    heartbeat: Arc<Heartbeat>,
}

enum Cleanup {
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
struct DeleteOnDrop<'a> {
    inner: &'a Inner,
    node: Option<(u64, String)>,
}

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((generation, path)) = self.node.take() {
            self.inner.schedule_delete(generation, &path);
        }
    }
}

enum Position {
    First,
    Behind(String),
    /// Our node is not in the queue (deleted by somebody while we waited).
    Missing,
}

fn is_connection_loss(e: &ZkError) -> bool {
    matches!(e, ZkError::ConnectionLoss)
}

fn is_session_gone(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::SessionExpired | ZkError::ClientClosed | ZkError::AuthFailed
    )
}

/// Waits for a one-shot watch in a task of its own, so whatever happens inside the client's
/// watcher stays contained; `None` if that task ends without an event.
fn spawn_watch(runtime: &Handle, watcher: OneshotWatcher) -> JoinHandle<WatchedEvent> {
    runtime.spawn(watcher.changed())
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

    fn live_session(&self) -> Option<Arc<Session>> {
        lock(&self.current).clone().filter(|s| !s.is_ended())
    }

    fn session_of(&self, generation: u64) -> Option<Arc<Session>> {
        self.live_session().filter(|s| s.generation == generation)
    }

    /// The live session, making a new one if the last one ended.
    async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
        self.ensure_open()?;
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        let _connecting = self.connecting.lock().await;
        self.ensure_open()?;
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        let session = self.connect_session().await?;
        *lock(&self.current) = Some(session.clone());
        if self.closed.load(Ordering::Acquire) {
            lock(&self.current).take();
            return Err(Error::closed("the locker was closed"));
        }
        Ok(session)
    }

    async fn connect_session(self: &Arc<Self>) -> Result<Arc<Session>> {
        let s = &self.settings;
        let mut connector = Client::connector()
            .with_session_timeout(s.session_timeout)
            .with_fail_eagerly();
        if let Some(digest) = s.digest() {
            connector = connector.with_auth("digest", digest);
        }
        let context = format!("connecting to ZooKeeper at {}", s.hosts);
        let connect_started = BootInstant::now();
        let client = connector
            .connect(&s.hosts)
            .await
            .map_err(|e| map_error(&context, e))?;
        let client = if s.chroot.is_empty() {
            client
        } else {
            self.ensure_chroot(&client).await?;
            client.chroot(s.chroot.as_str()).map_err(|_| {
                Error::invalid(format!(
                    "ZooKeeper chroot {:?} is not a valid path",
                    s.chroot
                ))
            })?
        };
        let generation = self.next_generation.fetch_add(1, Ordering::AcqRel) + 1;
        let timeout = client.session_timeout();
        if timeout != s.session_timeout {
            flog!(
                info,
                "ZooKeeper negotiated a session timeout of {timeout:?} (asked for {:?})",
                s.session_timeout
            );
        }
        let states = client.state_watcher();
        let heartbeat = Arc::new(Heartbeat::new(s.tick(timeout), connect_started));
        let session = Arc::new(Session {
            timeout,
            client,
            generation,
            heartbeat: heartbeat.clone(),
        });
        spawn_monitor(&self.runtime, Arc::downgrade(self), generation, states);
        self.runtime.spawn(heartbeat_loop(
            Arc::downgrade(self),
            Arc::downgrade(&session),
            heartbeat,
        ));
        Ok(session)
    }

    /// Creates the chroot (persistent, with the folder ACLs) if it does not exist.
    async fn ensure_chroot(&self, client: &Client) -> Result<()> {
        let chroot = &self.settings.chroot;
        let context = format!("making sure the ZooKeeper chroot {chroot} exists");
        if client
            .check_stat(chroot)
            .await
            .map_err(|e| map_error(&context, e))?
            .is_some()
        {
            return Ok(());
        }
        let acls = self.settings.folder_acls();
        match client
            .mkdir(chroot, &CreateMode::Persistent.with_acls(Acls::new(&acls)))
            .await
        {
            Ok(()) | Err(ZkError::NodeExists) => Ok(()),
            Err(e) => Err(map_error(&context, e)),
        }
    }

    /// Creates the lock's folder and any missing ancestor as CONTAINER nodes.
    async fn make_folder(&self, session: &Session, folder: &str) -> Result<()> {
        let acls = self.settings.folder_acls();
        let options = CreateMode::Container.with_acls(Acls::new(&acls));
        for _ in 0..CONNECTION_RETRIES {
            match session.client.mkdir(folder, &options).await {
                Ok(()) | Err(ZkError::NodeExists) => return Ok(()),
                Err(ZkError::NoNode) => {
                    return Err(Error::backend(format!(
                        "the ZooKeeper chroot {:?} does not exist any more",
                        self.settings.chroot
                    )));
                }
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error("creating the lock folder", e)),
            }
        }
        Err(Error::unavailable(
            "creating the lock folder: the connection kept dropping",
        ))
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
        let prefix = layout::node_prefix(folder, req.owner);
        let data = layout::node_data(req.holder);
        let acls = self.settings.node_acls();
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&acls));
        for attempt in 0..CONNECTION_RETRIES {
            // Both are queued on the session when called, in this order.
            let create = session.client.create(&prefix, &data, &options);
            let (created, listed) = if attempt == 0 {
                let (created, listed) = tokio::join!(create, session.client.list_children(folder));
                (created, listed.ok())
            } else {
                (create.await, None)
            };
            match created {
                Ok((stat, sequence)) => {
                    return Ok((format!("{prefix}{sequence}"), stat.czxid, listed));
                }
                Err(ZkError::NoNode) => self.make_folder(session, folder).await?,
                Err(e) if is_connection_loss(&e) => {
                    if let Some((path, czxid)) = self.find_own(session, folder, req.owner).await? {
                        self.hook("zk_create_found_by_owner");
                        return Ok((path, czxid, None));
                    }
                }
                Err(e) => return Err(map_error("creating the lock node", e)),
            }
        }
        Err(Error::unavailable(
            "creating the lock node: the connection kept dropping",
        ))
    }

    /// Finds `owner`'s node in `folder` after a `sync`, so a server that lags behind the
    /// leader cannot hide a create that was applied.
    async fn find_own(
        &self,
        session: &Session,
        folder: &str,
        owner: OwnerId,
    ) -> Result<Option<(String, i64)>> {
        let mine = layout::node_name_prefix(owner);
        for _ in 0..CONNECTION_RETRIES {
            let listed = async {
                session.client.sync(folder).await?;
                session.client.list_children(folder).await
            }
            .await;
            let children = match listed {
                Ok(children) => children,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error("looking for our lock node", e)),
            };
            let Some(child) = children.into_iter().find(|c| c.starts_with(&mine)) else {
                return Ok(None);
            };
            let path = format!("{folder}/{child}");
            match session.client.check_stat(&path).await {
                Ok(Some(stat)) => return Ok(Some((path, stat.czxid))),
                Ok(None) => return Ok(None),
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error("looking for our lock node", e)),
            }
        }
        Err(Error::unavailable(
            "looking for our lock node: the connection kept dropping",
        ))
    }

    /// The first node of the queue is the holder; the rest are waiters, in order.
    async fn inspect_in(&self, session: &Session, name: &LockName) -> Result<LockInfo> {
        let folder = layout::lock_folder(&self.settings.root, name);
        'again: for _ in 0..CONNECTION_RETRIES {
            let Some(children) = self
                .list(session, &folder, "listing the lock queue")
                .await?
            else {
                return Ok(LockInfo::free(name, None));
            };
            let queue = layout::queue(children);
            let Some((_, first)) = queue.first() else {
                return Ok(LockInfo::free(name, None));
            };
            let (data, stat) = match session.client.get_data(&format!("{folder}/{first}")).await {
                Ok(found) => found,
                // Released meanwhile, or the connection dropped: look again.
                Err(ZkError::NoNode) => continue,
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error("reading the lock holder", e)),
            };
            let mut waiters = Vec::new();
            for (_, node) in queue.iter().skip(1).take(crate::backend::MAX_WAITERS_SHOWN) {
                let holder = match session.client.get_data(&format!("{folder}/{node}")).await {
                    Ok((data, _)) => layout::holder_from_data(&data),
                    // Gave up waiting meanwhile: not a waiter any more.
                    Err(ZkError::NoNode) => continue,
                    Err(e) if is_connection_loss(&e) => continue 'again,
                    Err(e) => return Err(map_error("reading a waiter", e)),
                };
                waiters.push(crate::backend::Waiter {
                    node: node.clone(),
                    holder,
                });
            }
            return Ok(LockInfo {
                name: name.to_string(),
                held: true,
                token: Some(stat.czxid as u64),
                holder: layout::holder_from_data(&data),
                time_left: None,
                waiters,
            });
        }
        Err(Error::unavailable(
            "inspect: the lock queue kept changing or the connection kept dropping",
        ))
    }

    async fn list(
        &self,
        session: &Session,
        folder: &str,
        context: &str,
    ) -> Result<Option<Vec<String>>> {
        for _ in 0..CONNECTION_RETRIES {
            match session.client.list_children(folder).await {
                Ok(children) => return Ok(Some(children)),
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error(context, e)),
            }
        }
        Err(Error::unavailable(format!(
            "{context}: the connection kept dropping"
        )))
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
        for attempt in 0..CONNECTION_RETRIES {
            match session.client.delete(path, None).await {
                Ok(()) => return Ok(true),
                Err(ZkError::NoNode) => return Ok(attempt > 0),
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) if is_session_gone(&e) => return Ok(false),
                Err(e) => {
                    self.schedule_delete(session.generation, path);
                    return Err(map_error("deleting the lock node", e));
                }
            }
        }
        self.schedule_delete(session.generation, path);
        Err(Error::unavailable(
            "deleting the lock node: the connection kept dropping; it is retried in the background",
        ))
    }

    fn schedule_delete(&self, generation: u64, path: &str) {
        let _ = self.cleanup.send(Cleanup::Delete {
            generation,
            path: path.to_string(),
        });
    }

    /// Deletes `owner`'s node (waiting or held): by the path we know, else by searching the
    /// folder for the owner id (an attempt whose outcome is unknown).
    async fn delete_by_owner(self: &Arc<Self>, name: &LockName, owner: OwnerId) -> Result<bool> {
        let node = lock(&self.nodes).remove(&owner);
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

    /// The session `generation` ended: its nodes are gone, its leases lost.
    fn session_ended(&self, generation: u64, state: SessionState) {
        let lost: Vec<LeaseEvents> = {
            let mut nodes = lock(&self.nodes);
            let ended: Vec<OwnerId> = nodes
                .iter()
                .filter(|(_, n)| n.generation == generation)
                .map(|(o, _)| *o)
                .collect();
            ended
                .iter()
                .filter_map(|o| nodes.remove(o))
                .filter_map(|n| n.events)
                .collect()
        };
        if !lost.is_empty() {
            flog!(
                warn,
                "ZooKeeper session ended ({state}): {} lease(s) lost",
                lost.len()
            );
        }
        for events in lost {
            events.lost(LossReason::SessionExpired);
        }
    }

    /// Whether this Locker has lock nodes (waiting or held) on session `generation`.
    fn has_nodes(&self, generation: u64) -> bool {
        lock(&self.nodes)
            .values()
            .any(|n| n.generation == generation)
    }

    /// The handles of session `generation`'s held leases.
    fn held_leases(&self, generation: u64) -> Vec<LeaseEvents> {
        lock(&self.nodes)
            .values()
            .filter(|n| n.generation == generation && n.held)
            .filter_map(|n| n.events.clone())
            .collect()
    }

    /// The heartbeat proved session `generation` alive until `from` + its timeout: the client
    /// deadlines of its held, renewing leases move up to it.
    fn advance_leases(&self, generation: u64, from: BootInstant) {
        for e in self.held_leases(generation) {
            e.advance(from);
        }
    }

    fn set_suspended(&self, generation: u64, suspended: bool) {
        for e in self.held_leases(generation) {
            e.set_suspended(suspended);
        }
    }
}

/// Sends one session's heartbeats (see [`heartbeat`]) while this Locker has lock nodes on it,
/// and for one session timeout after the last one went, so that locking again soon finds the
/// proof fresh. Ends with the session.
async fn heartbeat_loop(inner: Weak<Inner>, session: Weak<Session>, heartbeat: Arc<Heartbeat>) {
    let pause = heartbeat.gap() / 2;
    let mut busy_at = BootInstant::now();
    loop {
        let Some(this) = session.upgrade() else {
            return;
        };
        if this.is_ended() {
            return;
        }
        let (generation, linger) = (this.generation, this.timeout);
        drop(this);
        let busy = {
            let Some(inner) = inner.upgrade() else { return };
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            inner.has_nodes(generation)
        };
        if busy {
            busy_at = BootInstant::now();
        } else if busy_at.elapsed() > linger {
            // Idle: sleep until a node is made (checking now and then that the session lives).
            let _ = tokio::time::timeout(Duration::from_secs(1), heartbeat.wake.notified()).await;
            continue;
        }
        let sent = BootInstant::now();
        let outcome = {
            let Some(this) = session.upgrade() else {
                return;
            };
            let mut check = this.client.new_multi_writer();
            match check.add_check_version("/", -1) {
                Ok(()) => tokio::time::timeout(this.timeout, check.commit())
                    .await
                    .map(|r| r.map(drop).map_err(ZkError::from)),
                Err(e) => Ok(Err(e)),
            }
        };
        match outcome {
            Ok(Ok(_)) => {
                let moved = heartbeat.answered(sent, BootInstant::now());
                if let Some(inner) = inner.upgrade() {
                    if let Some(from) = moved {
                        inner.advance_leases(generation, from);
                    }
                    inner.hook("zk_heartbeat_confirmed");
                }
            }
            Ok(Err(e)) if is_session_gone(&e) => {
                heartbeat.failed(map_error("the session heartbeat", e).to_string());
                return;
            }
            Ok(Err(e)) => heartbeat.failed(map_error("the session heartbeat", e).to_string()),
            Err(_) => heartbeat.failed("the session heartbeat got no answer".to_string()),
        }
        tokio::time::sleep(pause).await;
    }
}

/// Spawns [`monitor`]; a plain function, so the async functions that call it do not hold its
/// future (monitor → reconnect → session → connect_session would otherwise be a cycle of
/// opaque types).
fn spawn_monitor(
    runtime: &Handle,
    weak: Weak<Inner>,
    generation: u64,
    states: zookeeper_client::StateWatcher,
) {
    runtime.spawn(monitor(weak, generation, states));
}

/// Follows one session's state: suspends and resumes its leases, and on its end makes them
/// lost and gets a new session.
async fn monitor(weak: Weak<Inner>, generation: u64, mut states: zookeeper_client::StateWatcher) {
    let mut state = states.state();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        match state {
            SessionState::Disconnected => {
                flog!(
                    warn,
                    "disconnected from ZooKeeper; leases are suspended until it reconnects"
                );
                inner.set_suspended(generation, true);
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                inner.set_suspended(generation, false);
                let _ = inner.cleanup.send(Cleanup::Reconnected);
            }
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => {
                inner.session_ended(generation, state);
                if !inner.closed.load(Ordering::Acquire) {
                    inner.runtime.spawn(reconnect(Arc::downgrade(&inner)));
                }
                return;
            }
        }
        drop(inner);
        state = states.changed().await;
    }
}

/// Gets a new session after the last one ended, retrying with back-off while the ensemble
/// cannot be reached.
async fn reconnect(weak: Weak<Inner>) {
    let mut delay = Duration::from_millis(100);
    loop {
        let Some(inner) = weak.upgrade() else { return };
        match inner.session().await {
            Ok(_) => return,
            Err(e) if e.code() == crate::ErrorCode::Closed => return,
            Err(e) => flog!(warn, "cannot make a new ZooKeeper session yet: {e}"),
        }
        drop(inner);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Deletes nodes that must go, retrying while their session lives.
async fn cleanup_task(weak: Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Cleanup>) {
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
                let mut nodes = lock(&inner.nodes);
                if let Some(node) = nodes.get(&owner).filter(|n| n.held) {
                    pending.push((node.generation, node.path.clone()));
                    nodes.remove(&owner);
                }
            }
            Cleanup::Reconnected => {
                // Leases that ended while the node could not be deleted (a release that
                // failed, a loss noticed by the deadline watchdog alone).
                let mut nodes = lock(&inner.nodes);
                let gone: Vec<OwnerId> = nodes
                    .iter()
                    .filter(|(_, n)| n.held && n.events.as_ref().is_some_and(|e| !e.is_held()))
                    .map(|(o, _)| *o)
                    .collect();
                for owner in gone {
                    if let Some(node) = nodes.remove(&owner) {
                        pending.push((node.generation, node.path));
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

/// How long a lease is held before the watch on its own node is set. Most critical sections
/// are shorter, and skipping the watch for them saves a request, a watch notification and two
/// tasks per acquisition (the uncontended cycle against Curator's, bench/RESULTS.md). A node
/// deleted before the watch is set is seen when it is set (the `exists` finds it gone), so a
/// forced release is noticed within this delay at worst.
const OWN_NODE_WATCH_DELAY: Duration = Duration::from_millis(100);

/// Watches a held lease's own node: its deletion (a forced release) or the session's end
/// makes the lease lost within [`OWN_NODE_WATCH_DELAY`], instead of at the next renewal.
async fn watch_own_node(
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

/// A waiter's watch on its immediate predecessor in the queue.
struct PredecessorWatch {
    inner: Weak<Inner>,
    owner: OwnerId,
    /// The predecessor watched, and the task waiting for its event.
    armed: Option<(String, JoinHandle<WatchedEvent>)>,
    /// The predecessor was already gone (or unknown) when arming: the next wait returns at once.
    fired: bool,
}

impl PredecessorWatch {
    /// Watches the predecessor the last attempt saw, unless it is watched already.
    async fn arm(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            self.fired = true;
            return;
        };
        let node = lock(&inner.nodes).get(&self.owner).cloned();
        let Some((predecessor, generation)) =
            node.and_then(|n| n.predecessor.map(|p| (p, n.generation)))
        else {
            self.fired = true;
            return;
        };
        if let Some((watched, task)) = &self.armed
            && *watched == predecessor
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
        match session.client.check_and_watch_stat(&predecessor).await {
            Ok((Some(_), watcher)) => {
                self.armed = Some((predecessor, spawn_watch(&inner.runtime, watcher)))
            }
            // Gone already (the watch for its creation is dropped), or the connection failed:
            // the waiter looks at the queue again at once.
            Ok((None, _)) | Err(_) => self.fired = true,
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

    fn track(&self, _name: &LockName, owner: OwnerId, events: LeaseEvents) {
        let inner = &self.inner;
        let node = {
            let mut nodes = lock(&inner.nodes);
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
        let inner = &self.inner;
        let session = inner.session().await?;
        let folder = layout::lock_folder(&inner.settings.root, req.name);
        for _ in 0..3 {
            let known = {
                let mut nodes = lock(&inner.nodes);
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
                    let (path, czxid, listed) = inner.create_node(&session, &folder, req).await?;
                    if czxid <= 0 {
                        let _ = inner.delete_own(&session, &path).await;
                        return Err(Error::internal(
                            "the ZooKeeper server answered a create without its stat",
                        ));
                    }
                    if layout::sequence(&path).is_none() {
                        // ZooKeeper's sequence is a signed 32-bit counter per folder: past 2^31
                        // creates it goes negative, and the queue order with it. Such a node
                        // never holds (nobody counts it); say so instead of queueing forever.
                        let _ = inner.delete_own(&session, &path).await;
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
                    lock(&inner.nodes).insert(req.owner, node);
                    session.heartbeat.wake.notify_one();
                    (path, listed)
                }
            };
            let position = match listed {
                Some(children) => position_in(children, &folder, &path),
                None => inner.position(&session, &folder, &path).await?,
            };
            let acquired = {
                let mut nodes = lock(&inner.nodes);
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

    async fn renew(&self, _name: &LockName, owner: OwnerId, _ttl: Duration) -> Result<Renewal> {
        let inner = &self.inner;
        inner.ensure_open()?;
        let Some(node) = lock(&inner.nodes).get(&owner).filter(|n| n.held).cloned() else {
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
        // One heartbeat per session renews every lease of it; the own-node watch reports a
        // node deleted by somebody else.
        session.heartbeat.next().await?;
        Ok(Renewal::Renewed)
    }

    fn expiry_counted_from(&self, owner: OwnerId) -> Option<BootInstant> {
        let nodes = lock(&self.inner.nodes);
        // A node forgotten already (its session ended) proves nothing: count from boot.
        Some(nodes.get(&owner).map_or_else(
            || BootInstant::now().saturating_sub(BootInstant::now().since_boot()),
            |n| n.heartbeat.proven_from(),
        ))
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.inner.delete_by_owner(name, owner).await
    }

    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<()> {
        self.inner.delete_by_owner(name, owner).await.map(|_| ())
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let inner = &self.inner;
        let session = inner.session().await?;
        inner.inspect_in(&session, name).await
    }

    /// The lock folders under the root whose decoded names start with `prefix` (folders are
    /// containers: the server removes them some time after they empty, so a free lock may
    /// still have one; only held locks are listed).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        let inner = &self.inner;
        let session = inner.session().await?;
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

    /// Deletes the first node of the queue (the holder's, whoever's it is): its session's
    /// watch on it fires and the holder is told at once; the next waiter's watch on its
    /// predecessor fires too, so it takes the lock.
    async fn force_release(&self, name: &LockName) -> Result<bool> {
        let inner = &self.inner;
        let session = inner.session().await?;
        let folder = layout::lock_folder(&inner.settings.root, name);
        for _ in 0..CONNECTION_RETRIES {
            let Some(children) = inner
                .list(&session, &folder, "listing the lock queue")
                .await?
            else {
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
                Ok(()) => return Ok(true),
                // Released meanwhile (then the next one holds: look again), or the outcome
                // of a delete is unknown (look again: a first node gone is what we wanted).
                Err(ZkError::NoNode) => continue,
                Err(e) if is_connection_loss(&e) => continue,
                Err(e) => return Err(map_error("deleting the holder's lock node", e)),
            }
        }
        Err(Error::unavailable(
            "force release: the lock queue kept changing or the connection kept dropping",
        ))
    }

    async fn watch_for(&self, _name: &LockName, owner: OwnerId) -> Result<Box<dyn ReleaseWatch>> {
        self.inner.ensure_open()?;
        let mut watch = PredecessorWatch {
            inner: Arc::downgrade(&self.inner),
            owner,
            armed: None,
            fired: false,
        };
        watch.arm().await;
        Ok(Box::new(watch))
    }

    async fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        // The last clone of the client going away closes the session; its ephemeral nodes
        // go with it.
        let session = lock(&inner.current).take();
        drop(session);
        lock(&inner.nodes).clear();
    }
}
