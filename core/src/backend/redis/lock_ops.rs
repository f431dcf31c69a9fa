//! Acquire, renew and release: each one lock script ([`super::scripts`]), run on the shared
//! connection, or, while the master reports replicas, pipelined with `WAIT 1` on the
//! acknowledgement connection ([`super::replica`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ScriptInvocation, Value};

use super::conn::Conn;
use super::error::map_error;
use super::keys::keys;
use super::reply::as_i64;
use super::scripts::{ACQUIRE, FENCE_COUNTER_TTL_MS, LAYOUT_VERSION, RELEASE, RENEW};
use super::shared::parse_acquire_reply;
use super::{RedisBackend, ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt, Renewal};
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
        let Some(ack) = &ack else {
            let reply: Value = run_lock_script(
                &self.conn,
                ACQUIRE
                    .key(&k.lock)
                    .key(&k.fence)
                    .key(&k.origin)
                    .key(&k.shared)
                    .arg(&args[..]),
                "redis acquire",
            )
            .await?;
            return parse_acquire_reply(&reply, req);
        };
        let timeout = wait_timeout(req.ttl);
        let (reply, acks) = self
            .with_replica_ack(
                ack,
                &ACQUIRE,
                &[&k.lock, &k.fence, &k.origin, &k.shared],
                &args,
                timeout,
            )
            .await?;
        let attempt = parse_acquire_reply(&reply, req)?;
        if matches!(attempt, Attempt::Acquired { .. }) && acks < 1 {
            // Not safe from a failover: give it back, then report.
            let _ = self.release_lock(req.name, req.owner).await;
            return Err(Error::unavailable(format!(
                "no replica acknowledged lock {:?} within {timeout} ms (replica acknowledgement is on because \
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

    pub(super) async fn release_lock(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
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
