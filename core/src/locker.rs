//! The Locker: a client bound to one backend, and the acquire loop every backend shares.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::runtime::Handle;

use crate::backend::{self, AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch};
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::fence::Deployment;
use crate::holder::HolderDescription;
use crate::ids::OwnerId;
use crate::lease::{Lease, LeaseEvents, LeaseShared, NewLease};
use crate::name::LockName;
use crate::options::{LockOptions, LockerOptions};
use crate::reentry::{Scope, ScopeRegistry};
use crate::sync::unpoisoned;
use crate::url::{BackendKind, LockerUrl};

pub(crate) struct LockerInner {
    url: LockerUrl,
    /// How fences know this Locker's leases' deployment.
    deployment: Arc<Deployment>,
    backend: Arc<dyn Backend>,
    options: LockerOptions,
    runtime: Handle,
    language: String,
    closed: AtomicBool,
    /// The process that connected: after fork() the child has none of its threads.
    pid: u32,
    next_lease_id: AtomicU64,
    leases: Mutex<HashMap<u64, Weak<LeaseShared>>>,
    /// One queue per lock name for this Locker's waiters (see [`Locker::acquire`]).
    turnstiles: Mutex<HashMap<LockName, Weak<tokio::sync::Mutex<()>>>>,
    /// Which execution scopes hold which names (see [`Locker::acquire_in`]).
    scopes: Arc<ScopeRegistry>,
    /// Subscribers to the leases' lifecycle events (see [`Locker::subscribe`]).
    events: Arc<crate::events::EventHub>,
    /// OpenTelemetry instruments, when [`LockerOptions::metrics`] is on.
    metrics: Option<Arc<crate::metrics::LockMetrics>>,
}

impl LockerInner {
    pub(crate) fn forget(&self, lease_id: u64) {
        unpoisoned(&self.leases).remove(&lease_id);
    }
}

/// A client bound to one backend, made from a URL. Cheap to clone; clones share the
/// connections and the held leases.
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// let locker = fencelock::Locker::connect("sqlite:///tmp/locks.db").await?;
/// let lease = locker.acquire("nightly-report", &Default::default()).await?;
/// println!("token {}", lease.token());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    inner: Arc<LockerInner>,
}

impl Locker {
    /// Connects with default options. Must be called inside a tokio runtime: the runtime
    /// that connects also runs renewals.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad URL or a backend not built in; UNAVAILABLE or BACKEND when
    /// the backend cannot be reached or prepared; AUTH when credentials are refused.
    pub async fn connect(url: &str) -> Result<Locker> {
        Locker::connect_with(url, LockerOptions::default()).await
    }

    pub async fn connect_with(url: &str, options: LockerOptions) -> Result<Locker> {
        options.validate()?;
        let parsed = LockerUrl::parse(url)?;
        let runtime = Handle::try_current()
            .map_err(|_| Error::internal("Locker::connect must run inside a tokio runtime"))?;
        let timeout = options.operation_timeout;
        let mut for_backend = parsed.clone();
        let deployment_name = Deployment::take_name(&mut for_backend)?;
        let backend =
            match tokio::time::timeout(timeout, backend::connect(&for_backend, &options)).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "connecting to {parsed} took longer than {timeout:?}"
                    )));
                }
            };
        let language = options.language.clone();
        let metrics = match (&options.metrics_sink, options.metrics) {
            (Some(sink), _) => Some(Arc::new(crate::metrics::LockMetrics::to_sink(
                sink.0.clone(),
                backend.kind(),
            ))),
            (None, true) => Some(Arc::new(crate::metrics::LockMetrics::from_global(
                backend.kind(),
            ))),
            (None, false) => None,
        };
        let deployment = Arc::new(Deployment::of(backend.as_ref(), deployment_name.as_deref()));
        Ok(Locker {
            inner: Arc::new(LockerInner {
                url: parsed,
                deployment,
                backend,
                options,
                runtime,
                language,
                closed: AtomicBool::new(false),
                pid: std::process::id(),
                next_lease_id: AtomicU64::new(1),
                leases: Mutex::new(HashMap::new()),
                turnstiles: Mutex::new(HashMap::new()),
                scopes: Arc::new(ScopeRegistry::default()),
                events: Arc::new(crate::inbox::Hub::new()),
                metrics,
            }),
        })
    }

    /// The URL, with any password redacted.
    pub fn url(&self) -> String {
        self.inner.url.redacted()
    }

    pub fn backend_kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// The runtime this Locker was connected on (it runs renewals); bindings block on it.
    pub fn runtime(&self) -> &Handle {
        &self.inner.runtime
    }

    fn ensure_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        if self.inner.pid != std::process::id() {
            return Err(Error::closed(format!(
                "this locker was connected in process {} before fork(); connect a new one in this process",
                self.inner.pid
            )));
        }
        Ok(())
    }

    /// Acquires `name`, waiting up to `options.wait` (forever when `None`).
    ///
    /// # Errors
    /// TIMEOUT when the wait ends first; INVALID_ARGUMENT for a bad name or option; CLOSED
    /// after [`Locker::close`]; UNAVAILABLE when the backend keeps failing.
    ///
    /// # Cancellation safety
    /// Dropping the future leaves nothing behind: an attempt in flight is released by its
    /// owner id in the background, and so is a waiter's place in a queue (ZooKeeper).
    ///
    /// Each call is its own acquisition: `reentrant` needs an execution scope, so it is
    /// INVALID_ARGUMENT here; use [`Locker::acquire_in`].
    pub async fn acquire(&self, name: &str, options: &LockOptions) -> Result<Lease> {
        let name = LockName::new(name)?;
        options.validate()?;
        if options.reentrant {
            return Err(Error::invalid(
                "reentrant needs an execution scope to count re-entries in: use acquire_in(scope, ...)",
            ));
        }
        self.acquire_name(name, options).await
    }

    /// Acquires `name` on behalf of an execution scope (a thread, task or coroutine that the
    /// binding names; docs/design.md §1.5).
    ///
    /// If `scope` already holds `name` through this Locker: with `options.reentrant` the
    /// nested acquisition returns at once, with the same token, over the same server lease
    /// (the rest of `options` is ignored); without it, DEADLOCK, since waiting for a lock the
    /// scope itself holds would wait forever. Otherwise it acquires as [`Locker::acquire`].
    pub async fn acquire_in(
        &self,
        scope: Scope,
        name: &str,
        options: &LockOptions,
    ) -> Result<Lease> {
        let lock_name = LockName::new(name)?;
        options.validate()?;
        self.ensure_open()?;
        if let Some(reentry) = self.inner.scopes.held(&lock_name, scope) {
            if !options.reentrant {
                return Err(Error::deadlock(format!(
                    "lock {name:?} is already held by this scope (the same thread or task) and was not \
                     acquired as reentrant: acquiring it again would wait forever"
                )));
            }
            // None: released or lost on another thread meanwhile; acquire afresh below.
            if let Some(ticket) = reentry.try_enter() {
                return Ok(Lease {
                    shared: reentry.shared.clone(),
                    ticket: Some(ticket),
                });
            }
        }
        let Lease { shared, .. } = self.acquire_name(lock_name.clone(), options).await?;
        let ticket = self
            .inner
            .scopes
            .enter_first(lock_name, scope, shared.clone());
        Ok(Lease {
            shared,
            ticket: Some(ticket),
        })
    }

    /// [`Locker::try_acquire`] on behalf of an execution scope, as [`Locker::acquire_in`].
    pub async fn try_acquire_in(
        &self,
        scope: Scope,
        name: &str,
        options: &LockOptions,
    ) -> Result<Option<Lease>> {
        let options = options.clone().with_wait(Some(Duration::ZERO));
        match self.acquire_in(scope, name, &options).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn acquire_name(&self, name: LockName, options: &LockOptions) -> Result<Lease> {
        let called_at = BootInstant::now();
        self.ensure_open()?;
        let holder =
            HolderDescription::of_this_process(&self.inner.language, options.holder.as_deref())
                .to_json();
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
            backend: self.inner.backend.clone(),
            name: name.clone(),
            owner: None,
            runtime: self.inner.runtime.clone(),
            timeout: self.background_cleanup_timeout(),
        };
        let result = self
            .acquire_loop(&name, options, &holder, wait_deadline, &mut waiting)
            .await;
        if let Ok(lease) = &result {
            waiting.owner = None;
            if let Some(metrics) = &self.inner.metrics {
                metrics.acquired(lease.shared.attempt_round_trip(), called_at.elapsed());
            }
        } else if let Some(owner) = waiting.owner.take() {
            // Gave up waiting: leave no place in a queue behind (a no-op on TTL backends).
            let timeout = self.inner.options.operation_timeout;
            let _ = tokio::time::timeout(timeout, self.inner.backend.abandon(&name, owner)).await;
        }
        result
    }

    async fn acquire_loop(
        &self,
        name: &LockName,
        options: &LockOptions,
        holder: &str,
        wait_deadline: Option<BootInstant>,
        waiting: &mut WaitingGuard,
    ) -> Result<Lease> {
        let poll = self.inner.options.poll_interval;
        let mut watch: Option<Box<dyn ReleaseWatch>> = None;
        let mut failing_since: Option<BootInstant> = None;
        // One owner id serves every attempt that follows a `Held` answer: such an answer left
        // nothing under it on TTL backends, and a backend whose waiters queue (ZooKeeper) keeps
        // the waiter's place under it. After a failed attempt (outcome unknown; the in-flight
        // guard releases it by owner id) a fresh one is drawn, so no acquisition ever shares
        // an owner id with another.
        let mut owner = OwnerId::random()?;
        loop {
            self.ensure_open()?;
            let mut expires_in = None;
            let mut last_error = None;
            match self.attempt(name, owner, options, holder).await {
                Ok(AttemptOutcome::Acquired(lease)) => return Ok(lease),
                Ok(AttemptOutcome::Held(left)) => {
                    waiting.owner = Some(owner);
                    failing_since = None;
                    expires_in = left;
                }
                Err(e) if e.is_retryable() => {
                    waiting.owner = None;
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
                    if since.elapsed() >= self.inner.options.operation_timeout {
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
                    watch = Some(match self.inner.backend.watch_for(name, owner).await {
                        Ok(watch) => watch,
                        Err(e) if e.code() == crate::ErrorCode::Closed => return Err(e),
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

    fn turnstile(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut turnstiles = unpoisoned(&self.inner.turnstiles);
        if let Some(existing) = turnstiles.get(name).and_then(Weak::upgrade) {
            return existing;
        }
        if turnstiles.len() >= 1024 {
            turnstiles.retain(|_, t| t.strong_count() > 0);
        }
        let fresh = Arc::new(tokio::sync::Mutex::new(()));
        turnstiles.insert(name.clone(), Arc::downgrade(&fresh));
        fresh
    }

    /// How long a background release or abandonment may take: the attempt it follows may still
    /// be running for up to an operation timeout (an SQL release waits for it), then the
    /// release itself takes up to another.
    fn background_cleanup_timeout(&self) -> Duration {
        self.inner.options.operation_timeout.saturating_mul(2) + Duration::from_secs(1)
    }

    fn hook(&self, point: &'static str) {
        if let Some(hook) = &self.inner.options.test_hook {
            (hook.0)(point);
        }
    }

    /// Tries once: `Ok(None)` when somebody else holds the lock.
    pub async fn try_acquire(&self, name: &str, options: &LockOptions) -> Result<Option<Lease>> {
        let options = options.clone().with_wait(Some(Duration::ZERO));
        match self.acquire(name, &options).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerId,
        options: &LockOptions,
        holder: &str,
    ) -> Result<AttemptOutcome> {
        let request = AcquireRequest {
            name,
            owner,
            ttl: options.ttl,
            holder,
        };
        // If this future is dropped, or the answer is lost, after the request went out, the
        // lock may be ours under `owner`: the guard releases it by owner id.
        let mut guard = InFlightAcquire {
            backend: Some(self.inner.backend.clone()),
            name: name.clone(),
            owner,
            runtime: self.inner.runtime.clone(),
            timeout: self.background_cleanup_timeout(),
        };
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        let timeout = self.inner.options.operation_timeout;
        let attempt =
            match tokio::time::timeout(timeout, self.inner.backend.try_acquire(&request)).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "acquire of lock {:?} got no answer within {timeout:?}",
                        name.as_str()
                    )));
                }
            };
        guard.backend = None;
        match attempt {
            Attempt::Held { expires_in } => Ok(AttemptOutcome::Held(expires_in)),
            Attempt::Acquired { token, origin } => {
                let id = self.inner.next_lease_id.fetch_add(1, Ordering::Relaxed);
                let shared = LeaseShared::start(NewLease {
                    id,
                    name: name.clone(),
                    token,
                    owner,
                    backend: self.inner.backend.clone(),
                    runtime: self.inner.runtime.clone(),
                    locker: Arc::downgrade(&self.inner),
                    sent_at,
                    deployment: self.inner.deployment.clone(),
                    origin,
                    counted_from: self
                        .inner
                        .backend
                        .expiry_counted_from(owner)
                        .unwrap_or(sent_at),
                    answered_at: BootInstant::now(),
                    sent_wall,
                    ttl: self.inner.backend.lease_ttl(options.ttl),
                    auto_renew: options.auto_renew,
                    max_hold: options.max_hold,
                    pipelined_release: options.pipelined_release,
                    operation_timeout: timeout,
                    events: self.inner.events.clone(),
                    metrics: self.inner.metrics.clone(),
                });
                unpoisoned(&self.inner.leases).insert(id, Arc::downgrade(&shared));
                self.inner
                    .backend
                    .track(name, owner, LeaseEvents::new(&shared));
                let lease = Lease {
                    shared,
                    ticket: None,
                };
                if self.inner.closed.load(Ordering::Acquire) {
                    // Closed while we were acquiring: give it back.
                    let _ = lease.release().await;
                    return Err(Error::closed("the locker was closed"));
                }
                Ok(AttemptOutcome::Acquired(lease))
            }
        }
    }

    /// Reads who holds `name`, without acquiring it.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let name = LockName::new(name)?;
        self.ensure_open()?;
        let timeout = self.inner.options.operation_timeout;
        tokio::time::timeout(timeout, self.inner.backend.inspect(&name))
            .await
            .map_err(|_| Error::unavailable(format!("inspect got no answer within {timeout:?}")))?
    }

    /// Subscribes to the lifecycle events of every lease this Locker acquires from now on
    /// (acquired, renewed, renewal retried, suspended, resumed, lost, released), in order for
    /// each lease ([`crate::LockEvent`]). The subscription is a queue: drain it from a thread
    /// or task of your own. It ends when the Locker is closed or the subscription dropped.
    pub fn subscribe(&self) -> crate::EventSubscription {
        crate::events::subscribe(&self.inner.events)
    }

    /// The locks held now whose names start with `prefix` (empty: every lock), read without
    /// acquiring, sorted by name; at most [`crate::LIST_LIMIT`], with `truncated` set when
    /// more matched. The prefix is data (escaped for each backend's pattern language).
    ///
    /// Redis scans the key space (every master of a Cluster) with `SCAN MATCH`; Redlock asks
    /// every master and lists a lock when [`Locker::inspect`]'s majority rule says it is held;
    /// ZooKeeper lists the lock folders; SQL reads a range of the primary key.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a prefix longer than 255 bytes or containing NUL; CLOSED after
    /// [`Locker::close`]; UNAVAILABLE when the backend does not answer.
    pub async fn list(&self, prefix: &str) -> Result<crate::LockList> {
        crate::name::validate_prefix(prefix)?;
        self.ensure_open()?;
        let timeout = self.inner.options.operation_timeout;
        let mut locks = tokio::time::timeout(
            timeout,
            self.inner.backend.list(prefix, crate::LIST_LIMIT + 1),
        )
        .await
        .map_err(|_| Error::unavailable(format!("list got no answer within {timeout:?}")))??;
        locks.retain(|l| l.held && l.name.starts_with(prefix));
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks.dedup_by(|a, b| a.name == b.name);
        let truncated = locks.len() > crate::LIST_LIMIT;
        locks.truncate(crate::LIST_LIMIT);
        Ok(crate::LockList { locks, truncated })
    }

    /// Frees `name` whoever holds it: for an operator clearing a lock whose holder is stuck.
    /// DANGEROUS: the holder may still be working; it learns of the loss only at its next
    /// renewal (within a third of its ttl; on ZooKeeper at once, from the watch on its node),
    /// and until then two holders may run. Writes guarded by a [`crate::Fence`] stay safe:
    /// the fencing counter is left alone, so the next holder's token is larger and the old
    /// holder's writes are refused.
    ///
    /// # Errors
    /// NOT_HELD when nobody held the lock (nothing was changed); INVALID_ARGUMENT for a bad
    /// name; CLOSED after [`Locker::close`]; UNAVAILABLE when the backend does not answer.
    pub async fn force_release(&self, name: &str) -> Result<()> {
        let name = LockName::new(name)?;
        self.ensure_open()?;
        let timeout = self.inner.options.operation_timeout;
        let freed = tokio::time::timeout(timeout, self.inner.backend.force_release(&name))
            .await
            .map_err(|_| {
                Error::unavailable(format!("force release got no answer within {timeout:?}"))
            })??;
        if !freed {
            return Err(Error::not_held(format!(
                "lock {:?} is not held by anybody: nothing was released",
                name.as_str()
            )));
        }
        flog!(warn, lock = name, "lock force-released by an operator");
        Ok(())
    }

    /// Releases every lease this Locker still holds and closes its connections. Later calls
    /// fail with CLOSED. Closing twice is harmless.
    pub async fn close(&self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let held: Vec<Arc<LeaseShared>> = unpoisoned(&self.inner.leases)
            .drain()
            .filter_map(|(_, weak)| weak.upgrade())
            .collect();
        for lease in held {
            let _ = lease.release().await;
        }
        self.inner.backend.close().await;
        // Subscribers receive what is queued (the releases above), then the end.
        self.inner.events.close_all();
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// How many leases this Locker tracks (to release them on close); for the tests that bound
    /// it, not part of the API.
    #[doc(hidden)]
    pub fn tracked_leases(&self) -> usize {
        unpoisoned(&self.inner.leases).len()
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Locker({})", self.inner.url.redacted())
    }
}

enum AttemptOutcome {
    Acquired(Lease),
    Held(Option<Duration>),
}

struct InFlightAcquire {
    backend: Option<Arc<dyn Backend>>,
    name: LockName,
    owner: OwnerId,
    runtime: Handle,
    timeout: Duration,
}

/// The owner id under which an acquire is waiting (its last attempt answered `Held`): if the
/// acquire future is dropped, the waiter's place is abandoned in the background.
struct WaitingGuard {
    backend: Arc<dyn Backend>,
    name: LockName,
    owner: Option<OwnerId>,
    runtime: Handle,
    timeout: Duration,
}

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            let (backend, name, timeout) = (self.backend.clone(), self.name.clone(), self.timeout);
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.abandon(&name, owner)).await;
            });
        }
    }
}

impl Drop for InFlightAcquire {
    fn drop(&mut self) {
        if let Some(backend) = self.backend.take() {
            let (name, owner, timeout) = (self.name.clone(), self.owner, self.timeout);
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.release(&name, owner)).await;
            });
        }
    }
}

/// A poll interval jittered uniformly over ±50%, so waiters do not retry in lockstep.
fn jitter(base: Duration) -> Duration {
    let factor: f64 = rand::rng().random_range(0.5..1.5);
    base.mul_f64(factor)
}
