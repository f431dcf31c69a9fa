//! The one trait every backend implements, and the factory that picks one from a URL.
//!
//! The trait's primitives are small: try once to acquire, renew, release, inspect, and
//! subscribe to release notifications. Waiting, back-off, deadlines and renewal live once,
//! above it, in [`crate::locker`] and [`crate::lease`].

// Each backend is built with its cargo feature (core/Cargo.toml); Redlock runs on the Redis
// backend's connections and scripts, so it comes with `redis`.
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redis")]
pub(crate) mod redlock;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub(crate) mod sql;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

mod lease_events;
pub use lease_events::LeaseEvents;
pub(crate) use lease_events::TrackedLease;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::holder::HolderDescription;
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::url::{BackendKind, LockerUrl};

/// One attempt to take a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Taken, with this fencing token. `origin` identifies the stored data the token was
    /// minted from, where the backend keeps such a mark (Redis, per lock): a fence that sees it
    /// change while tokens did not continue above its highest warns of two servers behind one
    /// address ([`crate::fence`]).
    Acquired { token: u64, origin: Option<u64> },
    /// Somebody else holds it; `expires_in` is the server's remaining ttl where known.
    Held { expires_in: Option<Duration> },
}

/// The answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lock is not ours any more (expired, released by an operator, taken over).
    NotOurs,
}

/// What a backend knows about one lock name, read without acquiring it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub name: String,
    /// Somebody holds it, in any mode.
    pub held: bool,
    /// The last token minted for the name (a mutex's holder's, while held).
    pub token: Option<u64>,
    /// A mutex holder's description (JSON with host, pid, language and the user's text);
    /// [`LockInfo::holder_description`] parses it. The other kinds list theirs in `leases`.
    pub holder: Option<String>,
    /// A held mutex's time left on the server's clock (TTL backends).
    pub time_left: Option<Duration>,
    /// The waiters queued behind the holders, first in line first, where the backend keeps
    /// them (ZooKeeper's queue; the registered waiters of a semaphore or read-write lock on TTL
    /// backends). At most [`MAX_WAITERS_SHOWN`] are read.
    pub waiters: Vec<Waiter>,
    /// What the name is used as ([`LockKind::Mutex`] for a name nobody uses).
    pub kind: LockKind,
    /// A semaphore's number of permits, as its holders and waiters stored it.
    pub permits: Option<u32>,
    /// Every holder of a semaphore or read-write lock (empty for a mutex: see `holder`).
    pub leases: Vec<LeaseInfo>,
}

impl LockInfo {
    /// A lock nobody holds.
    pub fn free(name: &LockName, token: Option<u64>) -> Self {
        LockInfo {
            name: name.to_string(),
            held: false,
            token,
            holder: None,
            time_left: None,
            waiters: Vec::new(),
            kind: LockKind::Mutex,
            permits: None,
            leases: Vec::new(),
        }
    }

    /// The holder's description, parsed (host, pid, language, the user's text).
    pub fn holder_description(&self) -> Option<HolderDescription> {
        self.holder.as_deref().map(HolderDescription::parse)
    }
}

/// One holder of a semaphore or read-write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    pub mode: LockMode,
    pub token: Option<u64>,
    /// Its description (JSON), as a mutex holder's.
    pub holder: Option<String>,
    /// Time left on the server's clock (TTL backends).
    pub time_left: Option<Duration>,
}

impl LeaseInfo {
    /// The holder's description, parsed.
    pub fn holder_description(&self) -> Option<HolderDescription> {
        self.holder.as_deref().map(HolderDescription::parse)
    }
}

/// One waiter: in a lock's queue (ZooKeeper), or registered (a semaphore's or read-write lock's
/// on TTL backends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Its queue node's name on ZooKeeper (Curator's protected layout:
    /// `_c_<owner uuid>-lock-<sequence>`, `-__WRIT__`, `-__READ__`, a semaphore's `locks/`
    /// node); elsewhere its mode and the start of its owner id.
    pub node: String,
    /// Its description, as the holder's (JSON), when the node carries one.
    pub holder: Option<String>,
}

/// How many waiters [`LockInfo::waiters`] lists at most.
pub const MAX_WAITERS_SHOWN: usize = 100;

/// The most locks [`crate::Locker::list`] returns in one call; [`LockList::truncated`] says
/// there were more (narrow the prefix to see them).
pub const LIST_LIMIT: usize = 1000;

/// The held locks whose names start with a prefix ([`crate::Locker::list`]), by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockList {
    pub locks: Vec<LockInfo>,
    /// More than [`LIST_LIMIT`] locks matched; only the first ones by name are in `locks`
    /// (on Redis and Redlock, the first ones found).
    pub truncated: bool,
}

/// Everything a backend needs to take a lock.
#[derive(Debug, Clone)]
pub struct AcquireRequest<'a> {
    pub name: &'a LockName,
    /// How the lease holds the name; only modes of the kinds [`Backend::offers`] says yes to.
    pub mode: LockMode,
    pub owner: OwnerId,
    pub ttl: Duration,
    pub holder: &'a str,
}

impl AcquireRequest<'_> {
    /// The request owning its name and holder, for work that outlives the caller's borrow (a
    /// task of its own, a request left to finish in the background).
    pub fn to_owned(&self) -> OwnedAcquireRequest {
        OwnedAcquireRequest {
            name: self.name.clone(),
            mode: self.mode,
            owner: self.owner,
            ttl: self.ttl,
            holder: self.holder.to_string(),
        }
    }
}

/// An [`AcquireRequest`] that owns its name and holder.
#[derive(Debug, Clone)]
pub struct OwnedAcquireRequest {
    name: LockName,
    mode: LockMode,
    owner: OwnerId,
    ttl: Duration,
    holder: String,
}

impl OwnedAcquireRequest {
    pub fn as_request(&self) -> AcquireRequest<'_> {
        AcquireRequest {
            name: &self.name,
            mode: self.mode,
            owner: self.owner,
            ttl: self.ttl,
            holder: &self.holder,
        }
    }
}

/// One lease to renew ([`Backend::renew_many`]).
#[derive(Debug, Clone, Copy)]
pub struct RenewRequest<'a> {
    pub name: &'a LockName,
    pub mode: LockMode,
    pub owner: OwnerId,
    pub ttl: Duration,
}

/// One [`Backend::renew`] per lease, concurrently, each within `timeout`: what
/// [`Backend::renew_many`] does where a backend has no batch, and for the leases a batch
/// leaves out.
pub(crate) async fn renew_each<B: Backend + ?Sized>(
    backend: &B,
    leases: &[RenewRequest<'_>],
    timeout: Duration,
) -> Vec<Result<Renewal>> {
    let renewals = leases
        .iter()
        .map(|lease| async move {
            tokio::time::timeout(
                timeout,
                backend.renew(lease.name, lease.mode, lease.owner, lease.ttl),
            )
            .await
            .unwrap_or_else(|_| {
                Err(Error::unavailable(format!(
                    "renewal of lock {:?} got no answer within {timeout:?}",
                    lease.name.as_str()
                )))
            })
        })
        .collect();
    crate::sync::join_all(renewals).await
}

/// Renews `leases` in batches where a backend can: the leases to which `batch_of` gives the
/// same key, where at least two do, go together to `renew_batch` (which answers one per lease,
/// in its order); the others renew one by one ([`renew_each`]). Everything runs concurrently
/// and the answers come back in the order of `leases`.
pub(crate) async fn renew_in_batches<'a, B, K, Fut>(
    backend: &B,
    leases: &[RenewRequest<'a>],
    timeout: Duration,
    batch_of: impl Fn(&RenewRequest<'a>) -> Option<K>,
    renew_batch: impl Fn(K, Vec<RenewRequest<'a>>) -> Fut,
) -> Vec<Result<Renewal>>
where
    B: Backend + ?Sized,
    K: Ord,
    Fut: std::future::Future<Output = Vec<Result<Renewal>>>,
{
    let mut groups: std::collections::BTreeMap<K, Vec<usize>> = Default::default();
    for (i, lease) in leases.iter().enumerate() {
        if let Some(key) = batch_of(lease) {
            groups.entry(key).or_default().push(i);
        }
    }
    let mut singles: Vec<usize> = Vec::new();
    let mut batches: Vec<(Vec<usize>, Fut)> = Vec::new();
    for (key, group) in groups {
        if group.len() >= 2 {
            let requests = group.iter().map(|i| leases[*i]).collect();
            batches.push((group, renew_batch(key, requests)));
        } else {
            singles.extend(group);
        }
    }
    singles.extend((0..leases.len()).filter(|i| batch_of(&leases[*i]).is_none()));
    let (indices, batches): (Vec<Vec<usize>>, Vec<Fut>) = batches.into_iter().unzip();
    let single_requests: Vec<RenewRequest<'a>> = singles.iter().map(|i| leases[*i]).collect();
    let (batch_answers, single_answers) = tokio::join!(
        crate::sync::join_all(batches),
        renew_each(backend, &single_requests, timeout)
    );
    let mut outcomes: Vec<Option<Result<Renewal>>> = leases.iter().map(|_| None).collect();
    let answered = indices
        .iter()
        .zip(batch_answers)
        .flat_map(|(group, answers)| group.iter().copied().zip(answers))
        .chain(singles.iter().copied().zip(single_answers));
    for (i, answer) in answered {
        outcomes[i] = Some(answer);
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(Error::internal("a batch renewal lost an answer"))))
        .collect()
}

/// A subscription to release notifications for one lock, made *before* the retry that
/// follows a failed attempt, so a release in between is never missed.
#[async_trait]
pub trait ReleaseWatch: Send {
    /// Returns when the lock may have been released, or after `max` at the latest.
    async fn wait(&mut self, max: Duration);
}

/// A watch that only sleeps: backends without notifications poll.
pub struct PollOnly;

#[async_trait]
impl ReleaseWatch for PollOnly {
    async fn wait(&mut self, max: Duration) {
        tokio::time::sleep(max).await;
    }
}

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> BackendKind;

    /// Identifies this backend deployment (the lock table, the Redis deployment, …), so a
    /// fence can refuse tokens of another lock. The same however the URL is spelled (hosts
    /// sorted, defaults filled in); SQL backends store a random one in the database.
    fn deployment_id(&self) -> &str;

    /// Identities earlier versions derived for this deployment from the URL's spelling, where
    /// they differ from [`Backend::deployment_id`]: fences that recorded one accept it, and
    /// move to the new one.
    fn legacy_deployment_ids(&self) -> Vec<String> {
        Vec::new()
    }

    /// Clock skew to add to the client deadline's drift margin (Redlock, replicas).
    fn max_clock_skew(&self) -> Duration {
        Duration::ZERO
    }

    /// The lease length this backend really uses for a requested ttl: the client deadline
    /// and the renewal interval (a third of it) follow it. TTL backends use the request;
    /// ZooKeeper, whose liveness is the session, answers the negotiated session timeout.
    fn lease_ttl(&self, requested: Duration) -> Duration {
        requested
    }

    /// The instant the server's expiry of `owner`'s lease is proven to count from, for a
    /// backend that proves it by itself rather than by the request that confirmed it
    /// (ZooKeeper's session heartbeat): the client deadline is that instant + the lease ttl −
    /// the drift margin. `None` (TTL backends): the send time of the confirming request.
    fn expiry_counted_from(&self, _owner: OwnerId) -> Option<BootInstant> {
        None
    }

    /// Whether the server expires a lease at a time set by its ttl. `false` (ZooKeeper: the
    /// lease lives as long as its session and node) makes `Lease::expires_at` `None`.
    fn server_expiry(&self) -> bool {
        true
    }

    /// Called once when a lease starts, with a handle through which a backend that learns of
    /// losses by itself (ZooKeeper watches and session events) reports them at once, and
    /// reports its connection as suspended. TTL backends learn nothing by themselves.
    fn track(&self, _name: &LockName, _mode: LockMode, _owner: OwnerId, _events: LeaseEvents) {}

    /// Whether this backend offers `kind`: the Locker refuses the others before any I/O, so
    /// the methods below see only modes of offered kinds.
    fn offers(&self, kind: LockKind) -> bool {
        kind == LockKind::Mutex
    }

    /// Whether the owner id of an attempt that answered `Held` may serve the next attempt.
    /// Where waiters queue or register (ZooKeeper, the shared kinds), their place is kept
    /// under it. A backend that released the attempt's partial grants by owner id (Redlock's
    /// lost round) has spent it: the release's tombstone refuses it from then on.
    fn keeps_owner_after_held(&self, _mode: LockMode) -> bool {
        true
    }

    /// One attempt, one round trip where the backend allows it.
    ///
    /// # Cancellation safety
    /// If the future is dropped after the request was sent, the lock may have been taken
    /// under `req.owner`; the caller then releases by owner id.
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt>;

    /// Sets a new ttl from now if the lock is still ours and has not expired.
    async fn renew(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal>;

    /// Renews several leases of this Locker that came due together, each as [`Backend::renew`]
    /// would, answering in their order. A backend that can sends them as one request (one
    /// script, one statement); the default sends one renewal each, concurrently, each bounded
    /// by `timeout` so one slow answer does not fail the others.
    async fn renew_many(
        &self,
        leases: &[RenewRequest<'_>],
        timeout: Duration,
    ) -> Vec<Result<Renewal>> {
        renew_each(self, leases, timeout).await
    }

    /// Releases if ours; `Ok(false)` when it was not ours (nothing was touched).
    async fn release(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<bool>;

    async fn inspect(&self, name: &LockName) -> Result<LockInfo>;

    /// The locks held now whose names start with `prefix` (empty: every lock), read without
    /// acquiring; at most `limit` (the caller asks for one more than it shows, to know that
    /// it truncated). Order does not matter: the caller sorts.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>>;

    /// An operator's release: frees `name` whoever holds it. `Ok(false)` when nobody held it.
    /// The fencing counter is left alone, so the next token is still larger than every token
    /// handed out; the holder learns of it at its next renewal (or from its node's watch).
    async fn force_release(&self, name: &LockName) -> Result<bool>;

    /// Subscribes to release notifications for `name`; confirmed when this returns.
    async fn watch(&self, _name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        Ok(Box::new(PollOnly))
    }

    /// Subscribes on behalf of the waiter whose last attempt, under `owner`, answered `Held`.
    /// A backend whose waiters queue (ZooKeeper) watches that waiter's predecessor only;
    /// others subscribe to the lock as [`Backend::watch`] does.
    async fn watch_for(
        &self,
        name: &LockName,
        _mode: LockMode,
        _owner: OwnerId,
    ) -> Result<Box<dyn ReleaseWatch>> {
        self.watch(name).await
    }

    /// The acquire loop stops waiting under `owner` (its wait ran out, it failed, or it was
    /// cancelled) after an attempt under it answered `Held`. A backend whose waiters queue
    /// (ZooKeeper) removes the waiter's entry; elsewhere a `Held` answer left nothing behind.
    async fn abandon(&self, _name: &LockName, _mode: LockMode, _owner: OwnerId) -> Result<()> {
        Ok(())
    }

    /// Closes connections; later calls fail with CLOSED or UNAVAILABLE.
    async fn close(&self);
}

/// Connects the backend that `url` selects, or fails with [`not_built`] when this build left it
/// out.
pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Arc<dyn Backend>> {
    match url.kind {
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => Ok(Arc::new(sql::SqlBackend::connect(url, options).await?)),
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => Ok(Arc::new(sql::SqlBackend::connect(url, options).await?)),
        #[cfg(feature = "mysql")]
        BackendKind::MySql => Ok(Arc::new(sql::SqlBackend::connect(url, options).await?)),
        #[cfg(feature = "redis")]
        BackendKind::Redis | BackendKind::RedisCluster => {
            Ok(Arc::new(redis::RedisBackend::connect(url, options).await?))
        }
        #[cfg(feature = "redis")]
        BackendKind::Redlock => Ok(Arc::new(
            redlock::RedlockBackend::connect(url, options).await?,
        )),
        #[cfg(feature = "zookeeper")]
        BackendKind::ZooKeeper => Ok(Arc::new(zookeeper::ZkBackend::connect(url, options).await?)),
        #[allow(
            unreachable_patterns,
            reason = "reached only in a build without every backend feature"
        )]
        other => Err(not_built(other)),
    }
}

/// The cargo feature of the fencelock crate that builds `kind`'s backend.
pub(crate) fn feature_of(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Redis | BackendKind::RedisCluster | BackendKind::Redlock => "redis",
        BackendKind::ZooKeeper => "zookeeper",
        BackendKind::Postgres => "postgres",
        BackendKind::MySql => "mysql",
        BackendKind::Sqlite => "sqlite",
    }
}

/// The error for a URL whose backend this build of fencelock left out (its feature is off).
pub(crate) fn not_built(kind: BackendKind) -> Error {
    Error::invalid(format!(
        "the {} backend is not built into this fencelock: build the fencelock crate with its \
         \"{}\" feature (on by default)",
        kind.as_str(),
        feature_of(kind)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL whose backend this build left out still parses, and connecting (or opening a fence
    /// on it) fails at once with INVALID_ARGUMENT naming the feature. A build with every feature
    /// has no such URL: there the message alone is checked.
    #[tokio::test]
    async fn a_backend_left_out_fails_at_connect_naming_its_feature() {
        for url in [
            "redis://127.0.0.1:1",
            "redis+cluster://127.0.0.1:1",
            "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
            "zk://127.0.0.1:1",
            "postgres://127.0.0.1:1/db",
            "mysql://127.0.0.1:1/db",
            "sqlite:///nonexistent-folder/locks.db",
        ] {
            let kind = LockerUrl::parse(url).unwrap().kind;
            let expected = not_built(kind);
            assert_eq!(expected.code(), crate::error::ErrorCode::InvalidArgument);
            assert!(
                expected
                    .message()
                    .contains(&format!("\"{}\" feature", feature_of(kind))),
                "{expected}"
            );
            let built = match feature_of(kind) {
                "redis" => cfg!(feature = "redis"),
                "zookeeper" => cfg!(feature = "zookeeper"),
                "sqlite" => cfg!(feature = "sqlite"),
                "postgres" => cfg!(feature = "postgres"),
                "mysql" => cfg!(feature = "mysql"),
                other => panic!("unknown feature {other}"),
            };
            if !built {
                let err = crate::locker::Locker::connect(url)
                    .await
                    .expect_err("connected");
                assert_eq!(err.to_string(), expected.to_string(), "{url}");
                let err = crate::fence::Fence::open(url, "r")
                    .await
                    .expect_err("opened");
                assert_eq!(
                    err.code(),
                    crate::error::ErrorCode::InvalidArgument,
                    "{url}"
                );
            }
        }
    }
}
