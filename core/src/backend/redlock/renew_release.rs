//! Keeping and giving back a lock on the masters: renew, the owner's release, the giving back
//! of a failed attempt's grants, a waiter's leaving, an operator's force release, and what the
//! masters' answers to a removal add up to. A mutex runs the one-instance lock's scripts on
//! each master, a read or write lease the shared kinds' ([`crate::backend::redis::semaphore_rwlock_scripts`]).

use std::time::Duration;

use redis::Script;

use super::fanout::{error_summary, fan_out_until, fatal_error};
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::redis::keys::keys;
use crate::backend::redis::mutex_scripts::GONE_TTL_MS;
use crate::backend::redis::reply::as_i64;
use crate::backend::redis::semaphore_rwlock_scripts::{
    FORCE_RELEASE_ANY, SHARED_ABANDON, SHARED_RELEASE, SHARED_RENEW, SHARED_STEP_BACK,
};
use crate::backend::redis::{ms, owner_hex};
use crate::backend::{AcquireRequest, Renewal};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;

impl RedlockBackend {
    pub(super) async fn renew_lock(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        self.ensure_open()?;
        self.check_ttl(ttl)?;
        let k = keys(&self.settings.prefix, name);
        let owner = owner_hex(owner);
        let (n, q) = (self.instances.len(), self.quorum);
        let eligible = self.eligible_now();
        let per = self.per_master(ttl);
        let requests = self
            .instances
            .iter()
            .map(|i| {
                let (instance, k, owner) = (i.clone(), k.clone(), owner.clone());
                async move {
                    if mode.kind() == LockKind::Mutex {
                        return instance.renew(per, &k.lock, &owner, ms(ttl)).await;
                    }
                    let keys = [&k.shared, &k.leases, &k.waiters, &k.writers].map(String::as_str);
                    let args = [owner, ms(ttl).to_string()];
                    let reply = instance
                        .run(per, &SHARED_RENEW, &keys, &args, "renew")
                        .await?;
                    Ok(as_i64(&reply) == Some(1))
                }
            })
            .collect();
        let answers = fan_out_until(requests, per + SLACK, &self.labels, |answers| {
            let yes = ok_count(answers, |i, ok| *ok && eligible[i]);
            let not_ours = ok_count(answers, |_, ok| !*ok);
            yes >= q || not_ours > n - q || answers.iter().all(Option::is_some)
        })
        .await;
        if ok_count(&answers, |i, ok| *ok && eligible[i]) >= q {
            return Ok(Renewal::Renewed);
        }
        if ok_count(&answers, |_, ok| !*ok) > n - q {
            return Ok(Renewal::NotOurs);
        }
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        Err(Error::unavailable(format!(
            "no quorum to renew lock {:?}: {} of {n} redlock masters renewed (need {q}): {}",
            name.as_str(),
            ok_count(&answers, |i, ok| *ok && eligible[i]),
            error_summary(&answers, &self.labels)
        )))
    }

    /// Sent to every master. `Ok(true)` when the lock may still have been ours: our keys
    /// removed, plus the masters that did not answer, reach a majority (and at least one key
    /// was there). `Ok(false)` when a majority answered and fewer than a majority had our key:
    /// it had been removed or taken over (a straggling key, such as one a forced release did
    /// not reach in time, does not make a lease). Otherwise UNAVAILABLE.
    pub(super) async fn release_lock(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
    ) -> Result<bool> {
        self.ensure_open()?;
        // Once a majority has released, the slowest masters are not waited for: their
        // releases still run (in the fan-out's own task), and an owner id is never used again.
        let requests = self.release_requests(name, mode, owner);
        let q = self.quorum;
        let answers = fan_out_until(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
            |answers| ok_count(answers, |_, ok| *ok) >= q,
        )
        .await;
        self.settle_removal(&answers, name, "release")
    }

    /// Sent to every master, removing whatever key each has for the lock; answered as a
    /// release is ([`Self::settle_removal`]): `Ok(true)` when somebody may have held it (a
    /// holder has keys on a majority), `Ok(false)` when a majority answered and fewer than a
    /// majority had a key (stragglers of a release still in flight or of a failed acquire are
    /// removed all the same). A master that was down keeps its key until its ttl, but without
    /// a majority of keys nobody can renew.
    pub(super) async fn force_release_lock(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let keys = [&k.shared, &k.leases, &k.waiters, &k.writers, &k.lock].map(String::as_str);
        let args = [k.channel.clone(), "PUBLISH".to_string()];
        let timeout = self.settings.instance_timeout;
        let requests = self
            .instances
            .iter()
            .map(|i| {
                let (keys, args) = (&keys, &args);
                async move {
                    let reply = i
                        .run(timeout, &FORCE_RELEASE_ANY, keys, args, "force release")
                        .await?;
                    Ok(as_i64(&reply) == Some(1))
                }
            })
            .collect();
        let answers = self.ask_every_master(requests).await;
        self.settle_removal(&answers, name, "force release")
    }

    /// The outcome of removing a lock's keys (release, force release) from the masters'
    /// answers. A lease exists only on a majority, so: true when the keys removed and the
    /// masters that did not answer reach one (and one key was there); false when a majority
    /// answered and fewer than a majority had a key; a fatal error as it came; otherwise
    /// UNAVAILABLE, since the unanswered may hold it.
    fn settle_removal(
        &self,
        answers: &[Option<Result<bool>>],
        name: &LockName,
        what: &str,
    ) -> Result<bool> {
        let removed = ok_count(answers, |_, removed| *removed);
        let answered = ok_count(answers, |_, _| true);
        let unanswered = self.instances.len() - answered;
        if removed > 0 && removed + unanswered >= self.quorum {
            return Ok(true);
        }
        if let Some(e) = fatal_error(answers) {
            return Err(e);
        }
        if answered >= self.quorum {
            if removed > 0 {
                flog!(
                    info,
                    lock = name,
                    "{what} removed {removed} straggling key(s) of a lock no majority held"
                );
            }
            return Ok(false);
        }
        Err(Error::unavailable(format!(
            "no quorum to {what} lock {:?}: {answered} of {} redlock masters answered: {}",
            name.as_str(),
            self.instances.len(),
            error_summary(answers, &self.labels)
        )))
    }

    /// One release of `owner`'s lease per master, in the masters' order.
    fn release_requests(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
    ) -> Vec<impl Future<Output = Result<bool>> + Send + 'static + use<>> {
        let k = keys(&self.settings.prefix, name);
        let owner = owner_hex(owner);
        let timeout = self.settings.instance_timeout;
        let gone_ttl_ms = GONE_TTL_MS.max(ms(timeout)).to_string();
        self.instances
            .iter()
            .map(|i| {
                let (instance, k, owner) = (i.clone(), k.clone(), owner.clone());
                let gone_ttl_ms = gone_ttl_ms.clone();
                async move {
                    if mode.kind() == LockKind::Mutex {
                        let keys = [k.lock.as_str(), k.gone.as_str()];
                        return instance.release(timeout, keys, &owner, &k.channel).await;
                    }
                    let gone = k.gone_of(&owner);
                    let keys = [&k.shared, &k.leases, &k.waiters, &k.writers, &gone];
                    let args = [owner, k.channel.clone(), "PUBLISH".into(), gone_ttl_ms];
                    let keys = keys.map(String::as_str);
                    let reply = instance
                        .run(timeout, &SHARED_RELEASE, &keys, &args, "release")
                        .await?;
                    Ok(as_i64(&reply) == Some(1))
                }
            })
            .collect()
    }

    /// Gives back what an attempt that did not win a majority was granted, on every master, in
    /// parallel, waiting for the answers. A mutex's grants are released; a read or write
    /// lease's become waiter registrations ([`SHARED_STEP_BACK`]), as on the masters that
    /// answered "held", so a writer keeps holding back the readers that arrive after it.
    pub(super) async fn give_back(&self, req: &AcquireRequest<'_>) {
        if req.mode.kind() == LockKind::Mutex {
            let requests = self.release_requests(req.name, req.mode, req.owner);
            self.ask_every_master(requests).await;
            return;
        }
        let k = keys(&self.settings.prefix, req.name);
        let keys = [&k.shared, &k.leases, &k.waiters, &k.writers].map(String::as_str);
        let args = [
            owner_hex(req.owner),
            req.mode.as_str().to_string(),
            req.holder.to_string(),
            ms(req.ttl).to_string(),
            k.channel.clone(),
            "PUBLISH".to_string(),
        ];
        self.on_every_master(&SHARED_STEP_BACK, &keys, &args, "step back")
            .await;
    }

    /// A waiter gave up (its wait ran out, or it was cancelled): its registrations go from
    /// every master, so the readers queued behind a writer that left may go at once.
    pub(super) async fn abandon_wait(&self, name: &LockName, mode: LockMode, owner: OwnerId) {
        if mode.kind() == LockKind::Mutex {
            return;
        }
        let k = keys(&self.settings.prefix, name);
        let keys = [&k.shared, &k.leases, &k.waiters, &k.writers].map(String::as_str);
        let args = [owner_hex(owner), k.channel.clone(), "PUBLISH".to_string()];
        self.on_every_master(&SHARED_ABANDON, &keys, &args, "abandon")
            .await;
    }

    /// Runs one shared script on every master, waiting for every answer (or its timeout).
    async fn on_every_master(&self, script: &Script, keys: &[&str], args: &[String], what: &str) {
        let timeout = self.settings.instance_timeout;
        let requests = self
            .instances
            .iter()
            .map(|i| i.run(timeout, script, keys, args, what))
            .collect();
        self.ask_every_master(requests).await;
    }
}
