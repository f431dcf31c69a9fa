//! How every lock script is sent (the mutex's, [`super::mutex`], and the semaphore's and
//! read-write lock's, [`super::semaphore_rwlock`]): on the shared connection (on a blocking
//! caller's thread, acquire and release on a caller-driven one, [`super::direct`]), or, while
//! the master reports replicas, pipelined with `WAIT 1` on the acknowledgement connection
//! ([`super::replica`]); twice in the test-only `fault-injection-duplicate-scripts` build.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation, Value};

use super::conn::Conn;
use super::direct::Direct;
use super::error::map_error;
use super::reply::as_i64;
use super::{RedisBackend, ms};
use crate::error::{Error, Result};

/// How many times each lock script (acquire, renew, release) is sent: twice, keeping the
/// second reply, in a build with the test-only `fault-injection-duplicate-scripts` feature. That
/// is what the Cluster client's retry does after a reply was lost: the scripts must answer the
/// second run as they answered the first (see [`super::mutex_scripts`]).
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
