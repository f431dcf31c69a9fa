//! The mutex on one Redis instance or a Cluster: acquire, renew and release, each one lock
//! script ([`super::mutex_scripts`]) sent the way every lock script is ([`super::run_script`]).

use std::time::Duration;

use redis::Value;

use super::conn::Conn;
use super::keys::keys;
use super::mutex_scripts::{
    ACQUIRE, FENCE_COUNTER_TTL_MS, LAYOUT_VERSION, RELEASE, RENEW, RENEW_MANY,
};
use super::reply::as_i64;
use super::reply::parse_acquire_reply;
use super::run_script::{run_lock_script, wait_timeout};
use super::{RedisBackend, ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt, RenewRequest, Renewal};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;

impl RedisBackend {
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
