//! Acquire, renew and release: each one lock script ([`super::scripts`]), run on the shared
//! connection (on a blocking caller's thread, acquire and release on a caller-driven one,
//! [`super::direct`]), or, while the master reports replicas, pipelined with `WAIT 1` on the
//! acknowledgement connection ([`super::replica`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation, Value};

use super::conn::Conn;
use super::direct::Direct;
use super::error::map_error;
use super::keys::keys;
use super::reply::as_i64;
use super::scripts::{ACQUIRE, FENCE_COUNTER_TTL_MS, LAYOUT_VERSION, RELEASE, RENEW, RENEW_MANY};
use super::shared::parse_acquire_reply;
use super::{RedisBackend, ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt, RenewRequest, Renewal};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;

/// How many times each lock script (acquire, renew, release) is sent: twice, keeping the
/// second reply, in a build with the test-only `fault-injection-duplicate-scripts` feature. That
/// is what the Cluster client's retry does after a reply was lost: the scripts must answer the
/// second run as they answered the first (see [`super::scripts`]).
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
pub(super) async fn run_lock_script<T: FromRedisValue>(
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

/// A lock script by its hash, [`SCRIPT_RUNS`] times (the last reply counts), with
/// `WAIT 1 wait_ms` after it when given, as one pipeline.
fn script_pipeline(
    script: &Script,
    keys: &[&str],
    args: &[String],
    wait_ms: Option<u64>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for _ in 0..SCRIPT_RUNS {
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
    }
    if let Some(ms) = wait_ms {
        pipe.cmd("WAIT").arg(1).arg(ms);
    }
    pipe
}

/// The script's reply and how many replicas acknowledged (1 without `WAIT`), from the replies
/// to a [`script_pipeline`]. `None` when the server's cache had lost the script (NOSCRIPT: it
/// did not run; the shared connection's invocation loads it again).
fn script_replies(
    mut replies: Vec<Value>,
    wait_ms: Option<u64>,
) -> Option<redis::RedisResult<(Value, i64)>> {
    let acks = match wait_ms {
        Some(_) => replies.pop().as_ref().and_then(as_i64).unwrap_or(0),
        None => 1,
    };
    let reply = replies.pop().unwrap_or(Value::Nil);
    match reply.extract_error() {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => None,
        Err(e) => Some(Err(e)),
        Ok(reply) => {
            DUPLICATED.fetch_add(SCRIPT_RUNS as u64 - 1, Ordering::Relaxed);
            Some(Ok((reply, acks)))
        }
    }
}

/// How long `WAIT` may block: well under a third of the ttl, so a slow replica costs a
/// renewal its retry, not the lease.
pub(super) fn wait_timeout(ttl: Duration) -> u64 {
    ms((ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1)))
}

impl RedisBackend {
    /// The connection to follow writes with `WAIT 1` on, while the master reports replicas.
    pub(super) async fn replica_ack(&self) -> Result<Option<ConnectionManager>> {
        match &self.ack {
            Some(ack) => ack.connection(&self.conn, &self.settings).await,
            None => Ok(None),
        }
    }

    /// Runs a lock script where it belongs, with `WAIT 1 wait_ms` after it while the master
    /// reports replicas (`ack`): on a blocking caller's thread on a caller-driven connection
    /// ([`Self::on_caller_connection`]), else on the acknowledgement connection (with `ack`) or
    /// the shared one. Its reply and how many replicas acknowledged (1 without `ack`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_script(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
        ack: Option<&ConnectionManager>,
        wait_ms: u64,
        context: &str,
        after_timeout: impl FnOnce() -> Option<redis::Cmd>,
    ) -> Result<(Value, i64)> {
        let wait = ack.is_some().then_some(wait_ms);
        let direct = self.on_caller_connection(script, keys, args, wait, context, after_timeout);
        match direct.await {
            Some(answer) => answer,
            None => {
                let ack = ack.map(|ack| (ack, wait_ms));
                self.on_runtime_connection(script, keys, args, ack, context)
                    .await
            }
        }
    }

    /// Runs a lock script on a caller-driven connection ([`super::direct`]) when this poll runs
    /// on a blocking caller's or an event loop's thread and one is free, with `WAIT 1 wait_ms`
    /// after it when given: its reply and how many replicas acknowledged (1 without `WAIT`).
    /// `None`: run it on a connection of the runtime instead. `after_timeout` is sent, on the
    /// connection whose reply did not come in time, after the script.
    pub(super) async fn on_caller_connection(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
        wait_ms: Option<u64>,
        context: &str,
        after_timeout: impl FnOnce() -> Option<redis::Cmd>,
    ) -> Option<Result<(Value, i64)>> {
        let direct = self.direct.as_ref().filter(|direct| direct.usable_here())?;
        let request = script_pipeline(script, keys, args, wait_ms).get_packed_pipeline();
        let replies = SCRIPT_RUNS + usize::from(wait_ms.is_some());
        let after_timeout = after_timeout().map(|cmd| cmd.get_packed_command());
        match direct.round_trip(&request, replies, after_timeout).await {
            Direct::Answered(Ok(replies)) => script_replies(replies, wait_ms)
                .map(|answer| answer.map_err(|e| map_error(context, e))),
            Direct::Answered(Err(e)) => Some(Err(map_error(context, e))),
            Direct::Unused => None,
        }
    }

    /// Runs a mutex's lock script on the acknowledgement connection, followed by `WAIT 1`, when
    /// `ack` is given, else on the shared connection: its reply and how many replicas
    /// acknowledged (1 without `ack`).
    async fn on_runtime_connection(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
        ack: Option<(&ConnectionManager, u64)>,
        context: &str,
    ) -> Result<(Value, i64)> {
        if let Some((ack, timeout_ms)) = ack {
            return self
                .with_replica_ack(ack, script, keys, args, timeout_ms)
                .await;
        }
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation.arg(args);
        let reply = run_lock_script(&self.conn, &invocation, context).await?;
        Ok((reply, 1))
    }

    /// Runs `script` followed by `WAIT 1 timeout` on the acknowledgement connection and
    /// returns the script's reply and the number of replicas that acknowledged.
    pub(super) async fn with_replica_ack(
        &self,
        ack: &ConnectionManager,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
        timeout_ms: u64,
    ) -> Result<(Value, i64)> {
        let mut conn = ack.clone();
        let pipe = script_pipeline(script, keys, args, Some(timeout_ms));
        for attempt in 0..2 {
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

    pub(super) async fn acquire_lock(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
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
        let wait_ms = wait_timeout(req.ttl);
        let keys = [&*k.lock, &*k.fence, &*k.origin, &*k.shared];
        let context = "redis acquire";
        let (reply, acks) = self
            .run_script(
                &ACQUIRE,
                &keys,
                &args,
                ack.as_ref(),
                wait_ms,
                context,
                // The release follows the unanswered acquire on its connection: sent on
                // another, it could overtake the acquire, which would then take the lock for
                // nobody until its ttl.
                || Some(self.release_command(req.name, req.owner)),
            )
            .await?;
        let attempt = parse_acquire_reply(&reply, req)?;
        if matches!(attempt, Attempt::Acquired { .. }) && acks < 1 {
            // Not safe from a failover: give it back, then report.
            let _ = self.release_lock(req.name, req.owner).await;
            return Err(Error::unavailable(format!(
                "no replica acknowledged lock {:?} within {wait_ms} ms (replica acknowledgement is on because \
                 the master reports replicas; replica_ack=false turns it off)",
                req.name.as_str()
            )));
        }
        Ok(attempt)
    }

    pub(super) async fn renew_lock(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        self.ensure_open()?;
        self.check_ttl(ttl)?;
        let k = keys(&self.settings.prefix, name);
        let args = [owner_hex(owner), ms(ttl).to_string()];
        let ack = self.replica_ack().await?;
        let wait_ms = wait_timeout(ttl);
        let (context, keys) = ("redis renew", [&*k.lock]);
        let (reply, acks) = self
            .run_script(&RENEW, &keys, &args, ack.as_ref(), wait_ms, context, || {
                None
            })
            .await?;
        let renewed = as_i64(&reply).unwrap_or(0);
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

    /// Renews mutexes in one script ([`RENEW_MANY`]) on one instance, followed by `WAIT 1`
    /// while the master reports replicas: one answer per lease, in order.
    pub(super) async fn renew_locks(&self, leases: &[RenewRequest<'_>]) -> Vec<Result<Renewal>> {
        let mut outcomes: Vec<Option<Result<Renewal>>> = leases
            .iter()
            .map(
                |lease| match self.ensure_open().and_then(|()| self.check_ttl(lease.ttl)) {
                    Ok(()) => None,
                    Err(e) => Some(Err(e)),
                },
            )
            .collect();
        let sent: Vec<usize> = (0..leases.len())
            .filter(|i| outcomes[*i].is_none())
            .collect();
        if sent.is_empty() {
            return outcomes.into_iter().flatten().collect();
        }
        let lock_keys: Vec<String> = sent
            .iter()
            .map(|i| keys(&self.settings.prefix, leases[*i].name).lock)
            .collect();
        let key_refs: Vec<&str> = lock_keys.iter().map(String::as_str).collect();
        let args: Vec<String> = sent
            .iter()
            .flat_map(|i| [owner_hex(leases[*i].owner), ms(leases[*i].ttl).to_string()])
            .collect();
        let shortest = sent
            .iter()
            .map(|i| leases[*i].ttl)
            .min()
            .unwrap_or_default();
        let wait_ms = wait_timeout(shortest);
        let answer = async {
            let ack = self.replica_ack().await?;
            self.run_script(
                &RENEW_MANY,
                &key_refs,
                &args,
                ack.as_ref(),
                wait_ms,
                "redis renew",
                || None,
            )
            .await
        }
        .await;
        let answers: Vec<Result<Renewal>> = match answer {
            Err(e) => sent.iter().map(|_| Err(e.clone())).collect(),
            Ok((reply, acks)) => {
                let renewed: Vec<i64> = match &reply {
                    Value::Array(items) => items.iter().map(|v| as_i64(v).unwrap_or(0)).collect(),
                    _ => Vec::new(),
                };
                sent.iter()
                    .enumerate()
                    .map(|(at, i)| match renewed.get(at) {
                        None => Err(Error::backend(format!(
                            "the renewal script answered {reply:?}, not one answer per lock"
                        ))),
                        Some(1) if acks < 1 => Err(Error::unavailable(format!(
                            "no replica acknowledged the renewal of lock {:?}",
                            leases[*i].name.as_str()
                        ))),
                        Some(1) => Ok(Renewal::Renewed),
                        Some(_) => Ok(Renewal::NotOurs),
                    })
                    .collect()
            }
        };
        for (i, answer) in sent.into_iter().zip(answers) {
            outcomes[i] = Some(answer);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::internal("a renewal was not sent"))))
            .collect()
    }

    pub(super) async fn release_lock(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let args = self.release_args(&k.channel, owner);
        let (context, keys) = ("redis release", [&*k.lock, &*k.gone]);
        // A release made on a blocking caller's thread ends a lease whose acquire was answered
        // before: it can go on any connection. Otherwise, with replica acknowledgement on, it
        // goes where acquires go that do not run on the caller's thread, the acknowledgement
        // connection: on another connection it could overtake an acquire sent before it (one
        // cancelled in flight, whose clean-up is this release), which would then take the lock
        // after it, held by nobody until its ttl. (A caller-driven acquire cannot be cancelled
        // in flight, and its clean-up after a timeout follows it on its own connection.)
        let direct = self.on_caller_connection(&RELEASE, &keys, &args, None, context, || None);
        let reply = match direct.await {
            Some(answer) => answer?.0,
            None => {
                let conn = match self.replica_ack().await? {
                    Some(ack) => Conn::Single(ack),
                    None => self.conn.clone(),
                };
                let mut invocation = RELEASE.prepare_invoke();
                invocation.key(&k.lock).key(&k.gone).arg(&args[..]);
                run_lock_script::<Value>(&conn, &invocation, context).await?
            }
        };
        Ok(as_i64(&reply) == Some(1))
    }

    /// The release script's arguments: owner, release channel, publish command, tombstone ttl.
    fn release_args(&self, channel: &str, owner: OwnerId) -> [String; 4] {
        [
            owner_hex(owner),
            channel.to_string(),
            self.conn.publish_command().to_string(),
            self.gone_ttl_ms.to_string(),
        ]
    }

    /// The release script as one command, to send without waiting for its reply.
    fn release_command(&self, name: &LockName, owner: OwnerId) -> redis::Cmd {
        let k = keys(&self.settings.prefix, name);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(RELEASE.get_hash())
            .arg(2)
            .arg(&k.lock)
            .arg(&k.gone)
            .arg(&self.release_args(&k.channel, owner)[..]);
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_timeout_is_well_under_a_third_of_the_ttl() {
        assert_eq!(wait_timeout(Duration::from_secs(30)), 1000);
        assert_eq!(wait_timeout(Duration::from_secs(2)), 200);
        assert_eq!(wait_timeout(Duration::from_millis(100)), 20);
    }
}
