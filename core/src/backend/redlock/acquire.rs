//! Taking a lock: phase 1 asks every master for the lock and its token, phase 2 raises the
//! granting masters' counters to the largest token `T`; the lease, with token `T`, is returned
//! only when both reached a majority within the validity ([`super`] says why tokens then
//! strictly increase).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::fanout::{error_summary, fan_out, fatal_error};
use super::health::{abstains, abstention_left};
use super::instance::Phase1;
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::redis::keys::keys;
use crate::backend::redis::scripts::{FENCE_COUNTER_TTL_MS, LAYOUT_VERSION};
use crate::backend::redis::{ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;

impl RedlockBackend {
    /// Phase 1, then phase 2 when a majority granted; every grant is released again when the
    /// lock is not taken.
    pub(super) async fn acquire_lock(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.ensure_open()?;
        let margin = self.check_ttl(req.ttl)?;
        let started = BootInstant::now();
        let valid_until = started.checked_add(req.ttl - margin).unwrap_or(started);
        let per = self.per_master(req.ttl);
        let (n, q) = (self.instances.len(), self.quorum);
        let (answers, eligible) = self.phase1(req, per).await;
        let granted: Vec<(usize, u64)> = answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                Some(Ok(Phase1 {
                    attempt: Attempt::Acquired { token, .. },
                    ..
                })) if eligible[i] => Some((i, *token)),
                _ => None,
            })
            .collect();
        if granted.len() >= q {
            let t = granted.iter().map(|(_, t)| *t).max().unwrap_or(0);
            let masters: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
            let fenced = self
                .phase2(req.name, req.owner, t, &masters, per, req.ttl)
                .await;
            if matches!(fenced, Ok(true)) && !valid_until.has_passed() {
                return Ok(Attempt::Acquired {
                    token: t,
                    origin: None,
                });
            }
            self.release_all(req.name, req.owner).await;
            fenced?;
            return Err(Error::unavailable(format!(
                "redlock fencing (phase 2) of lock {:?} did not reach {q} of {n} masters within the validity",
                req.name.as_str()
            )));
        }
        // No majority: give back every grant (late ones included: a release follows the
        // acquire on the same connection), then say why.
        let _ = self.release_all(req.name, req.owner).await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let held: Vec<Option<Duration>> = answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                Some(Ok(Phase1 {
                    attempt: Attempt::Held { expires_in },
                    ..
                })) if eligible[i] => Some(*expires_in),
                _ => None,
            })
            .collect();
        let voting = granted.len() + held.len();
        if !held.is_empty() && voting >= q {
            let expires_in = held.iter().flatten().min().copied();
            return Ok(Attempt::Held { expires_in });
        }
        let abstaining = self
            .instances
            .iter()
            .filter(|i| i.health().abstaining)
            .count();
        let excluded = self
            .instances
            .iter()
            .filter(|i| i.health().excluded)
            .count();
        // Masters that abstain only because they restarted recently will vote once their
        // uptime passes the bound: say when enough of them will, so that an acquire whose
        // wait allows it waits for that instead of failing.
        let mut abstention_left: Vec<Duration> = answers
            .iter()
            .filter_map(|a| a.as_ref()?.as_ref().ok()?.probe.as_ref())
            .filter(|probe| abstains(probe.uptime, self.max_ttl(), self.settings.max_skew))
            .map(|probe| abstention_left(probe.uptime, self.max_ttl(), self.settings.max_skew))
            .collect();
        abstention_left.sort();
        let ready_in = q
            .checked_sub(voting + 1)
            .and_then(|k| abstention_left.get(k).copied());
        let error = Error::unavailable(format!(
            "no quorum for lock {:?}: {voting} of {n} redlock masters voted (need {q}; {abstaining} abstaining after \
             a restart{}, {excluded} beyond the clock skew){}{}",
            req.name.as_str(),
            match ready_in {
                Some(left) => format!(
                    ", enough of them voting in {:.1} s at most",
                    left.as_secs_f64()
                ),
                None => String::new(),
            },
            if voting < n { ": " } else { "" },
            error_summary(&answers, &self.labels)
        ));
        Err(match ready_in {
            Some(left) => error.with_retry_after(left),
            None => error,
        })
    }

    /// A master stores a larger `max_ttl` than this Locker knew (another Locker wrote it, or
    /// this one connected while the masters that had it were down): use it from now on.
    fn learn_max_ttl(&self, answers: &[Option<Result<Phase1>>]) {
        let seen = answers
            .iter()
            .filter_map(|a| a.as_ref()?.as_ref().ok()?.max_ttl_ms)
            .max();
        if let Some(seen) = seen {
            let before = self.max_ttl_ms.fetch_max(seen, Ordering::AcqRel);
            if seen > before {
                flog!(
                    warn,
                    "redlock max_ttl is {:?} on the masters, more than the {:?} this Locker read at \
                     connect: using it",
                    Duration::from_millis(seen),
                    Duration::from_millis(before)
                );
            }
        }
    }

    /// Phase 1 on every master; returns the answers and which masters' votes count.
    async fn phase1(
        &self,
        req: &AcquireRequest<'_>,
        per: Duration,
    ) -> (Vec<Option<Result<Phase1>>>, Vec<bool>) {
        let k = keys(&self.settings.prefix, req.name);
        let args = [
            owner_hex(req.owner),
            ms(req.ttl).to_string(),
            req.holder.to_string(),
            LAYOUT_VERSION.to_string(),
            FENCE_COUNTER_TTL_MS.max(ms(req.ttl) * 2).to_string(),
        ];
        let (n, q) = (self.instances.len(), self.quorum);
        let cached = self.eligible_now();
        let (max_ttl, skew) = (self.max_ttl(), self.settings.max_skew);
        let max_ttl_key = self.settings.max_ttl_key();
        let requests = self
            .instances
            .iter()
            .map(|i| i.acquire(per, [&k.lock, &k.fence], &args, (&max_ttl_key, ms(max_ttl))))
            .collect();
        let answers = fan_out(requests, per + SLACK, &self.labels, |answers| {
            // A provisional count (the skew check needs the whole round): stop early once a
            // majority granted, or once a majority can no longer grant.
            let votes = |i: usize, p: &Phase1| {
                matches!(p.attempt, Attempt::Acquired { .. })
                    && p.probe
                        .as_ref()
                        .is_some_and(|probe| !abstains(probe.uptime, max_ttl, skew))
                    && (cached[i]
                        || crate::sync::unpoisoned(&self.instances[i].health)
                            .checked
                            .is_none())
            };
            let yes = ok_count(answers, votes);
            let no = answers.iter().enumerate().filter(|(i, a)| match a {
                Some(Ok(p)) => !votes(*i, p),
                Some(Err(_)) => true,
                None => false,
            });
            yes >= q || n - no.count() < q
        })
        .await;
        self.learn_max_ttl(&answers);
        let probes: Vec<_> = answers
            .iter()
            .map(|a| {
                a.as_ref()
                    .and_then(|a| a.as_ref().ok())
                    .and_then(|p| p.probe.clone())
            })
            .collect();
        let eligible = self.judge(&probes);
        (answers, eligible)
    }

    /// Phase 2 on the masters in `granted`; true when a majority of all N answered yes.
    async fn phase2(
        &self,
        name: &LockName,
        owner: OwnerId,
        t: u64,
        granted: &[usize],
        per: Duration,
        ttl: Duration,
    ) -> Result<bool> {
        let k = keys(&self.settings.prefix, name);
        let owner = owner_hex(owner);
        let counter_ttl = FENCE_COUNTER_TTL_MS.max(ms(ttl) * 2);
        let q = self.quorum;
        let labels: Vec<String> = granted.iter().map(|&i| self.labels[i].clone()).collect();
        let requests = granted
            .iter()
            .map(|&i| self.instances[i].raise(per, [&k.lock, &k.fence], &owner, t, counter_ttl))
            .collect();
        let total = granted.len();
        let answers = fan_out(requests, per + SLACK, &labels, |answers| {
            let yes = ok_count(answers, |_, ok| *ok);
            let no = answers
                .iter()
                .filter(|a| matches!(a, Some(Err(_)) | Some(Ok(false))))
                .count();
            yes >= q || total - no < q
        })
        .await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        Ok(ok_count(&answers, |_, ok| *ok) >= q)
    }
}
