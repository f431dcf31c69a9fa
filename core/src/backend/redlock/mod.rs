//! Redlock over N independent Redis masters, with fencing tokens that strictly increase
//! (docs/design.md §3.3, issue 4). docs/redlock.md is the operator's version of this page.
//!
//! The lock is the single-instance Redis lock ([`crate::backend::redis`]: same keys, same
//! acquire, renew and release scripts) taken on a majority `Q = N/2 + 1` of all N configured
//! masters, as published (validity = ttl - elapsed - drift; release everywhere on failure;
//! the Locker retries with jitter until its deadline), with four changes:
//!
//! 1. **Parallel fan-out** ([`fanout`]): the N requests go out together and a round ends as
//!    soon as its outcome is decided (or at the per-master timeout, at most a tenth of the ttl
//!    and `instance_timeout`), so it costs the slowest reply of the majority it needed.
//! 2. **Fencing phase 2**: phase 1 takes each granting master's token (its
//!    `max(counter + 1, TIME in µs)`); `T` = the largest. Phase 2 runs [`scripts::RAISE`] on the
//!    granting masters in parallel: "if the owner is still me, counter = max(counter, T)". Only
//!    when a majority of all N answered yes, within the validity, is the lease returned, with
//!    token `T`.
//! 3. **A restarted master abstains** ([`health`]) while its `uptime_in_seconds` is below
//!    `max_ttl + 2 × max_skew`. `INFO server` is pipelined in front of every phase-1 acquire, so
//!    the vote and the uptime it is judged by come from the same moment. `max_ttl` is stored on
//!    the masters (`<prefix>:redlock:max_ttl`); every Locker uses the largest value it has
//!    read, and every phase-1 round writes its value where it is missing or smaller and reads
//!    the stored one back, so Lockers converge; a ttl above it is INVALID_ARGUMENT.
//! 4. **Clock skew**: the same `INFO server` carries `server_time_usec`; a master whose clock is
//!    further than `max_skew` from the median of the others' is left out of quorums until it is
//!    back within it.
//!
//! Abstaining and excluded masters still receive requests (their answers tell when they are
//! back), but their grants count as no votes; the quorum stays a majority of all N. After a
//! successful acquire their grants are kept (the holder's own keys, renewed with the others,
//! expiring with the lease); a failed acquire releases every grant. A master listed twice (one
//! `run_id` under two addresses) is refused at connect, or left out when it first answers later.
//!
//! # Why tokens strictly increase
//!
//! Let lease A end (released, or expired) before lease B is granted, A with token `T_A`
//! written by phase 2 on a majority `P_A`, B granted by a phase-1 majority `G_B`. Two
//! majorities of the same N masters share at least one master `m`.
//! - On `m`, A's phase 2 set the counter to at least `T_A` *while A's key was still there*
//!   (the script checks the owner and runs atomically).
//! - B's grant on `m` needed A's key gone (acquire refuses while the key exists), so it came
//!   after that write, and the counter only grows: B's token on `m` is at least `T_A + 1`.
//! - `T_B` is the largest of B's phase-1 tokens, so `T_B > T_A`.
//!
//! The counter on `m` can be lost only if `m` restarts (no persistence, or an old RDB file).
//! Then `m` abstains for `max_ttl + 2 × max_skew`: every lease it granted before has expired,
//! and its clock, which floors every token it mints, has passed every token handed out before
//! the restart (tokens are at most the fastest master's clock, and the fastest leads the
//! slowest by at most twice the skew). A counter set far ahead of the clocks by hand is safe
//! without restarts (the argument above never uses the clocks); across a restart of the
//! master that holds it, it is not, and docs/redlock.md says so.
//!
//! Without phase 2, the counter on `m` is only the token `m` itself minted for A, which may be
//! below `T_A` (A's largest token came from a master with a faster clock, or a counter ahead),
//! and B's token can fall below `T_A`: the randomized model in `model.rs` finds this with the
//! phase switched off, and `tokens_increase_across_skewed_counters` in
//! core/tests/redlock_lock.rs steers two majorities on the real masters into exactly this case.
//!
//! # Mutual exclusion
//!
//! As published: a lease is valid until its client deadline (sent + ttl − drift, the drift
//! including `max_skew`); while it is valid a majority of masters hold its key (granted or
//! renewed by a majority, expiring no earlier on the masters' clocks), so no other majority can
//! be granted. A restarted master that forgot a key abstains until that key would have expired.

mod fanout;
pub(crate) mod health;
mod instance;
#[cfg(test)]
mod model;
pub(crate) mod scripts;
pub(crate) mod settings;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use self::fanout::{error_summary, fan_out, fatal_error};
use self::health::{abstains, abstention_left, duplicates, skewed};
use self::instance::{Instance, Phase1};
use self::settings::RedlockSettings;
use self::watch::AnyOf;
use super::redis::connect::RedisSettings;
use super::redis::keys::keys;
use super::redis::scripts::{FENCE_COUNTER_TTL_MS, LAYOUT_VERSION};
use super::redis::{ms, owner_hex};
use super::{AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, Renewal};
use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::url::{BackendKind, LockerUrl};

/// How long a master's last clock reading still counts for the skew check of a round it did
/// not answer.
const OFFSET_FRESH: Duration = Duration::from_secs(30);

/// Each master's request carries its own timeout; the fan-out's is a backstop a little later.
const SLACK: Duration = Duration::from_millis(50);

pub struct RedlockBackend {
    instances: Vec<Arc<Instance>>,
    labels: Vec<String>,
    settings: RedlockSettings,
    /// The stored `max_ttl` in ms: the longest ttl any Locker of this deployment uses. It only
    /// grows: every phase-1 round writes it where it is missing or smaller and reads the
    /// masters' value back ([`scripts::RAISE_MAX_TTL`]), so Lockers converge on the largest.
    max_ttl_ms: AtomicU64,
    quorum: usize,
    deployment_id: String,
    /// What earlier versions used: the masters in the order listed.
    listed_id: String,
    closed: AtomicBool,
}

fn sorted(labels: &[String]) -> Vec<String> {
    let mut labels = labels.to_vec();
    labels.sort();
    labels
}

/// Each master's last known `run_id`.
fn lock_all_run_ids(instances: &[Arc<Instance>]) -> Vec<Option<String>> {
    instances
        .iter()
        .map(|i| crate::sync::unpoisoned(&i.run_id).clone())
        .collect()
}

fn ok_count<T>(answers: &[Option<Result<T>>], yes: impl Fn(usize, &T) -> bool) -> usize {
    answers
        .iter()
        .enumerate()
        .filter(|(i, a)| matches!(a, Some(Ok(v)) if yes(*i, v)))
        .count()
}

impl RedlockBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let settings = RedlockSettings::from_url(url)?;
        let connect_timeout = (options.operation_timeout / 2).min(Duration::from_secs(5));
        let instances = url
            .hosts
            .iter()
            .map(|host| Instance::new(url, host, connect_timeout))
            .collect::<Result<Vec<_>>>()?;
        let labels: Vec<String> = instances.iter().map(|i| i.label.clone()).collect();
        let quorum = RedlockSettings::quorum(instances.len());
        let redis_settings = RedisSettings {
            prefix: settings.prefix.clone(),
            replica_ack: false,
            allow_eviction: settings.allow_eviction,
            strict_checks: settings.strict_checks,
            max_skew: settings.max_skew,
        };
        let key = settings.max_ttl_key();
        let wanted = ms(settings.max_ttl);
        let answers = fan_out(
            instances
                .iter()
                .map(|i| i.prepare(&redis_settings, &key))
                .collect(),
            connect_timeout + SLACK,
            &labels,
            |_| false,
        )
        .await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let reached = ok_count(&answers, |_, _| true);
        if reached < quorum {
            return Err(Error::unavailable(format!(
                "no quorum: {reached} of {} redlock masters answered at connect (need {quorum}): {}",
                instances.len(),
                error_summary(&answers, &labels)
            )));
        }
        // The largest value any master stores; the URL's only for a new deployment (the first
        // client's wins). Masters that answered without one get it now: the deployment's
        // value, not this URL's, for a master that restarted and lost it.
        let found = answers
            .iter()
            .flatten()
            .flatten()
            .filter_map(|(stored, _)| *stored)
            .max();
        let missing: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, Some(Ok((None, _)))))
            .map(|(i, _)| i)
            .collect();
        let stored_now = fan_out(
            missing
                .iter()
                .map(|&i| instances[i].store_max_ttl(&key, found.unwrap_or(wanted)))
                .collect(),
            connect_timeout + SLACK,
            &missing
                .iter()
                .map(|&i| labels[i].clone())
                .collect::<Vec<_>>(),
            |_| false,
        )
        .await;
        if let Some(e) = fatal_error(&stored_now) {
            return Err(e);
        }
        let stored = found
            .into_iter()
            .chain(stored_now.iter().flatten().flatten().copied())
            .max()
            .unwrap_or(wanted);
        let max_ttl = Duration::from_millis(stored);
        if url.query.contains_key("max_ttl") && stored != wanted {
            flog!(
                warn,
                "redlock max_ttl={:?} from the URL is ignored: the masters store {max_ttl:?} ({key}), \
                 which every client uses",
                settings.max_ttl
            );
        }
        let backend = RedlockBackend {
            // The masters as a set: the order they are listed in is not part of the identity.
            deployment_id: format!("redlock:{}/{}", sorted(&labels).join(","), settings.prefix),
            listed_id: format!("redlock:{}/{}", labels.join(","), settings.prefix),
            instances,
            labels,
            settings,
            max_ttl_ms: AtomicU64::new(stored),
            quorum,
            closed: AtomicBool::new(false),
        };
        let probes: Vec<_> = answers
            .into_iter()
            .map(|a| a.and_then(|a| a.ok()).map(|(_, probe)| probe))
            .collect();
        let run_ids: Vec<Option<&str>> = probes
            .iter()
            .map(|p| p.as_ref().and_then(|p| p.run_id.as_deref()))
            .collect();
        if let Some((i, Some(first))) = duplicates(&run_ids)
            .into_iter()
            .enumerate()
            .find(|(_, d)| d.is_some())
        {
            return Err(Error::invalid(format!(
                "redlock masters {} and {} are the same server (one run_id): list each master \
                 once, or its vote would count twice",
                backend.labels[first], backend.labels[i]
            )));
        }
        backend.judge(&probes);
        Ok(backend)
    }

    fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.max_ttl_ms.load(Ordering::Acquire))
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

    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        Ok(())
    }

    fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        if ttl > self.max_ttl() {
            return Err(Error::invalid(format!(
                "ttl of {ttl:?} is above this redlock deployment's max_ttl of {:?} (stored on the masters); \
                 hold longer by renewing",
                self.max_ttl()
            )));
        }
        let margin = drift_margin(ttl, self.settings.max_skew);
        if ttl <= margin * 2 {
            return Err(Error::invalid(format!(
                "ttl of {ttl:?} is too short for redlock with max_skew {:?}: the drift margin ({margin:?}) \
                 would take half of it",
                self.settings.max_skew
            )));
        }
        Ok(margin)
    }

    /// One request to one master may take at most this long: a tenth of the ttl, and at most
    /// `instance_timeout`.
    fn per_master(&self, ttl: Duration) -> Duration {
        self.settings
            .instance_timeout
            .min(ttl / 10)
            .max(Duration::from_millis(5))
    }

    /// Records what this round's probes said and returns which masters may vote: not
    /// abstaining, not beyond the skew. Masters that did not answer keep their last state.
    fn judge(&self, probes: &[Option<health::Probe>]) -> Vec<bool> {
        let (max_ttl, skew) = (self.max_ttl(), self.settings.max_skew);
        for (instance, probe) in self.instances.iter().zip(probes) {
            if let Some(probe) = probe {
                let abstaining = abstains(probe.uptime, max_ttl, skew);
                if abstaining && !instance.health().abstaining {
                    flog!(
                        warn,
                        "redlock master {} is up for {:?} only: it abstains until {:?} (max_ttl + 2 x max_skew)",
                        instance.label,
                        probe.uptime,
                        health::abstain_bound(max_ttl, skew)
                    );
                }
                instance.record(probe, abstaining);
            }
        }
        let offsets: Vec<Option<i64>> = self
            .instances
            .iter()
            .map(|i| {
                let h = i.health();
                h.checked
                    .filter(|c| c.elapsed() < OFFSET_FRESH)
                    .and(h.offset_us)
            })
            .collect();
        let beyond = skewed(&offsets, skew);
        // A master listed twice under two names (a DNS alias, `localhost` and `127.0.0.1`)
        // that was down at connect shows it when it first answers: its later listing is left
        // out, so that one server's vote never counts twice.
        let mut run_ids: Vec<Option<String>> = lock_all_run_ids(&self.instances);
        for (slot, probe) in run_ids.iter_mut().zip(probes) {
            if let Some(id) = probe.as_ref().and_then(|p| p.run_id.clone()) {
                *slot = Some(id);
            }
        }
        let same: Vec<Option<usize>> =
            duplicates(&run_ids.iter().map(|r| r.as_deref()).collect::<Vec<_>>());
        self.instances
            .iter()
            .zip(beyond.iter().zip(&same))
            .zip(run_ids)
            .map(|((instance, (&beyond, &same)), run_id)| {
                let mut h = crate::sync::unpoisoned(&instance.health);
                if beyond && !h.excluded {
                    flog!(warn, "redlock master {} has a clock more than {skew:?} from the others': left out of quorums",
                        instance.label
                    );
                }
                if let Some(first) = same
                    && h.duplicate_of.is_none()
                {
                    flog!(
                        error,
                        "redlock master {} is the same server as {} (one run_id): it is left out \
                         of quorums; list each master once",
                        instance.label,
                        self.instances[first].label
                    );
                }
                h.excluded = beyond;
                h.duplicate_of = same;
                *crate::sync::unpoisoned(&instance.run_id) = run_id;
                h.checked.is_some() && !h.abstaining && !beyond && same.is_none()
            })
            .collect()
    }

    /// Whether each master may vote, from what is known without asking.
    fn eligible_now(&self) -> Vec<bool> {
        self.instances.iter().map(|i| i.health().votes()).collect()
    }

    /// Releases `owner`'s key on every master, in parallel, and waits for the answers.
    /// The outcome of removing a lock's keys (release, force release) from the masters' answers:
    /// true when any master removed one; false only when a majority answered and none had it;
    /// a fatal error as it came; otherwise UNAVAILABLE, since the unanswered may hold it.
    fn settle_removal(
        &self,
        answers: &[Option<Result<bool>>],
        name: &LockName,
        what: &str,
    ) -> Result<bool> {
        if ok_count(answers, |_, removed| *removed) > 0 {
            return Ok(true);
        }
        if let Some(e) = fatal_error(answers) {
            return Err(e);
        }
        let answered = ok_count(answers, |_, _| true);
        if answered >= self.quorum {
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

    async fn release_all(&self, name: &LockName, owner: OwnerId) -> Vec<Option<Result<bool>>> {
        let requests = self.release_requests(name, owner);
        fan_out(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
            |_| false,
        )
        .await
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

#[async_trait]
impl Backend for RedlockBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Redlock
    }

    fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    fn legacy_deployment_ids(&self) -> Vec<String> {
        if self.listed_id == self.deployment_id {
            return Vec::new();
        }
        vec![self.listed_id.clone()]
    }

    fn max_clock_skew(&self) -> Duration {
        self.settings.max_skew
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
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

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<Renewal> {
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

    /// Sent to every master. `Ok(true)` when at least one master still had our key;
    /// `Ok(false)` only when a majority answered and none had it (it was removed or taken
    /// over); UNAVAILABLE when fewer than a majority answered and none had it.
    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
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

    /// Asks every master. `held` when one owner's key is on a majority, or when keys exist
    /// and no majority says the lock is free (a master being down may hide the holder's
    /// majority). `token` is that holder's (the one most of its keys carry: phase 2 wrote T),
    /// or else the largest counter seen; `time_left` the shortest among the holder's keys.
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let requests = self
            .instances
            .iter()
            .map(|i| i.inspect(self.settings.instance_timeout, [&k.lock, &k.fence]))
            .collect();
        let answers = fan_out(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
            |_| false,
        )
        .await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let seen: Vec<_> = answers.iter().flatten().flatten().collect();
        if seen.len() < self.quorum {
            return Err(Error::unavailable(format!(
                "no quorum to inspect lock {:?}: {} of {} redlock masters answered: {}",
                name.as_str(),
                seen.len(),
                self.instances.len(),
                error_summary(&answers, &self.labels)
            )));
        }
        let free = seen.iter().filter(|s| s.pttl.is_none()).count();
        // The owner with the most keys.
        let mut best: Option<(&str, usize)> = None;
        for s in &seen {
            if let Some(owner) = s.owner.as_deref() {
                let count = seen
                    .iter()
                    .filter(|o| o.owner.as_deref() == Some(owner))
                    .count();
                if best.is_none_or(|(_, c)| count > c) {
                    best = Some((owner, count));
                }
            }
        }
        let held =
            best.is_some_and(|(_, c)| c >= self.quorum) || (best.is_some() && free < self.quorum);
        let counter = seen.iter().filter_map(|s| s.counter.or(s.token)).max();
        if !held {
            return Ok(LockInfo::free(name, counter));
        }
        let owner = best.map(|(o, _)| o);
        let keys_of: Vec<_> = seen
            .iter()
            .filter(|s| s.owner.as_deref() == owner)
            .collect();
        // Phase 2 wrote T on a majority; a master that granted late still shows its own
        // phase-1 token. The token most of the holder's keys carry is T (ties: the larger).
        let votes = |t: Option<u64>| keys_of.iter().filter(|s| s.token == t).count();
        let top = keys_of.iter().max_by_key(|s| (votes(s.token), s.token));
        Ok(LockInfo {
            name: name.to_string(),
            held: true,
            token: top.and_then(|s| s.token),
            holder: top.and_then(|s| s.holder.clone()),
            time_left: keys_of
                .iter()
                .filter_map(|s| s.pttl)
                .filter(|p| *p >= 0)
                .min()
                .map(|p| Duration::from_millis(p as u64)),
            waiters: Vec::new(),
        })
    }

    /// The names whose keys a majority of masters scanned (each master's keys, in union: a
    /// holder's keys may sit on different majorities), each then inspected with the majority
    /// rule of [`Backend::inspect`], so only locks a majority agrees are held are listed.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let pattern = crate::backend::redis::keys::scan_pattern(&self.settings.prefix, prefix);
        let timeout = self.settings.instance_timeout.max(Duration::from_secs(2));
        let requests = self
            .instances
            .iter()
            .map(|i| i.scan(timeout, &pattern, limit))
            .collect();
        let answers = fan_out(requests, timeout + SLACK, &self.labels, |_| false).await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        let answered = ok_count(&answers, |_, _| true);
        if answered < self.quorum {
            return Err(Error::unavailable(format!(
                "no quorum to list locks: {answered} of {} redlock masters answered: {}",
                self.instances.len(),
                error_summary(&answers, &self.labels)
            )));
        }
        let mut names: Vec<LockName> = answers
            .into_iter()
            .flatten()
            .flatten()
            .flatten()
            .filter_map(|key| {
                crate::backend::redis::keys::name_of_lock_key(&self.settings.prefix, &key)
            })
            .collect();
        names.sort();
        names.dedup();
        let mut locks = Vec::new();
        for name in names.into_iter().take(limit) {
            let info = self.inspect(&name).await?;
            if info.held {
                locks.push(info);
            }
        }
        Ok(locks)
    }

    /// Sent to every master: `Ok(true)` when at least one master had a key for the lock;
    /// `Ok(false)` when a majority answered and none had one; UNAVAILABLE when fewer than a
    /// majority answered and none had one. A master that was down keeps its key until its
    /// ttl, but without a majority of keys nobody can renew.
    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let requests = self
            .instances
            .iter()
            .map(|i| i.force_release(self.settings.instance_timeout, &k.lock, &k.channel))
            .collect();
        let answers = fan_out(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
            |_| false,
        )
        .await;
        self.settle_removal(&answers, name, "force release")
    }

    async fn watch(&self, name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let requests = self
            .instances
            .iter()
            .map(|i| i.watch(self.settings.instance_timeout, &k.channel))
            .collect();
        let answers = fan_out(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
            |_| false,
        )
        .await;
        if let Some(e) = fatal_error(&answers) {
            return Err(e);
        }
        // Masters that could not be reached are left to the fallback poll.
        Ok(Box::new(AnyOf(
            answers.into_iter().flatten().flatten().collect(),
        )))
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
