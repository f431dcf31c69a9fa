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
//!    token `T`. Phase 2 is skipped when voting masters forming a majority minted the same
//!    token in phase 1: each request proposes one ([`RedlockBackend::proposal`]), which a
//!    master adopts when it is at least its own token and at most its clock + `max_skew`
//!    (docs/redlock.md, "Two rounds when the quorum agrees", has why that keeps the order below;
//!    the model checks it).
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
//! core/tests/it/redlock.rs steers two majorities on the real masters into exactly this case.
//!
//! # Mutual exclusion
//!
//! As published: a lease is valid until its client deadline (sent + ttl − drift, the drift
//! including `max_skew`); while it is valid a majority of masters hold its key (granted or
//! renewed by a majority, expiring no earlier on the masters' clocks), so no other majority can
//! be granted. A restarted master that forgot a key abstains until that key would have expired.
//!
//! # Where the code is
//!
//! [`connect`] reaches the masters; [`acquire`] runs phases 1 and 2; [`renew_release`] renews
//! and releases (the owner's release and an operator's); [`inspect`] inspects and lists. This
//! file keeps what they share: the backend, its ttl checks, and `judge`, which decides from the
//! masters' probes which of them vote.

mod acquire;
mod connect;
mod fanout;
pub(crate) mod health;
mod inspect;
mod instance;
#[cfg(test)]
mod model;
mod renew_release;
pub(crate) mod scripts;
pub(crate) mod settings;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use self::fanout::{fan_out, fatal_error};
use self::health::{abstains, duplicates, skewed};
use self::instance::{Health, Instance};
use self::settings::RedlockSettings;
use self::watch::AnyOf;
use super::redis::keys::keys;
use super::{AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, Renewal};
use crate::clock::drift_margin;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;
use crate::url::BackendKind;

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
    /// One request per master, all at once, waiting for every answer or the per-master timeout:
    /// for the operations that want every master's answer rather than a majority's.
    async fn ask_every_master<'a, T, F>(&self, requests: Vec<F>) -> Vec<Option<Result<T>>>
    where
        T: Send + 'a,
        F: Future<Output = Result<T>> + Send + 'a,
    {
        fan_out(
            requests,
            self.settings.instance_timeout + SLACK,
            &self.labels,
        )
        .await
    }

    fn max_ttl(&self) -> Duration {
        Duration::from_millis(self.max_ttl_ms.load(Ordering::Acquire))
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
                        "redlock master {} {}",
                        instance.label,
                        health::abstain_reason(probe.uptime, max_ttl, skew)
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

    /// The token this Locker proposes to the masters (docs/redlock.md, "Two rounds when the
    /// quorum agrees"): its estimate of the fastest voting master's clock when the request
    /// arrives there, from the last probes less than [`OFFSET_FRESH`] old, plus a lead of the
    /// slowest round trip and 1 ms, at most half the skew. `None` before any probe: then no
    /// quorum can agree, and phase 2 runs.
    fn proposal(&self) -> Option<u64> {
        let fresh: Vec<Health> = self
            .instances
            .iter()
            .map(|i| i.health())
            .filter(|h| h.votes() && h.checked.is_some_and(|c| c.elapsed() < OFFSET_FRESH))
            .collect();
        let fastest = fresh.iter().filter_map(|h| h.offset_us).max()?;
        let rtt = fresh.iter().filter_map(|h| h.rtt_us).max().unwrap_or(0);
        let half_skew = (self.settings.max_skew.as_micros() / 2) as i64;
        let lead = (rtt + 1_000).min(half_skew);
        u64::try_from(instance::wall_us() + fastest + lead).ok()
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

    /// Mutexes and read-write locks; not semaphores ([`crate::mode::not_offered`] says why).
    fn offers(&self, kind: LockKind) -> bool {
        kind != LockKind::Semaphore
    }

    /// A mutex's lost round gives its grants back by owner id ([`Self::give_back`]); the
    /// shared kinds step back to a waiter's registration, kept under the same owner id.
    fn keeps_owner_after_held(&self, mode: LockMode) -> bool {
        mode.kind() != LockKind::Mutex
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.acquire_lock(req).await
    }

    async fn renew(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        self.renew_lock(name, mode, owner, ttl).await
    }

    async fn release(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<bool> {
        self.release_lock(name, mode, owner).await
    }

    async fn abandon(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<()> {
        self.ensure_open()?;
        self.abandon_wait(name, mode, owner).await;
        Ok(())
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.inspect_lock(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.list_locks(prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.force_release_lock(name).await
    }

    async fn watch(&self, name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let requests = self
            .instances
            .iter()
            .map(|i| i.watch(self.settings.instance_timeout, &k.channel))
            .collect();
        let answers = self.ask_every_master(requests).await;
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
