//! One Redlock master: its connection (made lazily, so a master that is down at connect or
//! later costs one fast failure per request, not the Locker), its waiter hub, and the last
//! thing it said about its uptime and clock.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Script, Value};

use super::health::{Probe, parse_info};
use super::scripts::{INSPECT, RAISE, RAISE_MAX_TTL};
use crate::backend::redis::checks::check_eviction_policy;
use crate::backend::redis::conn::Conn;
use crate::backend::redis::connect::RedisSettings;
use crate::backend::redis::connect::{client, manager_config};
use crate::backend::redis::error::map_error;
use crate::backend::redis::inspect::scan_keys;
use crate::backend::redis::mutex_scripts::{ACQUIRE, RELEASE, RENEW};
use crate::backend::redis::pubsub::{HubWatch, WakeHub};
use crate::backend::redis::reply::parse_acquire_reply;
use crate::backend::redis::reply::{as_i64, as_string};
use crate::backend::redis::semaphore_rwlock::explain_acl;
use crate::backend::{AcquireRequest, Attempt};
use crate::clock::BootInstant;
use crate::error::{Error, ErrorCode, Result};
use crate::sync::unpoisoned;
use crate::url::{HostPort, LockerUrl};

/// What the last probe of a master found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Health {
    /// When this client last heard `INFO server` from the master.
    pub checked: Option<BootInstant>,
    pub abstaining: bool,
    /// Beyond the maximum clock skew from the others at the last check.
    pub excluded: bool,
    pub offset_us: Option<i64>,
    /// The round trip of the last probe, in microseconds.
    pub rtt_us: Option<i64>,
    /// The same server as an earlier master of the list (the same `run_id`): never votes.
    pub duplicate_of: Option<usize>,
}

impl Health {
    /// Whether this master's vote counts, as far as the last probe tells.
    pub fn votes(&self) -> bool {
        self.checked.is_some() && !self.abstaining && !self.excluded && self.duplicate_of.is_none()
    }
}

pub struct Instance {
    pub label: String,
    client: redis::Client,
    connect_timeout: Duration,
    /// The connection once made; read without waiting, so every request of a fan-out is on
    /// its connection by the fan-out's first poll.
    ready: Mutex<Option<Conn>>,
    /// Serializes making the connection.
    connecting: tokio::sync::Mutex<()>,
    pub hub: Arc<WakeHub>,
    pub health: Mutex<Health>,
    /// The `run_id` it last answered with (see [`Health::duplicate_of`]).
    pub run_id: Mutex<Option<String>>,
    /// Set when a request found the master unreachable: requests then fail at once, without
    /// waiting out a timeout each, while a background probe pings it until it answers.
    down: Mutex<Option<String>>,
    probing: AtomicBool,
}

/// How often a master that is down is pinged.
const PROBE_EVERY: Duration = Duration::from_millis(200);

pub(super) fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// One phase-1 answer: the master's state when it answered, and its answer.
pub struct Phase1 {
    pub probe: Option<Probe>,
    pub attempt: Attempt,
    /// The `max_ttl` the master stores after [`RAISE_MAX_TTL`] (ms).
    pub max_ttl_ms: Option<u64>,
}

impl Instance {
    pub fn new(url: &LockerUrl, host: &HostPort, connect_timeout: Duration) -> Result<Arc<Self>> {
        Ok(Arc::new(Instance {
            label: host.to_string(),
            client: client(url, host)?,
            connect_timeout,
            ready: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            hub: Arc::new(WakeHub::default()),
            health: Mutex::new(Health::default()),
            run_id: Mutex::new(None),
            down: Mutex::new(None),
            probing: AtomicBool::new(false),
        }))
    }

    /// The connection, made on first use (and again after it could not be made).
    pub async fn conn(&self) -> Result<Conn> {
        if let Some(conn) = unpoisoned(&self.ready).clone() {
            return Ok(conn);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(conn) = unpoisoned(&self.ready).clone() {
            return Ok(conn);
        }
        let hub = Arc::downgrade(&self.hub);
        let sink = move |push| {
            if let Some(hub) = hub.upgrade() {
                hub.on_push(push);
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let config = manager_config(self.connect_timeout)
            .set_push_sender(sink)
            .set_automatic_resubscription();
        let manager = self
            .client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| map_error(&format!("connecting to redlock master {}", self.label), e))?;
        let conn = Conn::Single(manager);
        *unpoisoned(&self.ready) = Some(conn.clone());
        Ok(conn)
    }

    /// Runs one request under `timeout`, failing at once while the master is known to be
    /// down; an unreachable answer marks it down and starts the background probe.
    async fn guarded<T>(
        self: &Arc<Self>,
        timeout: Duration,
        request: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if let Some(why) = unpoisoned(&self.down).clone() {
            return Err(Error::unavailable(format!(
                "redlock master {} is down ({why})",
                self.label
            )));
        }
        let answer = match tokio::time::timeout(timeout, request).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::unavailable(format!(
                "redlock master {} did not answer within {timeout:?}",
                self.label
            ))),
        };
        if let Err(e) = &answer
            && e.code() == ErrorCode::Unavailable
        {
            self.mark_down(e);
        }
        answer
    }

    fn mark_down(self: &Arc<Self>, e: &Error) {
        *unpoisoned(&self.down) = Some(e.message().to_string());
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.probing.store(false, Ordering::Release);
            *unpoisoned(&self.down) = None;
            return;
        };
        let weak = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                let Some(instance) = weak.upgrade() else {
                    return;
                };
                let ping = async {
                    let mut conn = instance.conn().await?;
                    redis::cmd("PING")
                        .query_async::<Value>(&mut conn)
                        .await
                        .map_err(|e| map_error("PING", e))
                };
                if let Ok(Ok(_)) = tokio::time::timeout(instance.connect_timeout, ping).await {
                    *unpoisoned(&instance.down) = None;
                    instance.probing.store(false, Ordering::Release);
                    flog!(info, "redlock master {} answers again", instance.label);
                    return;
                }
            }
        });
    }

    /// At connect: reachable, a safe eviction policy, scripts loaded, the stored `max_ttl`
    /// read (ms; `None` where there is none), and a first probe.
    pub async fn prepare(
        self: &Arc<Self>,
        settings: &RedisSettings,
        max_ttl_key: &str,
    ) -> Result<(Option<u64>, Probe)> {
        self.guarded(self.connect_timeout, async {
            let mut conn = self.conn().await?;
            check_eviction_policy(&mut conn, settings, &self.label).await?;
            for script in [&*ACQUIRE, &*RENEW, &*RELEASE, &*RAISE, &*INSPECT] {
                script
                    .load_async(&mut conn)
                    .await
                    .map_err(|e| map_error("loading the lock scripts", e))?;
            }
            // Read, not written: a master that restarted and lost the value must get the
            // deployment's (the largest any master stores), not this URL's.
            let stored: Value = redis::cmd("GET")
                .arg(max_ttl_key)
                .query_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("reading max_ttl on {}", self.label), e))?;
            if matches!(stored, Value::Nil) {
                return Ok((None, self.probe().await?));
            }
            let stored = as_i64(&stored).filter(|v| *v > 0).ok_or_else(|| {
                Error::backend(format!(
                    "{max_ttl_key} on redlock master {} is not a number of milliseconds",
                    self.label
                ))
            })?;
            Ok((Some(stored as u64), self.probe().await?))
        })
        .await
    }

    /// At connect, where the master has no `max_ttl`: stores `max_ttl_ms` unless somebody
    /// stored one meanwhile, and returns what it holds then (ms).
    pub async fn store_max_ttl(
        self: &Arc<Self>,
        max_ttl_key: &str,
        max_ttl_ms: u64,
    ) -> Result<u64> {
        self.guarded(self.connect_timeout, async {
            let mut conn = self.conn().await?;
            let (_, stored): (Value, Value) = redis::pipe()
                .cmd("SET")
                .arg(max_ttl_key)
                .arg(max_ttl_ms)
                .arg("NX")
                .cmd("GET")
                .arg(max_ttl_key)
                .query_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("storing max_ttl on {}", self.label), e))?;
            as_i64(&stored)
                .filter(|v| *v > 0)
                .map(|v| v as u64)
                .ok_or_else(|| {
                    Error::backend(format!(
                        "{max_ttl_key} on redlock master {} is not a number of milliseconds",
                        self.label
                    ))
                })
        })
        .await
    }

    /// `INFO server` alone (at connect).
    pub async fn probe(&self) -> Result<Probe> {
        let mut conn = self.conn().await?;
        let sent = wall_us();
        let info: Value = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_error(&format!("INFO server on {}", self.label), e))?;
        let received = wall_us();
        as_string(&info)
            .and_then(|t| parse_info(&t, sent, received))
            .ok_or_else(|| {
                Error::backend(format!(
                    "INFO server on {} has no uptime or server time",
                    self.label
                ))
            })
    }

    /// Phase 1: `INFO server` and the acquire script (the mutex's or the shared kinds') in
    /// one pipeline, one round trip.
    pub async fn acquire(
        self: &Arc<Self>,
        timeout: Duration,
        script: &Script,
        keys: &[&str],
        args: &[String],
        max_ttl: (&str, u64),
        req: &AcquireRequest<'_>,
    ) -> Result<Phase1> {
        // The script's answer is read outside `guarded`: a master that answered is up,
        // whatever it answered (a refused replay is UNAVAILABLE to its caller, not a sign
        // that the master is down).
        let (probe, reply, max_ttl_ms) = self
            .guarded(timeout, async {
                let mut conn = self.conn().await?;
                for attempt in 0..2 {
                    let mut pipe = redis::pipe();
                    pipe.cmd("INFO").arg("server");
                    pipe.cmd("EVALSHA")
                        .arg(script.get_hash())
                        .arg(keys.len())
                        .arg(keys)
                        .arg(args);
                    pipe.cmd("EVAL")
                        .arg(RAISE_MAX_TTL)
                        .arg(1)
                        .arg(max_ttl.0)
                        .arg(max_ttl.1);
                    let sent = wall_us();
                    match pipe.query_async::<(Value, Value, Value)>(&mut conn).await {
                        Ok((info, reply, stored)) => {
                            let received = wall_us();
                            let probe =
                                as_string(&info).and_then(|t| parse_info(&t, sent, received));
                            let max_ttl_ms = as_i64(&stored).filter(|v| *v > 0).map(|v| v as u64);
                            return Ok((probe, reply, max_ttl_ms));
                        }
                        Err(e)
                            if attempt == 0
                                && e.kind()
                                    == redis::ErrorKind::Server(
                                        redis::ServerErrorKind::NoScript,
                                    ) =>
                        {
                            script
                                .load_async(&mut conn)
                                .await
                                .map_err(|e| map_error("reloading a lock script", e))?;
                        }
                        Err(e) => {
                            let context = format!("redlock acquire on {}", self.label);
                            return Err(explain_acl(map_error(&context, e)));
                        }
                    }
                }
                Err(Error::backend(
                    "the lock script vanished from the server's cache twice in a row",
                ))
            })
            .await?;
        Ok(Phase1 {
            probe,
            attempt: parse_acquire_reply(&reply, req)?,
            max_ttl_ms,
        })
    }

    /// Runs one script of the shared kinds on this master (renew, release, phase 2, stepping
    /// back, abandoning, inspecting, an operator's release).
    pub async fn run(
        self: &Arc<Self>,
        timeout: Duration,
        script: &Script,
        keys: &[&str],
        args: &[String],
        what: &str,
    ) -> Result<Value> {
        self.guarded(timeout, async {
            let mut conn = self.conn().await?;
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            invocation.arg(args);
            invocation.invoke_async(&mut conn).await.map_err(|e| {
                explain_acl(map_error(&format!("redlock {what} on {}", self.label), e))
            })
        })
        .await
    }

    /// Phase 2: raise the counter to `t` if the lock is still ours.
    pub async fn raise(
        self: &Arc<Self>,
        timeout: Duration,
        keys: [&str; 2],
        owner: &str,
        t: u64,
        counter_ttl_ms: u64,
    ) -> Result<bool> {
        self.guarded(timeout, async {
            let mut conn = self.conn().await?;
            let n: i64 = RAISE
                .key(keys[0])
                .key(keys[1])
                .arg(owner)
                .arg(t.to_string())
                .arg(counter_ttl_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("redlock fencing on {}", self.label), e))?;
            Ok(n == 1)
        })
        .await
    }

    pub async fn renew(
        self: &Arc<Self>,
        timeout: Duration,
        lock: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<bool> {
        self.guarded(timeout, async {
            let mut conn = self.conn().await?;
            let n: i64 = RENEW
                .key(lock)
                .arg(owner)
                .arg(ttl_ms)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("redlock renew on {}", self.label), e))?;
            Ok(n == 1)
        })
        .await
    }

    /// `keys`: the lock and its tombstone (see the RELEASE script).
    pub async fn release(
        self: &Arc<Self>,
        timeout: Duration,
        keys: [&str; 2],
        owner: &str,
        channel: &str,
    ) -> Result<bool> {
        self.guarded(timeout, async {
            let mut conn = self.conn().await?;
            let n: i64 = RELEASE
                .key(keys[0])
                .key(keys[1])
                .arg(owner)
                .arg(channel)
                .arg("PUBLISH")
                .invoke_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("redlock release on {}", self.label), e))?;
            Ok(n == 1)
        })
        .await
    }

    /// The keys matching `pattern` on this master, up to `limit`.
    pub async fn scan(
        self: &Arc<Self>,
        timeout: Duration,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.guarded(timeout, async {
            let conn = self.conn().await?;
            scan_keys(&conn, pattern, limit).await
        })
        .await
    }

    pub async fn inspect(self: &Arc<Self>, timeout: Duration, keys: [&str; 2]) -> Result<Seen> {
        self.guarded(timeout, async {
            let mut conn = self.conn().await?;
            let reply: Vec<Value> = INSPECT
                .key(keys[0])
                .key(keys[1])
                .invoke_async(&mut conn)
                .await
                .map_err(|e| map_error(&format!("redlock inspect on {}", self.label), e))?;
            let pttl = reply.first().and_then(as_i64).unwrap_or(-2);
            Ok(Seen {
                pttl: (pttl != -2).then_some(pttl),
                owner: reply.get(1).and_then(as_string),
                token: reply.get(2).and_then(as_i64).map(|t| t as u64),
                holder: reply.get(3).and_then(as_string),
                counter: reply.get(4).and_then(as_i64).map(|t| t as u64),
            })
        })
        .await
    }

    pub async fn watch(self: &Arc<Self>, timeout: Duration, channel: &str) -> Result<HubWatch> {
        self.guarded(timeout, async {
            let conn = self.conn().await?;
            self.hub.watch(&conn, channel).await
        })
        .await
    }

    pub fn health(&self) -> Health {
        *unpoisoned(&self.health)
    }

    pub fn record(&self, probe: &Probe, abstaining: bool) {
        let mut health = unpoisoned(&self.health);
        health.checked = Some(BootInstant::now());
        health.abstaining = abstaining;
        health.offset_us = Some(probe.offset_us);
        health.rtt_us = Some(probe.rtt_us);
    }
}

/// One master's view of a lock (inspect).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// `Some` while the lock key exists (-1: no expiry).
    pub pttl: Option<i64>,
    pub owner: Option<String>,
    pub token: Option<u64>,
    pub holder: Option<String>,
    pub counter: Option<u64>,
}
