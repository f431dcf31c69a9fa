//! Keeping and giving back a lock on the masters: renew, the owner's release, an operator's
//! force release, and what the masters' answers to a removal add up to.

use std::time::Duration;

use super::fanout::{error_summary, fan_out, fatal_error};
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::Renewal;
use crate::backend::redis::keys::keys;
use crate::backend::redis::{ms, owner_hex};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;

impl RedlockBackend {
    pub(super) async fn renew_lock(
        &self,
        name: &LockName,
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
            .map(|i| i.renew(per, &k.lock, &owner, ms(ttl)))
            .collect();
        let answers = fan_out(requests, per + SLACK, &self.labels, |answers| {
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
    pub(super) async fn release_lock(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        // Every request is on its connection after the fan-out's first poll; once a majority
        // has released, nobody can be refused by the rest for long, so the slowest masters
        // are not waited for. (An owner id is never used again after its release.)
        let requests = self.release_requests(name, owner);
        let q = self.quorum;
        let answers = fan_out(
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
        let requests = self
            .instances
            .iter()
            .map(|i| i.force_release(self.settings.instance_timeout, &k.lock, &k.channel))
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

    /// One release of `owner`'s key per master, in the masters' order.
    fn release_requests(
        &self,
        name: &LockName,
        owner: OwnerId,
    ) -> Vec<impl Future<Output = Result<bool>> + Send + use<'_>> {
        let k = keys(&self.settings.prefix, name);
        let owner = owner_hex(owner);
        self.instances
            .iter()
            .map(|i| {
                let (instance, k, owner) = (i.clone(), k.clone(), owner.clone());
                let timeout = self.settings.instance_timeout;
                async move {
                    instance
                        .release(timeout, [&k.lock, &k.gone], &owner, &k.channel)
                        .await
                }
            })
            .collect()
    }

    /// Releases `owner`'s key on every master, in parallel, and waits for the answers.
    pub(super) async fn release_all(
        &self,
        name: &LockName,
        owner: OwnerId,
    ) -> Vec<Option<Result<bool>>> {
        let requests = self.release_requests(name, owner);
        self.ask_every_master(requests).await
    }
}
