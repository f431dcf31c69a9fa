//! Taking a lock: phase 1 asks every master for the lock and its token, proposing one; when a
//! majority of voting masters minted the same token the lease has it, else phase 2 raises the
//! granting masters' counters to the largest token `T`; the lease, with token `T`, is returned
//! only when both reached a majority within the validity ([`super`] says why tokens then
//! strictly increase).

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Script;

use super::fanout::{error_summary, fan_out_until, fatal_error};
use super::health::{abstains, abstention_left};
use super::instance::Phase1;
use super::{RedlockBackend, SLACK, ok_count};
use crate::backend::redis::keys::keys;
use crate::backend::redis::mutex_scripts::{ACQUIRE, FENCE_COUNTER_TTL_MS, LAYOUT_VERSION};
use crate::backend::redis::reply::as_i64;
use crate::backend::redis::semaphore_rwlock::shared_acquire_args;
use crate::backend::redis::semaphore_rwlock_scripts::{SHARED_ACQUIRE, SHARED_RAISE};
use crate::backend::redis::{ms, owner_hex};
use crate::backend::{AcquireRequest, Attempt};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::mode::LockKind;

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
        let proposal = self.proposal().map(|p| (p, self.settings.max_skew));
        let acquire = acquire_script(&self.settings.prefix, req, proposal)?;
        let (answers, eligible) = self.phase1(req, acquire, per).await;
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
            // A majority of voting masters minted the same token: their counters already
            // carry it, as phase 2 would have made them (docs/redlock.md, "Two rounds when the
            // quorum agrees").
            if let Some(t) = agreed(&granted, q) {
                if !valid_until.has_passed() {
                    flog!(
                        debug,
                        lock = req.name,
                        "redlock: {q} or more voting masters minted token {t}: two rounds, no phase 2"
                    );
                    return Ok(Attempt::Acquired {
                        token: t,
                        origin: None,
                    });
                }
                self.give_back(req).await;
                return Err(Error::unavailable(format!(
                    "redlock lock {:?} was granted by {q} of {n} masters after its validity ran out",
                    req.name.as_str()
                )));
            }
            let t = granted.iter().map(|(_, t)| *t).max().unwrap_or(0);
            let masters: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
            let fenced = self.phase2(req, t, &masters, per).await;
            if matches!(fenced, Ok(true)) && !valid_until.has_passed() {
                return Ok(Attempt::Acquired {
                    token: t,
                    origin: None,
                });
            }
            self.give_back(req).await;
            fenced?;
            return Err(Error::unavailable(format!(
                "redlock fencing (phase 2) of lock {:?} did not reach {q} of {n} masters within the validity",
                req.name.as_str()
            )));
        }
        // No majority: give back every grant (late ones included: a release follows the
        // acquire on the same connection), then say why.
        self.give_back(req).await;
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
        acquire: (&'static Script, Vec<String>, Vec<String>),
        per: Duration,
    ) -> (Vec<Option<Result<Phase1>>>, Vec<bool>) {
        let (script, keys, args) = acquire;
        let (n, q) = (self.instances.len(), self.quorum);
        let cached = self.eligible_now();
        let (max_ttl, skew) = (self.max_ttl(), self.settings.max_skew);
        let max_ttl_key = self.settings.max_ttl_key();
        let requests = self
            .instances
            .iter()
            .map(|i| {
                let (instance, keys, args) = (i.clone(), keys.clone(), args.clone());
                let (owned, max_ttl_key) = (req.to_owned(), max_ttl_key.clone());
                async move {
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    let max_ttl = (max_ttl_key.as_str(), ms(max_ttl));
                    let req = owned.as_request();
                    instance
                        .acquire(per, script, &keys, &args, max_ttl, &req)
                        .await
                }
            })
            .collect();
        let answers = fan_out_until(requests, per + SLACK, &self.labels, |answers| {
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
            let unanswered = answers.iter().filter(|a| a.is_none()).count();
            // A majority granted: done once they agree on a token, or once the masters yet
            // to answer cannot make a majority agree (then phase 2 decides).
            let tokens: Vec<(usize, u64)> = answers
                .iter()
                .enumerate()
                .filter_map(|(i, a)| match a {
                    Some(Ok(p)) if votes(i, p) => match p.attempt {
                        Attempt::Acquired { token, .. } => Some((i, token)),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            let agreeing = largest_agreement(&tokens);
            (yes >= q && (agreeing >= q || agreeing + unanswered < q)) || n - no.count() < q
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
        req: &AcquireRequest<'_>,
        t: u64,
        granted: &[usize],
        per: Duration,
    ) -> Result<bool> {
        let k = keys(&self.settings.prefix, req.name);
        let owner = owner_hex(req.owner);
        let counter_ttl = FENCE_COUNTER_TTL_MS.max(ms(req.ttl) * 2);
        let q = self.quorum;
        let labels: Vec<String> = granted.iter().map(|&i| self.labels[i].clone()).collect();
        let mode = req.mode;
        let requests = granted
            .iter()
            .map(|&i| {
                let (instance, k, owner) = (self.instances[i].clone(), k.clone(), owner.clone());
                async move {
                    if mode.kind() == LockKind::Mutex {
                        let keys = [k.lock.as_str(), k.fence.as_str()];
                        return instance.raise(per, keys, &owner, t, counter_ttl).await;
                    }
                    let keys = [&k.shared, &k.leases, &k.waiters, &k.writers, &k.fence]
                        .map(String::as_str);
                    let args = [owner, t.to_string(), counter_ttl.to_string()];
                    let reply = instance
                        .run(per, &SHARED_RAISE, &keys, &args, "fencing")
                        .await?;
                    Ok(as_i64(&reply) == Some(1))
                }
            })
            .collect();
        let total = granted.len();
        let answers = fan_out_until(requests, per + SLACK, &labels, |answers| {
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

/// The phase-1 script of `req`'s kind, with its keys and arguments: the one-instance lock's
/// acquire for a mutex, the shared kinds' for a read or write lease, each with every key the
/// one-instance lock passes, so that each refuses a name in use as the other kind (a Redlock
/// lease has no origin mark: the mutex's script is told so and skips it; the shared kinds'
/// script writes one, which Redlock ignores).
/// How many of the granted tokens are the most common one.
fn largest_agreement(granted: &[(usize, u64)]) -> usize {
    granted
        .iter()
        .map(|(_, t)| granted.iter().filter(|(_, u)| u == t).count())
        .max()
        .unwrap_or(0)
}

/// The token `q` or more voting masters granted, if any.
fn agreed(granted: &[(usize, u64)], q: usize) -> Option<u64> {
    granted
        .iter()
        .map(|(_, t)| *t)
        .find(|t| granted.iter().filter(|(_, u)| u == t).count() >= q)
}

fn acquire_script(
    prefix: &str,
    req: &AcquireRequest<'_>,
    proposal: Option<(u64, Duration)>,
) -> Result<(&'static Script, Vec<String>, Vec<String>)> {
    let k = keys(prefix, req.name);
    // The proposal and the cap the masters hold it to (docs/redlock.md, "Two rounds when the
    // quorum agrees").
    let proposed = proposal.map(|(p, skew)| [p.to_string(), skew.as_micros().to_string()]);
    if req.mode.kind() == LockKind::Mutex {
        let args = vec![
            owner_hex(req.owner),
            ms(req.ttl).to_string(),
            req.holder.to_string(),
            LAYOUT_VERSION.to_string(),
            FENCE_COUNTER_TTL_MS.max(ms(req.ttl) * 2).to_string(),
            // No origin mark: a Redlock lease has none (see the script).
            String::new(),
        ];
        let args = args
            .into_iter()
            .chain(proposed.into_iter().flatten())
            .collect();
        return Ok((&ACQUIRE, vec![k.lock, k.fence, k.origin, k.shared], args));
    }
    let mut args = shared_acquire_args(req)?;
    args.extend(proposed.into_iter().flatten());
    let keys = vec![
        k.shared, k.leases, k.waiters, k.writers, k.fence, k.origin, k.lock,
    ];
    Ok((&SHARED_ACQUIRE, keys, args))
}
