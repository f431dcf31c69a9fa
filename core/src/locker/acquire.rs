//! The acquire loop every backend shares: queue behind this Locker's other waiters of the name,
//! attempt, then wait for a release (or poll) until the wait ends; and the guards that clean up
//! after an acquire that is dropped mid-flight.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::runtime::Handle;

use super::inner::LockerInner;
use crate::backend::{AcquireRequest, Attempt, Backend, LeaseEvents, ReleaseWatch};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::holder::HolderDescription;
use crate::ids::OwnerId;
use crate::lease::Lease;
use crate::lease::state::NewLease;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::LockOptions;
use crate::spans::{LeaseFacts, SpanKind};

impl LockerInner {
    pub(super) async fn acquire_lock(
        &self,
        name: LockName,
        mode: LockMode,
        options: &LockOptions,
    ) -> Result<Lease> {
        let Some(spans) = &self.spans else {
            return self.acquire_untraced(name, mode, options).await;
        };
        let started = spans.start();
        let lock = name.clone();
        let result = self.acquire_untraced(name, mode, options).await;
        let facts = LeaseFacts {
            lock: lock.as_str(),
            mode: mode.as_str(),
            token: result.as_ref().ok().map(Lease::token),
            lease: result.as_ref().map_or(0, |lease| lease.shared.id),
        };
        let outcome = result.as_ref().map(|_| "acquired");
        spans.lease_operation(SpanKind::Acquire, started, facts, outcome);
        result
    }

    async fn acquire_untraced(
        &self,
        name: LockName,
        mode: LockMode,
        options: &LockOptions,
    ) -> Result<Lease> {
        let called_at = BootInstant::now();
        self.ensure_open()?;
        let holder =
            HolderDescription::of_this_process(&self.language, options.holder.as_deref()).to_json();
        let wait_deadline = match options.wait {
            None => None,
            Some(wait) => Some(
                BootInstant::now()
                    .checked_add(wait)
                    .ok_or_else(|| Error::invalid("wait is too long"))?,
            ),
        };
        // Waiters of one name in one Locker queue here, first come first served, and only the
        // first of them contends on the backend. A release then wakes one waiter per process
        // instead of every waiting task (64 tasks woken by one release each ran a script: the
        // herd measured in bench/RESULTS.md). A try-once acquire does not queue.
        let turnstile = (options.wait != Some(Duration::ZERO)).then(|| self.turnstile(&name));
        let _turn = match (&turnstile, wait_deadline) {
            (None, _) => None,
            (Some(t), None) => Some(t.lock().await),
            (Some(t), Some(deadline)) => {
                match tokio::time::timeout(BootInstant::now().until(deadline), t.lock()).await {
                    Ok(turn) => Some(turn),
                    Err(_) => {
                        return Err(Error::timeout(format!(
                            "lock {:?} was not acquired within {:?} (other waiters of this locker were ahead)",
                            name.as_str(),
                            options.wait.unwrap_or_default()
                        )));
                    }
                }
            }
        };
        let mut waiting = WaitingGuard {
            backend: self.backend.clone(),
            name: name.clone(),
            mode,
            owner: None,
            runtime: self.runtime.clone(),
            timeout: self.background_cleanup_timeout(),
        };
        let result = self
            .acquire_loop(&name, mode, options, &holder, wait_deadline, &mut waiting)
            .await;
        if let Ok(lease) = &result {
            waiting.owner = None;
            if let Some(metrics) = &self.metrics {
                metrics.acquired(lease.shared.attempt_round_trip(), called_at.elapsed());
            }
        } else if let Some(owner) = waiting.owner.take() {
            // Gave up waiting: leave no place in a queue behind (a no-op on TTL backends).
            let timeout = self.options.operation_timeout;
            let _ = tokio::time::timeout(timeout, self.backend.abandon(&name, mode, owner)).await;
        }
        result
    }

    async fn acquire_loop(
        &self,
        name: &LockName,
        mode: LockMode,
        options: &LockOptions,
        holder: &str,
        wait_deadline: Option<BootInstant>,
        waiting: &mut WaitingGuard,
    ) -> Result<Lease> {
        let poll = self.options.poll_interval;
        let mut watch: Option<Box<dyn ReleaseWatch>> = None;
        let mut failing_since: Option<BootInstant> = None;
        // One owner id serves every attempt that follows a `Held` answer, where the backend
        // keeps it (`keeps_owner_after_held`): a backend whose waiters queue (ZooKeeper) keeps
        // the waiter's place under it, and TTL backends keep a semaphore's or read-write
        // lock's waiter registered under it. After a failed attempt
        // (outcome unknown; the in-flight guard releases it by owner id) a fresh one is drawn,
        // and the old one's place is given up, so no acquisition ever shares an owner id with
        // another.
        let mut owner = OwnerId::random()?;
        loop {
            self.ensure_open()?;
            let mut expires_in = None;
            let mut last_error = None;
            match self.attempt(name, mode, owner, options, holder).await {
                Ok(AttemptOutcome::Acquired(lease)) => return Ok(lease),
                Ok(AttemptOutcome::Held(left)) => {
                    failing_since = None;
                    expires_in = left;
                    if self.backend.keeps_owner_after_held(mode) {
                        waiting.owner = Some(owner);
                    } else {
                        // Released by owner id, so refused from now on (the backend's doc).
                        owner = OwnerId::random()?;
                    }
                }
                Err(e) if e.is_retryable() => {
                    waiting.give_up_place();
                    owner = OwnerId::random()?;
                    // A watch made for the old owner may follow its place in a queue.
                    watch = None;
                    if let Some(after) = e.retry_after() {
                        // The backend knows when it can answer (Redlock masters abstaining
                        // after a restart): wait that long if the caller's wait allows it,
                        // else fail now, with the error that says how long.
                        let remaining =
                            wait_deadline.map_or(Duration::MAX, |d| BootInstant::now().until(d));
                        if after > remaining {
                            return Err(e);
                        }
                        flog!(info, lock = name, "waiting {after:?} for the backend: {e}");
                        failing_since = None;
                        self.hook("backend_not_ready");
                        tokio::time::sleep((after + jitter(poll) / 4).min(remaining)).await;
                        continue;
                    }
                    let since = *failing_since.get_or_insert_with(BootInstant::now);
                    if since.elapsed() >= self.options.operation_timeout {
                        return Err(e);
                    }
                    flog!(debug, lock = name, "acquire attempt failed, retrying: {e}");
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
            let remaining = match wait_deadline {
                None => Duration::MAX,
                Some(deadline) => BootInstant::now().until(deadline),
            };
            if remaining.is_zero() {
                // The backend failing is not "somebody else holds it": say what failed.
                if let Some(e) = last_error {
                    return Err(e);
                }
                return Err(Error::timeout(format!(
                    "lock {:?} was not acquired within {:?}",
                    name.as_str(),
                    options.wait.unwrap_or_default()
                )));
            }
            self.hook("attempt_failed");
            match watch.as_mut() {
                None => {
                    // Subscribe first, then retry at once: a release between the failed
                    // attempt and the subscription is caught by that retry.
                    watch = Some(match self.backend.watch_for(name, mode, owner).await {
                        Ok(watch) => watch,
                        Err(e) if e.code() == crate::error::ErrorCode::Closed => return Err(e),
                        // No release notifications (a connection blip, a user not allowed to
                        // subscribe): waiting goes on, polling, rather than failing an acquire
                        // that may wait forever.
                        Err(e) => {
                            flog!(
                                warn,
                                lock = name,
                                "cannot subscribe to releases; polling instead: {e}"
                            );
                            Box::new(crate::backend::PollOnly)
                        }
                    });
                    self.hook("subscribed");
                }
                Some(watch) => {
                    let mut sleep = jitter(poll).min(remaining);
                    if let Some(left) = expires_in {
                        sleep = sleep.min(left + Duration::from_millis(1));
                    }
                    self.hook("waiting");
                    watch.wait(sleep).await;
                }
            }
        }
    }

    async fn attempt(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        options: &LockOptions,
        holder: &str,
    ) -> Result<AttemptOutcome> {
        let request = AcquireRequest {
            name,
            mode,
            owner,
            ttl: options.ttl,
            holder,
        };
        // If this future is dropped, or the answer is lost, after the request went out, the
        // lock may be ours under `owner`: the guard releases it by owner id.
        let mut guard = InFlightAcquire {
            backend: Some(self.backend.clone()),
            name: name.clone(),
            mode,
            owner,
            runtime: self.runtime.clone(),
            timeout: self.background_cleanup_timeout(),
        };
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        let timeout = self.options.operation_timeout;
        let attempt = match tokio::time::timeout(timeout, self.backend.try_acquire(&request)).await
        {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "acquire of lock {:?} got no answer within {timeout:?}",
                    name.as_str()
                )));
            }
        };
        self.hook("acquire_answered");
        match attempt {
            Attempt::Held { expires_in } => {
                guard.backend = None;
                Ok(AttemptOutcome::Held(expires_in))
            }
            Attempt::Acquired { token, origin } => {
                let ttl = self.backend.lease_ttl(options.ttl);
                let counted_from = self.backend.expiry_counted_from(owner).unwrap_or(sent_at);
                if crate::lease::state::client_deadline(self.backend.as_ref(), counted_from, ttl)
                    .has_passed()
                {
                    // The grant is handled after its lease's client deadline (a stalled
                    // process, a reply stuck in a queue): the server may already have handed
                    // the lock to somebody else. Never a lease that is lost before it is
                    // returned (docs/design.md §1.2): the guard releases the grant by owner id
                    // in the background, and the caller's acquire goes on within its wait.
                    return Err(Error::unavailable(format!(
                        "lock {:?} was granted, but the answer was handled {:?} after the \
                         request, past the lease's client deadline; it is given back",
                        name.as_str(),
                        sent_at.elapsed()
                    )));
                }
                guard.backend = None;
                let id = self.leases.next_id();
                let shared = crate::lease::start(NewLease {
                    id,
                    name: name.clone(),
                    token,
                    owner,
                    mode,
                    backend: self.backend.clone(),
                    runtime: self.runtime.clone(),
                    renewals: self.renewals.clone(),
                    held: Arc::downgrade(&self.leases),
                    sent_at,
                    deployment: self.deployment.clone(),
                    origin,
                    counted_from,
                    answered_at: BootInstant::now(),
                    sent_wall,
                    ttl,
                    auto_renew: options.auto_renew,
                    max_hold: options.max_hold,
                    pipelined_release: options.pipelined_release,
                    operation_timeout: timeout,
                    events: self.events.clone(),
                    metrics: self.metrics.clone(),
                    spans: self.spans.clone(),
                });
                self.leases.insert(&shared);
                self.backend
                    .track(name, mode, owner, LeaseEvents::new(&shared));
                let lease = Lease {
                    shared,
                    ticket: None,
                };
                if self.closed.load(Ordering::Acquire) {
                    // Closed while we were acquiring: give it back.
                    let _ = lease.release().await;
                    return Err(Error::closed("the locker was closed"));
                }
                Ok(AttemptOutcome::Acquired(lease))
            }
        }
    }
}

enum AttemptOutcome {
    Acquired(Lease),
    Held(Option<Duration>),
}

struct InFlightAcquire {
    backend: Option<Arc<dyn Backend>>,
    name: LockName,
    mode: LockMode,
    owner: OwnerId,
    runtime: Handle,
    timeout: Duration,
}

/// The owner id under which an acquire is waiting (its last attempt answered `Held`): if the
/// acquire future is dropped, the waiter's place is abandoned in the background.
struct WaitingGuard {
    backend: Arc<dyn Backend>,
    name: LockName,
    mode: LockMode,
    owner: Option<OwnerId>,
    runtime: Handle,
    timeout: Duration,
}

impl WaitingGuard {
    /// Gives up the place (or registration) held under the current owner id, in the
    /// background, before the acquire goes on under a new one.
    fn give_up_place(&mut self) {
        if let Some(owner) = self.owner.take() {
            let (backend, name, mode) = (self.backend.clone(), self.name.clone(), self.mode);
            let timeout = self.timeout;
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.abandon(&name, mode, owner)).await;
            });
        }
    }
}

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        self.give_up_place();
    }
}

impl Drop for InFlightAcquire {
    fn drop(&mut self) {
        if let Some(backend) = self.backend.take() {
            let (name, mode, owner) = (self.name.clone(), self.mode, self.owner);
            let timeout = self.timeout;
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.release(&name, mode, owner)).await;
            });
        }
    }
}

/// A poll interval jittered uniformly over ±50%, so waiters do not retry in lockstep.
fn jitter(base: Duration) -> Duration {
    let factor: f64 = rand::rng().random_range(0.5..1.5);
    base.mul_f64(factor)
}
