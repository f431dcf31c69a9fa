//! The Redis backend, one instance or a Cluster (docs/design.md §3.2).
//!
//! - acquire is one Lua script, one round trip: if the lock key exists it answers the
//!   remaining PTTL; otherwise it mints `max(counter + 1, server TIME in µs)`, stores it as the
//!   counter, and sets the lock hash with PX ttl.
//! - release compares the owner, deletes, records the owner in a short-lived tombstone and
//!   PUBLISHes; extend compares the owner and PEXPIREs, never re-creating an expired lock.
//! - acquire, renew and release answer a replay (the Cluster client resends a request whose
//!   connection failed) as they answered the first run ([`mutex_scripts`]).
//! - every script is called by SHA, and loaded again when the server's script cache was
//!   flushed (redis-rs's `invoke_async` does this; the pipelined replica path does it here).
//! - waiters share the Locker's one RESP3 connection for pub/sub ([`pubsub`]).
//! - where the master reports replicas (asked at connect and again every few seconds, see
//!   [`replica`]), acquires and renewals are followed by `WAIT 1` on a
//!   connection of their own: WAIT counts the writes of the connection it is sent on, so the
//!   script and its WAIT are pipelined together there. No acknowledgement fails the operation;
//!   a failed acquire is released again.
//! - at connect, `maxmemory-policy` must be `noeviction` (every other policy can evict lock
//!   keys) unless the URL says `allow_eviction=true`.
//!
//! Clock assumptions: expiry runs on the Redis server's clock (PX); the client deadline keeps
//! a margin of 1% + 2 ms + `max_skew` (100 ms by default): a replica promoted after a failover
//! expires the key by its own clock, which may run that much ahead. Tokens are floored by the server's TIME, so a Redis restarted without
//! persistence still hands out larger tokens, provided its clock did not step backwards.
//!
//! - semaphores and read-write locks, on one instance and on a Cluster alike, keep their leases
//!   and registered waiters in one hash and three sorted sets per name, in the name's slot, and
//!   mint tokens from the mutex's counter; the mutex's acquire and theirs refuse a name in use
//!   as another kind ([`semaphore_rwlock_scripts`]).
//!
//! The operations live by concern: [`mutex`] (acquire, renew, release), [`semaphore_rwlock`] (the
//! same for semaphores and read-write locks), [`inspect`] (inspect, list, force release),
//! [`reply`] (reading replies, shared with Redlock) and [`checks`] (what is asked of the
//! server at connect).

pub(super) mod checks;
pub(crate) mod conn;
pub(crate) mod connect;
mod direct;
pub(crate) mod error;
pub(super) mod inspect;
pub(crate) mod keys;
mod mutex;
pub(crate) mod mutex_scripts;
pub(crate) mod pubsub;
pub(crate) mod replica;
pub(super) mod reply;
pub(crate) mod run_script;
pub(crate) mod semaphore_rwlock;
pub(crate) mod semaphore_rwlock_scripts;

pub(crate) use self::run_script::duplicated_scripts;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use self::checks::check_eviction_policy;
use self::conn::Conn;
use self::connect::{RedisSettings, client, cluster_client, manager_config};
use self::direct::DirectConnections;
use self::error::map_error;
use self::keys::keys;
use self::mutex_scripts::{ACQUIRE, GONE_TTL_MS, RELEASE, RENEW, RENEW_MANY};
use self::pubsub::WakeHub;
use self::replica::ReplicaAck;
use super::{
    AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, RenewRequest, Renewal,
    renew_in_batches,
};
use crate::clock::drift_margin;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::url::{BackendKind, HostPort, LockerUrl};

pub struct RedisBackend {
    kind: BackendKind,
    conn: Conn,
    /// Present on one instance with replica acknowledgement on (see [`replica`]).
    ack: Option<ReplicaAck>,
    /// The connections blocking calls drive from their own thread ([`direct`]): one instance
    /// over plain TCP only.
    direct: Option<DirectConnections>,
    hub: Arc<WakeHub>,
    settings: RedisSettings,
    deployment_id: String,
    /// What earlier versions used: the URL's spelling (see [`identities`]).
    listed_id: String,
    /// How long a release's tombstone is kept: a replay comes within the operation timeout.
    gone_ttl_ms: u64,
    closed: AtomicBool,
}

pub(crate) fn owner_hex(owner: OwnerId) -> String {
    owner.to_hex()
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let settings = RedisSettings::from_url(url)?;
        let host = url
            .hosts
            .first()
            .ok_or_else(|| Error::invalid("a Redis URL needs a host"))?;
        #[cfg(feature = "fault-injection-duplicate-scripts")]
        flog!(
            warn,
            "FENCELOCK_FAULT_INJECTION_DUPLICATE_SCRIPTS: a test build, which sends every Redis \
             lock script twice"
        );
        let hub = Arc::new(WakeHub::default());
        let sink = {
            let hub = Arc::downgrade(&hub);
            move |push| {
                if let Some(hub) = hub.upgrade() {
                    hub.on_push(push);
                }
                Ok::<(), redis::aio::SendError>(())
            }
        };
        let redacted = url.redacted();
        let connect_error = |e| map_error(&format!("connecting to {redacted}"), e);
        let (mut conn, single_client) = if url.kind == BackendKind::RedisCluster {
            let cluster = cluster_client(url, options.operation_timeout, sink)?;
            (
                Conn::Cluster(
                    cluster
                        .get_async_connection()
                        .await
                        .map_err(connect_error)?,
                ),
                None,
            )
        } else {
            let client = client(url, host)?;
            let config = manager_config(options.operation_timeout)
                .set_push_sender(sink)
                .set_automatic_resubscription();
            let manager = client
                .get_connection_manager_with_config(config)
                .await
                .map_err(connect_error)?;
            (Conn::Single(manager), Some(client))
        };
        redis::cmd("PING")
            .query_async::<Value>(&mut conn)
            .await
            .map_err(connect_error)?;
        check_eviction_policy(&mut conn, &settings, &redacted).await?;
        // Replica acknowledgement: on one instance with replicas (asked now, and again during
        // the Locker's life). On a Cluster, replicas are per shard and not checked yet
        // (docs/redis.md says so).
        let direct = single_client
            .as_ref()
            .and_then(|client| DirectConnections::new(client, url.tls, options.operation_timeout));
        let ack = match single_client {
            Some(client) if settings.replica_ack => {
                let ack = ReplicaAck::new(client, options.operation_timeout, redacted.to_string());
                ack.connection(&conn, &settings).await?;
                Some(ack)
            }
            _ => None,
        };
        if let Conn::Single(_) = conn {
            let mutex_scripts = [&*ACQUIRE, &*RENEW, &*RENEW_MANY, &*RELEASE];
            for script in mutex_scripts
                .into_iter()
                .chain(semaphore_rwlock_scripts::all())
            {
                script
                    .load_async(&mut conn)
                    .await
                    .map_err(|e| map_error("loading the lock scripts", e))?;
            }
        }
        let (deployment_id, listed_id) = identities(url, &settings.prefix);
        Ok(RedisBackend {
            kind: url.kind,
            conn,
            ack,
            direct,
            hub,
            settings,
            deployment_id,
            listed_id,
            gone_ttl_ms: GONE_TTL_MS.max(ms(options.operation_timeout)),
            closed: AtomicBool::new(false),
        })
    }

    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        Ok(())
    }

    /// A ttl must keep more than half of itself after the drift margin, which counts the
    /// clock skew a promoted replica may have (`max_skew`).
    fn check_ttl(&self, ttl: Duration) -> Result<()> {
        let margin = drift_margin(ttl, self.settings.max_skew);
        if ttl <= margin * 2 {
            return Err(Error::invalid(format!(
                "ttl of {ttl:?} is too short with max_skew {:?}: the drift margin ({margin:?}) would \
                 take half of it; lengthen the ttl, or lower max_skew in the URL",
                self.settings.max_skew
            )));
        }
        Ok(())
    }
}

/// The deployment's identity for fences, the same however the URL spells it (hosts in lower
/// case with their port, sorted; the database, 0 when not given; the prefix), and the one
/// earlier versions derived from the spelling as written.
fn identities(url: &LockerUrl, prefix: &str) -> (String, String) {
    let kind = url.kind.as_str();
    let mut hosts: Vec<String> = url
        .hosts
        .iter()
        .map(|h| {
            HostPort {
                host: h.host.to_ascii_lowercase(),
                port: Some(h.port.unwrap_or(6379)),
            }
            .to_string()
        })
        .collect();
    hosts.sort();
    hosts.dedup();
    let db = url.path.trim_matches('/').parse::<u32>().unwrap_or(0);
    let normalized = format!("{kind}:{}/{db}/{prefix}", hosts.join(","));
    let written: Vec<String> = url.hosts.iter().map(|h| h.to_string()).collect();
    let listed = format!("{kind}:{}/{}/{prefix}", written.join(","), url.path);
    (normalized, listed)
}

#[async_trait]
impl Backend for RedisBackend {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    fn legacy_deployment_ids(&self) -> Vec<String> {
        if self.listed_id == self.deployment_id {
            return Vec::new();
        }
        vec![self.listed_id.clone()]
    }

    fn max_clock_skew(&self) -> Duration {
        self.settings.max_skew
    }

    /// Every kind, on one instance and on a Cluster: every key a kind's script touches, and
    /// the channel it publishes on, carries the name's hash tag, so each script runs on the one
    /// master that owns the name's slot, as it would on one instance.
    fn offers(&self, _kind: LockKind) -> bool {
        true
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        match req.mode {
            LockMode::Exclusive => self.acquire_lock(req).await,
            _ => self.acquire_shared(req).await,
        }
    }

    async fn renew(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        match mode {
            LockMode::Exclusive => self.renew_lock(name, owner, ttl).await,
            _ => self.renew_shared(name, owner, ttl).await,
        }
    }

    /// On one instance, the mutexes among `leases` renew in one script ([`RENEW_MANY`]); the
    /// other kinds, and every lease on a Cluster (whose keys live on many masters), renew one
    /// by one.
    async fn renew_many(
        &self,
        leases: &[RenewRequest<'_>],
        timeout: Duration,
    ) -> Vec<Result<Renewal>> {
        let single = matches!(self.conn, Conn::Single(_));
        renew_in_batches(
            self,
            leases,
            timeout,
            |lease| (single && lease.mode == LockMode::Exclusive).then_some(()),
            |(), mutexes| async move { self.renew_locks(&mutexes).await },
        )
        .await
    }

    async fn release(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<bool> {
        match mode {
            LockMode::Exclusive => self.release_lock(name, owner).await,
            _ => self.release_shared(name, owner).await,
        }
    }

    /// Removes the registration a `Held` answer left for a semaphore or read-write lock; a
    /// mutex waiter left nothing behind.
    async fn abandon(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<()> {
        match mode {
            LockMode::Exclusive => Ok(()),
            _ => self.abandon_shared(name, owner).await,
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.inspect_lock(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.list_locks(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.force_release_lock(name).await
    }

    async fn watch(&self, name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        Ok(Box::new(self.hub.watch(&self.conn, &k.channel).await?))
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
