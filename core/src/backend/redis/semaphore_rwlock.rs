//! Semaphores and read-write locks on one Redis instance or a Cluster: acquire, renew, release
//! and abandon, each one script of [`super::semaphore_rwlock_scripts`] (the layout and its reasons are
//! there), run the way the mutex's scripts are run ([`super::mutex`]): on the shared
//! connection (a Cluster routes each by its first key to the master of the name's slot), twice
//! in the `fault-injection-duplicate-scripts` build, and pipelined with `WAIT 1` on the
//! acknowledgement connection while one instance's master reports replicas. Also the reading of
//! every acquire script's refusals (the mutex's acquire answers a kind conflict too).

use std::time::Duration;

use redis::{Script, Value};

use super::conn::Conn;
use super::keys::keys;
use super::mutex_scripts::FENCE_COUNTER_TTL_MS;
use super::reply::{as_i64, parse_acquire_reply};
use super::run_script::{run_lock_script, wait_timeout};
use super::semaphore_rwlock_scripts::{
    SHARED_ABANDON, SHARED_ACQUIRE, SHARED_LAYOUT_VERSION, SHARED_RELEASE, SHARED_RENEW,
};
use super::{RedisBackend, ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt, Renewal};
use crate::error::{Error, ErrorCode, Result};
use crate::ids::OwnerId;
use crate::name::LockName;

/// The ARGV of [`SHARED_ACQUIRE`] for `req` (one instance, a Cluster, each Redlock master).
pub(crate) fn shared_acquire_args(req: &AcquireRequest<'_>) -> Result<Vec<String>> {
    Ok(vec![
        owner_hex(req.owner),
        req.mode.as_str().to_string(),
        req.mode.kind().as_str().to_string(),
        req.mode.permits().to_string(),
        ms(req.ttl).to_string(),
        req.holder.to_string(),
        SHARED_LAYOUT_VERSION.to_string(),
        FENCE_COUNTER_TTL_MS.max(ms(req.ttl) * 2).to_string(),
        format!("{:016x}", crate::ids::random_origin()?),
    ])
}

/// Redis refuses a command a script calls that the user's ACL does not grant with a plain
/// error (NOPERM is only for keys and channels): for the shared scripts that means an ACL set
/// up for mutexes only, which is AUTH, and says what to grant.
pub(crate) fn explain_acl(err: Error) -> Error {
    if err.code() == ErrorCode::Backend && err.message().contains("can't run this command") {
        return Error::auth(format!(
            "{}: the Redis user may not run a command that semaphores and read-write locks need \
             (grant the sorted set commands and HDEL: docs/redis.md, Least-privilege ACL)",
            err.message().trim_end_matches(['.', ' '])
        ))
        .with_cause_of(&err);
    }
    err
}

impl RedisBackend {
    /// Runs a shared script that must reach a replica where the master reports replicas: the
    /// reply and how many replicas acknowledged (1 without replica acknowledgement). On a
    /// blocking caller's thread it goes on a caller-driven connection ([`super::direct`]), and
    /// `on_timeout` sends there what must reach the server after a script left unanswered.
    async fn run_acknowledged(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
        ttl: Duration,
        context: &str,
        after_timeout: impl FnOnce() -> Option<redis::Cmd>,
    ) -> Result<(Value, i64)> {
        let ack = self.replica_ack().await?;
        let wait_ms = wait_timeout(ttl);
        self.run_script(
            script,
            keys,
            args,
            ack.as_ref(),
            wait_ms,
            context,
            after_timeout,
        )
        .await
        .map_err(explain_acl)
    }

    /// The connection a release or abandonment goes on: the one acquires went on, so it
    /// cannot overtake an acquire sent before it (see [`RedisBackend::release_lock`]).
    async fn cleanup_conn(&self) -> Result<Conn> {
        Ok(match self.replica_ack().await? {
            Some(ack) => Conn::Single(ack),
            None => self.conn.clone(),
        })
    }

    pub(super) async fn acquire_shared(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.ensure_open()?;
        self.check_ttl(req.ttl)?;
        let k = keys(&self.settings.prefix, req.name);
        let args = shared_acquire_args(req)?;
        let (reply, acks) = self
            .run_acknowledged(
                &SHARED_ACQUIRE,
                &[
                    &k.shared, &k.leases, &k.waiters, &k.writers, &k.fence, &k.origin, &k.lock,
                ],
                &args,
                req.ttl,
                "redis acquire",
                // The release follows the unanswered acquire on its connection, as a mutex's
                // does (see [`RedisBackend::acquire_lock`]).
                || Some(self.shared_release_command(req.name, req.owner)),
            )
            .await?;
        let attempt = parse_acquire_reply(&reply, req)?;
        if matches!(attempt, Attempt::Acquired { .. }) && acks < 1 {
            // Not safe from a failover: give it back, then report.
            let _ = self.release_shared(req.name, req.owner).await;
            return Err(Error::unavailable(format!(
                "no replica acknowledged the {} lease of {:?} (replica acknowledgement is on \
                 because the master reports replicas; replica_ack=false turns it off)",
                req.mode.as_str(),
                req.name.as_str()
            )));
        }
        Ok(attempt)
    }

    pub(super) async fn renew_shared(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        self.ensure_open()?;
        self.check_ttl(ttl)?;
        let k = keys(&self.settings.prefix, name);
        let args = [owner_hex(owner), ms(ttl).to_string()];
        let (reply, acks) = self
            .run_acknowledged(
                &SHARED_RENEW,
                &[&k.shared, &k.leases, &k.waiters, &k.writers],
                &args,
                ttl,
                "redis renew",
                || None,
            )
            .await?;
        if as_i64(&reply) != Some(1) {
            return Ok(Renewal::NotOurs);
        }
        if acks < 1 {
            return Err(Error::unavailable(format!(
                "no replica acknowledged the renewal of a lease of {:?}",
                name.as_str()
            )));
        }
        Ok(Renewal::Renewed)
    }

    pub(super) async fn release_shared(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        let (keys, args) = self.shared_release_arguments(name, owner);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let context = "redis release";
        // On a blocking caller's thread, a release ends a lease whose acquire was answered
        // before: any connection will do (see [`RedisBackend::release_lock`]).
        let on_caller =
            self.on_caller_connection(&SHARED_RELEASE, &keys, &args, None, context, || None);
        let reply = match on_caller.await {
            Some(answer) => answer.map_err(explain_acl)?.0,
            None => {
                let mut invocation = SHARED_RELEASE.prepare_invoke();
                for key in &keys {
                    invocation.key(*key);
                }
                invocation.arg(&args[..]);
                run_lock_script::<Value>(&self.cleanup_conn().await?, &invocation, context)
                    .await
                    .map_err(explain_acl)?
            }
        };
        Ok(as_i64(&reply) == Some(1))
    }

    /// A shared lease's release, as one command.
    fn shared_release_command(&self, name: &LockName, owner: OwnerId) -> redis::Cmd {
        let (keys, args) = self.shared_release_arguments(name, owner);
        let mut release = redis::cmd("EVALSHA");
        release
            .arg(SHARED_RELEASE.get_hash())
            .arg(keys.len())
            .arg(&keys[..])
            .arg(&args[..]);
        release
    }

    /// The keys and arguments of a shared lease's release.
    fn shared_release_arguments(
        &self,
        name: &LockName,
        owner: OwnerId,
    ) -> ([String; 5], [String; 4]) {
        let k = keys(&self.settings.prefix, name);
        let owner = owner_hex(owner);
        let gone = k.gone_of(&owner);
        (
            [k.shared, k.leases, k.waiters, k.writers, gone],
            [
                owner,
                k.channel,
                self.conn.publish_command().to_string(),
                self.gone_ttl_ms.to_string(),
            ],
        )
    }

    pub(super) async fn abandon_shared(&self, name: &LockName, owner: OwnerId) -> Result<()> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let _: i64 = run_lock_script(
            &self.cleanup_conn().await?,
            SHARED_ABANDON
                .key(&k.shared)
                .key(&k.leases)
                .key(&k.waiters)
                .key(&k.writers)
                .arg(owner_hex(owner))
                .arg(&k.channel)
                .arg(self.conn.publish_command()),
            "redis abandon",
        )
        .await
        .map_err(explain_acl)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_the_acl_does_not_grant_is_auth_and_says_what_to_grant() {
        let refused = Error::backend(
            "redis acquire: ResponseError: The user executing the script can't run this command \
             or subcommand script: f541, on @user_script:20.",
        );
        let err = explain_acl(refused);
        assert_eq!(err.code(), ErrorCode::Auth);
        assert!(err.message().contains("docs/redis.md"), "{err}");
        let other = explain_acl(Error::backend("redis acquire: something else"));
        assert_eq!(other.code(), ErrorCode::Backend);
    }
}
