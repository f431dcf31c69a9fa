//! The Redis backend, one instance (docs/design.md §3.2).
//!
//! - acquire is one Lua script, one round trip: if the lock key exists it answers the
//!   remaining PTTL; otherwise it mints `max(counter + 1, server TIME in µs)`, stores it as the
//!   counter, and sets the lock hash with PX ttl.
//! - release compares the owner, deletes, records the owner in a short-lived tombstone and
//!   PUBLISHes; extend compares the owner and PEXPIREs, never re-creating an expired lock.
//! - acquire, renew and release answer a replay (the Cluster client resends a request whose
//!   connection failed) as they answered the first run ([`scripts`]).
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

pub(crate) mod conn;
pub(crate) mod connect;
pub(crate) mod error;
pub(crate) mod keys;
pub(crate) mod pubsub;
pub(crate) mod replica;
pub(crate) mod scripts;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ScriptInvocation, Value};

use self::conn::Conn;
use self::connect::{RedisSettings, client, cluster_client, manager_config};
use self::error::map_error;
use self::keys::{keys, name_of_lock_key, scan_pattern};
use self::pubsub::WakeHub;
use self::replica::ReplicaAck;
use self::scripts::{
    ACQUIRE, FENCE_COUNTER_TTL_MS, FORCE_RELEASE, GONE_TTL_MS, INSPECT, LAYOUT_VERSION, RELEASE,
    RENEW,
};
use super::{AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, Renewal};
use crate::clock::drift_margin;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::url::{BackendKind, HostPort, LockerUrl};

pub struct RedisBackend {
    kind: BackendKind,
    conn: Conn,
    /// Present on one instance with replica acknowledgement on (see [`replica`]).
    ack: Option<ReplicaAck>,
    hub: Arc<WakeHub>,
    settings: RedisSettings,
    deployment_id: String,
    /// What earlier versions used: the URL's spelling (see [`identities`]).
    listed_id: String,
    /// How long a release's tombstone is kept: a replay comes within the operation timeout.
    gone_ttl_ms: u64,
    closed: AtomicBool,
}

/// How many times each lock script (acquire, renew, release) is sent: twice, keeping the
/// second reply, in a build with the test-only `fault-injection-duplicate-scripts` feature. That
/// is what the Cluster client's retry does after a reply was lost: the scripts must answer the
/// second run as they answered the first (see [`scripts`]).
const SCRIPT_RUNS: usize = if cfg!(feature = "fault-injection-duplicate-scripts") {
    2
} else {
    1
};

/// Lock scripts sent a second time ([`SCRIPT_RUNS`]), for the tests.
static DUPLICATED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn duplicated_scripts() -> u64 {
    DUPLICATED.load(Ordering::Relaxed)
}

/// Runs a lock script on the shared connection ([`SCRIPT_RUNS`] times: the last reply counts).
async fn run_lock_script<T: FromRedisValue>(
    conn: &Conn,
    invocation: &ScriptInvocation<'_>,
    context: &str,
) -> Result<T> {
    if SCRIPT_RUNS == 2 {
        let _: Value = invocation
            .invoke_async(&mut conn.clone())
            .await
            .map_err(|e| map_error(context, e))?;
        DUPLICATED.fetch_add(1, Ordering::Relaxed);
    }
    invocation
        .invoke_async(&mut conn.clone())
        .await
        .map_err(|e| map_error(context, e))
}

pub(crate) fn owner_hex(owner: OwnerId) -> String {
    owner
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// How long `WAIT` may block: well under a third of the ttl, so a slow replica costs a
/// renewal its retry, not the lease.
fn wait_timeout(ttl: Duration) -> u64 {
    ms((ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1)))
}

pub(crate) fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn parse_attempt(v: &Value) -> Result<Attempt> {
    let bad = || Error::internal(format!("unexpected reply to the acquire script: {v:?}"));
    let Value::Array(items) = v else {
        return Err(bad());
    };
    match (items.first().and_then(as_i64), items.get(1)) {
        (Some(1), Some(token)) => {
            let token = as_i64(token).filter(|t| *t > 0).ok_or_else(bad)?;
            Ok(Attempt::Acquired {
                token: token as u64,
                origin: items
                    .get(2)
                    .and_then(as_string)
                    .and_then(|o| u64::from_str_radix(&o, 16).ok()),
            })
        }
        (Some(0), Some(pttl)) => {
            let pttl = as_i64(pttl).ok_or_else(bad)?;
            Ok(Attempt::Held {
                expires_in: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            })
        }
        _ => Err(bad()),
    }
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
        let ack = match single_client {
            Some(client) if settings.replica_ack => {
                let ack = ReplicaAck::new(client, options.operation_timeout, redacted.to_string());
                ack.connection(&conn, &settings).await?;
                Some(ack)
            }
            _ => None,
        };
        if let Conn::Single(_) = conn {
            for script in [&*ACQUIRE, &*RENEW, &*RELEASE, &*INSPECT] {
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

    /// The connection to follow writes with `WAIT 1` on, while the master reports replicas.
    async fn replica_ack(&self) -> Result<Option<ConnectionManager>> {
        match &self.ack {
            Some(ack) => ack.connection(&self.conn, &self.settings).await,
            None => Ok(None),
        }
    }

    /// Runs `script` followed by `WAIT 1 timeout` on the acknowledgement connection and
    /// returns the script's reply and the number of replicas that acknowledged.
    async fn with_replica_ack(
        &self,
        ack: &ConnectionManager,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
        timeout_ms: u64,
    ) -> Result<(Value, i64)> {
        let mut conn = ack.clone();
        for attempt in 0..2 {
            let mut pipe = redis::pipe();
            for _ in 0..SCRIPT_RUNS {
                pipe.cmd("EVALSHA")
                    .arg(script.get_hash())
                    .arg(keys.len())
                    .arg(keys)
                    .arg(args);
            }
            pipe.cmd("WAIT").arg(1).arg(timeout_ms);
            match pipe.query_async::<Vec<Value>>(&mut conn).await {
                Ok(mut replies) if replies.len() == SCRIPT_RUNS + 1 => {
                    DUPLICATED.fetch_add(SCRIPT_RUNS as u64 - 1, Ordering::Relaxed);
                    let acks = replies.pop().as_ref().and_then(as_i64).unwrap_or(0);
                    return Ok((replies.pop().unwrap_or(Value::Nil), acks));
                }
                Ok(replies) => {
                    return Err(Error::internal(format!(
                        "unexpected replies to a lock script and WAIT: {replies:?}"
                    )));
                }
                Err(e)
                    if attempt == 0
                        && e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| map_error("reloading a lock script", e))?;
                }
                Err(e) => return Err(map_error("redis write with replica acknowledgement", e)),
            }
        }
        Err(Error::backend(
            "the lock script vanished from the server's cache twice in a row",
        ))
    }
}

pub(crate) async fn check_eviction_policy(
    conn: &mut Conn,
    settings: &RedisSettings,
    url: &str,
) -> Result<()> {
    let reply: redis::RedisResult<Value> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply {
        Ok(value) => {
            // RESP3 answers a map, RESP2 a flat array: the value follows the name either way.
            // A Cluster answers per node; every node must be safe.
            let mut policies = Vec::new();
            collect_policies(&value, &mut policies);
            let unsafe_policy = policies.into_iter().find(|p| p != "noeviction");
            if let Some(policy) = unsafe_policy.filter(|_| !settings.allow_eviction) {
                return Err(Error::invalid(format!(
                    "Redis at {url} uses maxmemory-policy {policy}, which can evict lock keys and break \
                     mutual exclusion; set it to noeviction, or pass allow_eviction=true to accept the risk"
                )));
            }
            Ok(())
        }
        Err(e) => connect_check_failed("CONFIG GET maxmemory-policy", e, settings),
    }
}

fn collect_policies(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Map(pairs) => {
            for (k, v) in pairs {
                if as_string(k).as_deref() == Some("maxmemory-policy") {
                    out.extend(as_string(v));
                } else {
                    collect_policies(v, out);
                }
            }
        }
        Value::Array(items) => {
            let mut it = items.iter();
            while let Some(item) = it.next() {
                if as_string(item).as_deref() == Some("maxmemory-policy") {
                    out.extend(it.next().and_then(as_string));
                } else {
                    collect_policies(item, out);
                }
            }
        }
        _ => {}
    }
}

pub(crate) async fn count_replicas(
    conn: &mut Conn,
    settings: &RedisSettings,
    url: &str,
) -> Result<u32> {
    let reply: redis::RedisResult<Value> = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await;
    match reply {
        Ok(info) => Ok(as_string(&info)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)),
        Err(e) => {
            connect_check_failed(&format!("INFO replication on {url}"), e, settings)?;
            Ok(0)
        }
    }
}

/// A NOPERM answer to a connect-time check is a warning unless strict checks were asked for.
fn connect_check_failed(what: &str, e: redis::RedisError, settings: &RedisSettings) -> Result<()> {
    let err = map_error(what, e);
    if err.code() == crate::ErrorCode::Auth && !settings.strict_checks {
        flog!(
            warn,
            "{err}; the check is skipped (strict_checks=true makes this an error)"
        );
        return Ok(());
    }
    Err(err)
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

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.ensure_open()?;
        self.check_ttl(req.ttl)?;
        let k = keys(&self.settings.prefix, req.name);
        let owner = owner_hex(req.owner);
        let args = [
            owner.clone(),
            ms(req.ttl).to_string(),
            req.holder.to_string(),
            LAYOUT_VERSION.to_string(),
            FENCE_COUNTER_TTL_MS.max(ms(req.ttl) * 2).to_string(),
            format!("{:016x}", crate::ids::random_origin()?),
        ];
        let ack = self.replica_ack().await?;
        let Some(ack) = &ack else {
            let reply: Value = run_lock_script(
                &self.conn,
                ACQUIRE
                    .key(&k.lock)
                    .key(&k.fence)
                    .key(&k.origin)
                    .arg(&args[..]),
                "redis acquire",
            )
            .await?;
            return parse_attempt(&reply);
        };
        let timeout = wait_timeout(req.ttl);
        let (reply, acks) = self
            .with_replica_ack(
                ack,
                &ACQUIRE,
                &[&k.lock, &k.fence, &k.origin],
                &args,
                timeout,
            )
            .await?;
        let attempt = parse_attempt(&reply)?;
        if matches!(attempt, Attempt::Acquired { .. }) && acks < 1 {
            // Not safe from a failover: give it back, then report.
            let _ = self.release(req.name, req.owner).await;
            return Err(Error::unavailable(format!(
                "no replica acknowledged lock {:?} within {timeout} ms (replica acknowledgement is on because \
                 the master reports replicas; replica_ack=false turns it off)",
                req.name.as_str()
            )));
        }
        Ok(attempt)
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<Renewal> {
        self.ensure_open()?;
        self.check_ttl(ttl)?;
        let k = keys(&self.settings.prefix, name);
        let args = [owner_hex(owner), ms(ttl).to_string()];
        let ack = self.replica_ack().await?;
        let (renewed, acks) = match &ack {
            None => {
                let n: i64 =
                    run_lock_script(&self.conn, RENEW.key(&k.lock).arg(&args[..]), "redis renew")
                        .await?;
                (n, 1)
            }
            Some(ack) => {
                let (reply, acks) = self
                    .with_replica_ack(ack, &RENEW, &[&k.lock], &args, wait_timeout(ttl))
                    .await?;
                (as_i64(&reply).unwrap_or(0), acks)
            }
        };
        if renewed != 1 {
            return Ok(Renewal::NotOurs);
        }
        if acks < 1 {
            return Err(Error::unavailable(format!(
                "no replica acknowledged the renewal of lock {:?}",
                name.as_str()
            )));
        }
        Ok(Renewal::Renewed)
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        // With replica acknowledgement on, acquires go on the acknowledgement connection: a
        // release must follow them there. On the other connection it could overtake an acquire
        // sent before it (one cancelled in flight, whose clean-up is this release), which would
        // then take the lock after it, held by nobody until its ttl.
        let conn = match self.replica_ack().await? {
            Some(ack) => Conn::Single(ack),
            None => self.conn.clone(),
        };
        let n: i64 = run_lock_script(
            &conn,
            RELEASE
                .key(&k.lock)
                .key(&k.gone)
                .arg(owner_hex(owner))
                .arg(&k.channel)
                .arg(self.conn.publish_command())
                .arg(self.gone_ttl_ms),
            "redis release",
        )
        .await?;
        Ok(n == 1)
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let reply: Vec<Value> = INSPECT
            .key(&k.lock)
            .key(&k.fence)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error("redis inspect", e))?;
        let pttl = reply.first().and_then(as_i64).unwrap_or(-2);
        let held = pttl != -2;
        let token = reply
            .get(1)
            .and_then(as_i64)
            .or_else(|| reply.get(3).and_then(as_i64))
            .map(|t| t as u64);
        Ok(LockInfo {
            name: name.to_string(),
            held,
            token,
            holder: if held {
                reply.get(2).and_then(as_string)
            } else {
                None
            },
            time_left: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            waiters: Vec::new(),
        })
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let found = scan_keys(
            &self.conn,
            &scan_pattern(&self.settings.prefix, prefix),
            limit,
        )
        .await?;
        let mut locks = Vec::with_capacity(found.len());
        for key in found {
            if let Some(name) = name_of_lock_key(&self.settings.prefix, &key) {
                let info = self.inspect(&name).await?;
                if info.held {
                    locks.push(info);
                }
            }
        }
        Ok(locks)
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        force_release_key(
            &self.conn,
            &k.lock,
            &k.channel,
            self.conn.publish_command(),
            "redis force release",
        )
        .await
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

/// An operator's release of one lock key, whoever holds it (shared with Redlock's masters):
/// true when there was a key to delete. `publish` is PUBLISH, or SPUBLISH on a Cluster.
pub(crate) async fn force_release_key(
    conn: &Conn,
    lock: &str,
    channel: &str,
    publish: &str,
    context: &str,
) -> Result<bool> {
    let n: i64 = FORCE_RELEASE
        .key(lock)
        .arg(channel)
        .arg(publish)
        .invoke_async(&mut conn.clone())
        .await
        .map_err(|e| map_error(context, e))?;
    Ok(n == 1)
}

/// How many keys one SCAN step looks at.
const SCAN_COUNT: u64 = 1000;

/// The keys matching `pattern` on one server, or on every master of a Cluster (a SCAN sees
/// only the node it is sent to), until `limit` are found. SCAN may return a key twice; the
/// caller deduplicates.
pub(crate) async fn scan_keys(conn: &Conn, pattern: &str, limit: usize) -> Result<Vec<String>> {
    let mut found = Vec::new();
    match conn {
        Conn::Single(single) => {
            scan_node(&mut found, pattern, limit, |cmd| {
                let mut c = single.clone();
                async move { cmd.query_async::<Value>(&mut c).await }
            })
            .await?
        }
        Conn::Cluster(cluster) => {
            for (host, port) in cluster_masters(&mut cluster.clone()).await? {
                if found.len() >= limit {
                    break;
                }
                scan_node(&mut found, pattern, limit, |cmd| {
                    let mut c = cluster.clone();
                    let node = redis::cluster_routing::RoutingInfo::SingleNode(
                        redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        },
                    );
                    async move { c.route_command(cmd, node).await }
                })
                .await?;
            }
        }
    }
    Ok(found)
}

async fn scan_node<F, Fut>(
    found: &mut Vec<String>,
    pattern: &str,
    limit: usize,
    send: F,
) -> Result<()>
where
    F: Fn(redis::Cmd) -> Fut,
    Fut: Future<Output = redis::RedisResult<Value>>,
{
    let mut cursor = "0".to_string();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let reply = send(cmd).await.map_err(|e| map_error("redis scan", e))?;
        let bad = || Error::internal(format!("unexpected reply to SCAN: {reply:?}"));
        let Value::Array(parts) = &reply else {
            return Err(bad());
        };
        let (Some(next), Some(Value::Array(keys))) =
            (parts.first().and_then(as_string), parts.get(1))
        else {
            return Err(bad());
        };
        found.extend(keys.iter().filter_map(as_string));
        if next == "0" || found.len() >= limit {
            return Ok(());
        }
        cursor = next;
    }
}

/// The masters of a Cluster, from `CLUSTER SLOTS` (each slot range names its master first).
async fn cluster_masters(
    conn: &mut redis::cluster_async::ClusterConnection,
) -> Result<Vec<(String, u16)>> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(|e| map_error("redis cluster slots", e))?;
    let mut masters: Vec<(String, u16)> = Vec::new();
    if let Value::Array(ranges) = &reply {
        for range in ranges {
            if let Value::Array(parts) = range
                && let Some(Value::Array(master)) = parts.get(2)
                && let (Some(host), Some(port)) = (
                    master.first().and_then(as_string),
                    master.get(1).and_then(as_i64),
                )
                && let Ok(port) = u16::try_from(port)
                && !masters.iter().any(|(h, p)| *h == host && *p == port)
            {
                masters.push((host, port));
            }
        }
    }
    if masters.is_empty() {
        return Err(Error::backend(format!(
            "CLUSTER SLOTS named no master: {reply:?}"
        )));
    }
    Ok(masters)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_parse() {
        let taken = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"1764000000000001".to_vec()),
        ]);
        assert_eq!(
            parse_attempt(&taken).unwrap(),
            Attempt::Acquired {
                token: 1764000000000001,
                origin: None,
            }
        );
        let held = Value::Array(vec![Value::Int(0), Value::Int(2500)]);
        assert_eq!(
            parse_attempt(&held).unwrap(),
            Attempt::Held {
                expires_in: Some(Duration::from_millis(2500))
            }
        );
        let forever = Value::Array(vec![Value::Int(0), Value::Int(-1)]);
        assert_eq!(
            parse_attempt(&forever).unwrap(),
            Attempt::Held { expires_in: None }
        );
        assert_eq!(
            parse_attempt(&Value::Nil).unwrap_err().code(),
            crate::ErrorCode::Internal
        );
    }

    #[test]
    fn wait_timeout_is_well_under_a_third_of_the_ttl() {
        assert_eq!(wait_timeout(Duration::from_secs(30)), 1000);
        assert_eq!(wait_timeout(Duration::from_secs(2)), 200);
        assert_eq!(wait_timeout(Duration::from_millis(100)), 20);
    }
}
