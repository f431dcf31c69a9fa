//! The Locker: a client bound to one backend. The acquire loop every backend shares is in
//! `acquire.rs`; the state its clones share, in `inner.rs`.

mod acquire;
mod inner;
mod lock;
mod many;

pub use lock::Lock;
pub use many::MAX_NAMES_AT_ONCE;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::runtime::Handle;

use crate::backend::{self, LockInfo};
use crate::deployment::Deployment;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lease::reentry::{Scope, ScopeRegistry};
use crate::mode::{LockMode, not_offered};
use crate::name::LockName;
use crate::options::{LockOptions, LockerOptions};
use crate::url::{BackendKind, LockerUrl};
use inner::LockerInner;

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
        let spans = crate::spans::LockSpans::from_options(&options, backend.kind());
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
                pid: crate::runtime::process_id(),
                leases: Arc::default(),
                renewals: Arc::default(),
                turnstiles: Mutex::new(HashMap::new()),
                scopes: Arc::new(ScopeRegistry::default()),
                events: Arc::new(crate::inbox::Hub::new()),
                metrics,
                spans,
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

    /// The mutex `name`: one holder at a time. [`Locker::acquire`] takes it at once.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name.
    pub fn mutex(&self, name: &str) -> Result<Lock> {
        self.lock(name, LockMode::Exclusive)
    }

    /// The semaphore `name` with `permits` permits: at most that many leases at once, each with
    /// its own token. Every participant must use the same number: a different one while the
    /// semaphore is held or waited on is INVALID_ARGUMENT at acquire (it may change once the
    /// semaphore is idle).
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name, permits outside 1 to [`crate::MAX_PERMITS`], or a
    /// backend that does not offer semaphores.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Lock> {
        self.lock(name, LockMode::permit(permits)?)
    }

    /// The read side of the read-write lock `name`: any number of readers at once while no
    /// writer holds it; a reader arriving while a writer waits queues behind the writer.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name or a backend that does not offer read-write locks.
    pub fn read_lock(&self, name: &str) -> Result<Lock> {
        self.lock(name, LockMode::Read)
    }

    /// The write side of the read-write lock `name`: one writer, while no reader holds it. Its
    /// token is larger than every earlier read or write token of the name, so it may guard a
    /// [`crate::Fence`] as a mutex's does.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for a bad name or a backend that does not offer read-write locks.
    pub fn write_lock(&self, name: &str) -> Result<Lock> {
        self.lock(name, LockMode::Write)
    }

    /// `name` in `mode`: the one entry point behind [`Locker::mutex`], [`Locker::semaphore`],
    /// [`Locker::read_lock`] and [`Locker::write_lock`], for callers that hold the mode as a
    /// value (the bindings, the command).
    ///
    /// # Errors
    /// As the four: INVALID_ARGUMENT for a bad name, a permit count outside 1 to
    /// [`crate::MAX_PERMITS`], or a kind the backend does not offer.
    pub fn lock(&self, name: &str, mode: LockMode) -> Result<Lock> {
        if let LockMode::Permit { permits } = mode {
            LockMode::permit(permits)?;
        }
        let name = LockName::new(name)?;
        let backend = &self.inner.backend;
        if !backend.offers(mode.kind()) {
            return Err(not_offered(backend.kind().as_str(), mode));
        }
        Ok(Lock::new(self.clone(), name, mode))
    }

    /// Acquires the mutex `name`, waiting up to `options.wait` (forever when `None`).
    ///
    /// # Errors
    /// TIMEOUT when the wait ends first; INVALID_ARGUMENT for a bad name or option, or a name
    /// in use as a semaphore or read-write lock; CLOSED after [`Locker::close`]; UNAVAILABLE
    /// when the backend keeps failing.
    ///
    /// # Cancellation safety
    /// Dropping the future leaves nothing behind: an attempt in flight is released by its
    /// owner id in the background, and so is a waiter's place in a queue (ZooKeeper).
    ///
    /// Each call is its own acquisition: `reentrant` needs an execution scope, so it is
    /// INVALID_ARGUMENT here; use [`Locker::acquire_in`].
    pub async fn acquire(&self, name: &str, options: &LockOptions) -> Result<Lease> {
        self.mutex(name)?.acquire(options).await
    }

    /// Acquires the mutex `name` on behalf of an execution scope (a thread, task or coroutine
    /// that the binding names; docs/design.md §1.5), as [`Lock::acquire_in`].
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
        self.mutex(name)?.acquire_in(scope, options).await
    }

    /// [`Locker::try_acquire`] on behalf of an execution scope, as [`Locker::acquire_in`].
    pub async fn try_acquire_in(
        &self,
        scope: Scope,
        name: &str,
        options: &LockOptions,
    ) -> Result<Option<Lease>> {
        self.mutex(name)?.try_acquire_in(scope, options).await
    }

    /// Tries once: `Ok(None)` when somebody else holds the lock.
    pub async fn try_acquire(&self, name: &str, options: &LockOptions) -> Result<Option<Lease>> {
        self.mutex(name)?.try_acquire(options).await
    }

    /// Reads who holds `name`, without acquiring it.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let name = LockName::new(name)?;
        self.inner.ensure_open()?;
        let timeout = self.inner.options.operation_timeout;
        tokio::time::timeout(timeout, self.inner.backend.inspect(&name))
            .await
            .map_err(|_| Error::unavailable(format!("inspect got no answer within {timeout:?}")))?
    }

    /// Subscribes to the lifecycle events of every lease this Locker acquires from now on
    /// (acquired, renewed, renewal retried, suspended, resumed, lost, released), in order for
    /// each lease ([`crate::LockEvent`]). The subscription is a queue: drain it from a thread
    /// or task of your own. It ends when the Locker is closed or the subscription dropped.
    pub fn subscribe(&self) -> crate::events::EventSubscription {
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
    pub async fn list(&self, prefix: &str) -> Result<crate::backend::LockList> {
        crate::name::validate_prefix(prefix)?;
        self.inner.ensure_open()?;
        let timeout = self.inner.options.operation_timeout;
        let mut locks = tokio::time::timeout(
            timeout,
            self.inner
                .backend
                .list(prefix, crate::backend::LIST_LIMIT + 1),
        )
        .await
        .map_err(|_| Error::unavailable(format!("list got no answer within {timeout:?}")))??;
        locks.retain(|l| l.held && l.name.starts_with(prefix));
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks.dedup_by(|a, b| a.name == b.name);
        let truncated = locks.len() > crate::backend::LIST_LIMIT;
        locks.truncate(crate::backend::LIST_LIMIT);
        Ok(crate::backend::LockList { locks, truncated })
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
        self.inner.ensure_open()?;
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
        for lease in self.inner.leases.drain() {
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
        self.inner.leases.len()
    }

    /// How many entries this Locker's renewal schedule holds, current or stale (for the tests
    /// of its bound).
    #[doc(hidden)]
    pub fn renewal_entries(&self) -> usize {
        self.inner.renewals.len()
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Locker({})", self.inner.url.redacted())
    }
}
