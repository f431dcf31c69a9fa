//! `NativeLocker` (wrapped by the Kotlin `Locker`), `connect`, and lock info.
//!
//! Every acquire names the mode it asks for (a mutex, a semaphore's permit, a read or a write
//! lease; `mode.rs`) and goes through the core's `Lock` for the name in that mode, the one
//! acquire path every mode shares (docs/design.md §1.8).

use std::sync::Arc;
use std::time::Duration;

use fencelock::{HolderDescription, LeaseInfo, Lock, LockInfo, LockList, Locker, Scope, Waiter};

use crate::error::NativeError;
use crate::handoff::{Handed, NativeHandoff};
use crate::lease::NativeLease;
use crate::mode::{NativeLockKind, NativeLockMode, lock_mode, permits_to_jvm};
use crate::options::{NativeConnectOptions, NativeLockOptions, lock_options, locker_options};
use crate::runtime::{OnDrop, Pending, run};

/// Connects to the backend `url` selects; with `metrics`, the Locker's measurements go to it,
/// with `tracing` its spans.
#[uniffi::export]
pub async fn connect(
    url: String,
    options: NativeConnectOptions,
    metrics: Option<Box<dyn crate::metrics::NativeMetricsSink>>,
    tracing: Option<Box<dyn crate::spans::NativeSpanSink>>,
) -> Result<Arc<NativeLocker>, NativeError> {
    let mut options = locker_options(options)?;
    if let Some(sink) = metrics {
        options = options.with_metrics_sink(crate::metrics::jvm_sink(sink)?);
    }
    if let Some(sink) = tracing {
        options = options.with_span_sink(crate::spans::jvm_sink(sink)?);
    }
    // Connected inside the runtime: the core keeps its handle for renewals.
    let locker = run(
        async move { Locker::connect_with(&url, options).await },
        OnDrop::Cancel,
    )
    .await?;
    Ok(Arc::new(NativeLocker { locker }))
}

#[derive(uniffi::Object)]
pub struct NativeLocker {
    locker: Locker,
}

/// A scope id from Kotlin: a thread's or a coroutine's, never reused in the process.
pub(crate) fn scope_of(id: i64) -> Result<Scope, NativeError> {
    u64::try_from(id)
        .map(Scope::new)
        .map_err(|_| crate::error::invalid(format!("scope id must not be negative, got {id}")))
}

impl NativeLocker {
    pub(crate) fn core(&self) -> &Locker {
        &self.locker
    }

    /// The core's handle of `name` in `mode`: INVALID_ARGUMENT for a bad name, permits outside
    /// 1 to 10,000, or a kind the backend does not offer.
    fn lock(&self, name: &str, mode: NativeLockMode) -> Result<Lock, NativeError> {
        Ok(self.locker.lock(name, lock_mode(mode)?)?)
    }
}

#[uniffi::export]
impl NativeLocker {
    /// Checks that `name` may be taken in `mode` here (the Kotlin `semaphore`, `readLock`, …
    /// call it when they make their handle, so a bad count or a kind the backend does not offer
    /// fails there, before any I/O); the acquires check again.
    pub fn check_lock(&self, name: String, mode: NativeLockMode) -> Result<(), NativeError> {
        crate::error::guard(|| self.lock(&name, mode).map(drop))
    }

    /// Acquires `name` in `mode` on behalf of the execution scope `scope` (a thread or
    /// coroutine, named by the Kotlin layer; see the core's `reentry`). Cancelling the caller
    /// leaves nothing behind.
    pub async fn acquire(
        &self,
        name: String,
        mode: NativeLockMode,
        options: NativeLockOptions,
        scope: i64,
        handoff: Arc<NativeHandoff>,
    ) -> Result<(), NativeError> {
        let lock = self.lock(&name, mode)?;
        let options = lock_options(options)?;
        let scope = scope_of(scope)?;
        let lease = run(
            async move { lock.acquire_in(scope, &options).await },
            OnDrop::Cancel,
        )
        .await?;
        handoff.put(Handed::Lease(NativeLease::new(lease)));
        Ok(())
    }

    /// Tries once, in `scope`: puts a lease in `handoff`, or nothing when the lock is not
    /// available in `mode` now.
    pub async fn try_acquire(
        &self,
        name: String,
        mode: NativeLockMode,
        options: NativeLockOptions,
        scope: i64,
        handoff: Arc<NativeHandoff>,
    ) -> Result<(), NativeError> {
        let lock = self.lock(&name, mode)?;
        let options = lock_options(options)?;
        let scope = scope_of(scope)?;
        let lease = run(
            async move { lock.try_acquire_in(scope, &options).await },
            OnDrop::Cancel,
        )
        .await?;
        if let Some(lease) = lease {
            handoff.put(Handed::Lease(NativeLease::new(lease)));
        }
        Ok(())
    }

    /// Who holds `name` now, as the backend says.
    pub async fn inspect(&self, name: String) -> Result<NativeLockInfo, NativeError> {
        let locker = self.locker.clone();
        let info = run(async move { locker.inspect(&name).await }, OnDrop::Cancel).await?;
        Ok(NativeLockInfo::from(info))
    }

    /// The locks held now whose names start with `prefix` (empty: every lock), by name; at
    /// most the core's `LIST_LIMIT`, with `truncated` set when more matched.
    pub async fn list(&self, prefix: String) -> Result<NativeLockList, NativeError> {
        let locker = self.locker.clone();
        let list = run(async move { locker.list(&prefix).await }, OnDrop::Cancel).await?;
        Ok(NativeLockList::from(list))
    }

    /// Frees `name` whoever holds it (an operator's tool; dangerous, see the core). NOT_HELD
    /// when nobody held it. Runs to its end even if the caller stops waiting: a write that
    /// was sent is not left half-known.
    pub async fn force_release(&self, name: String) -> Result<(), NativeError> {
        let locker = self.locker.clone();
        run(
            async move { locker.force_release(&name).await },
            OnDrop::Finish,
        )
        .await
    }

    /// Starts receiving this Locker's lifecycle events (see `observe.rs`); CLOSED after
    /// `shutdown`.
    pub fn subscribe(&self) -> Result<Arc<crate::observe::NativeEventSubscription>, NativeError> {
        crate::error::guard(|| {
            let subscription = self.locker.subscribe();
            // Closing a Locker ends the subscriptions it has, not one made afterwards (which
            // would wait forever). Checked after subscribing: a close in between ends it.
            if self.locker.is_closed() {
                subscription.close();
                return Err(fencelock::Error::closed("the locker was closed").into());
            }
            Ok(crate::observe::NativeEventSubscription::new(subscription))
        })
    }

    /// Releases every lease still held and closes the connections; runs to its end even if
    /// nobody waits for it.
    /// (Not `close`: uniffi objects already have a `close()` that frees the native handle.)
    pub async fn shutdown(&self) -> Result<(), NativeError> {
        let locker = self.locker.clone();
        run(
            async move {
                locker.close().await;
                Ok(())
            },
            OnDrop::Finish,
        )
        .await
    }

    pub fn is_closed(&self) -> bool {
        self.locker.is_closed()
    }

    /// The URL with any password redacted.
    pub fn url(&self) -> String {
        self.locker.url()
    }
}

/// Who holds a lock, as `inspect` reads it.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLockInfo {
    pub name: String,
    pub held: bool,
    /// The last token minted for this lock (the holder's, while held).
    pub token: Option<i64>,
    pub holder: Option<NativeHolder>,
    pub time_left: Option<Duration>,
    /// The waiters queued behind the holders, first in line first: ZooKeeper's queue, and the
    /// registered waiters of a semaphore or read-write lock on TTL backends.
    pub waiters: Vec<NativeWaiter>,
    /// What the name is used as (a mutex for a name nobody uses).
    pub kind: NativeLockKind,
    /// A semaphore's number of permits, as its holders and waiters stored it.
    pub permits: Option<i32>,
    /// Every holder of a semaphore or read-write lock (empty for a mutex: see `holder`).
    pub leases: Vec<NativeLeaseInfo>,
}

/// One holder of a semaphore or read-write lock.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLeaseInfo {
    pub mode: NativeLockMode,
    pub token: Option<i64>,
    pub holder: Option<NativeHolder>,
    /// Time left on the server's clock (TTL backends).
    pub time_left: Option<Duration>,
}

impl From<LeaseInfo> for NativeLeaseInfo {
    fn from(lease: LeaseInfo) -> Self {
        NativeLeaseInfo {
            mode: lease.mode.into(),
            token: lease.token.map(|t| t as i64),
            holder: lease.holder.as_deref().map(NativeHolder::parse),
            time_left: lease.time_left,
        }
    }
}

/// A waiter in a ZooKeeper lock's queue.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeWaiter {
    /// Its queue node's name.
    pub node: String,
    pub holder: Option<NativeHolder>,
}

/// What `list` found.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLockList {
    pub locks: Vec<NativeLockInfo>,
    /// More locks matched than were returned: narrow the prefix to see them.
    pub truncated: bool,
}

impl From<LockList> for NativeLockList {
    fn from(list: LockList) -> Self {
        NativeLockList {
            locks: list.locks.into_iter().map(NativeLockInfo::from).collect(),
            truncated: list.truncated,
        }
    }
}

#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeHolder {
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub language: Option<String>,
    pub text: Option<String>,
}

impl From<LockInfo> for NativeLockInfo {
    fn from(info: LockInfo) -> Self {
        NativeLockInfo {
            name: info.name,
            held: info.held,
            token: info.token.map(|t| t as i64),
            holder: info.holder.as_deref().map(NativeHolder::parse),
            time_left: info.time_left,
            waiters: info.waiters.into_iter().map(NativeWaiter::from).collect(),
            kind: info.kind.into(),
            permits: info.permits.map(permits_to_jvm),
            leases: info.leases.into_iter().map(NativeLeaseInfo::from).collect(),
        }
    }
}

impl NativeHolder {
    fn parse(description: &str) -> Self {
        HolderDescription::parse(description).into()
    }
}

impl From<HolderDescription> for NativeHolder {
    fn from(h: HolderDescription) -> Self {
        NativeHolder {
            host: h.host,
            pid: h.pid,
            language: h.language,
            text: h.text,
        }
    }
}

impl From<Waiter> for NativeWaiter {
    fn from(waiter: Waiter) -> Self {
        NativeWaiter {
            node: waiter.node,
            holder: waiter.holder.as_deref().map(NativeHolder::parse),
        }
    }
}

/// Where a blocking acquire stands after a wait.
#[derive(uniffi::Enum)]
pub enum NativeAcquireOutcome {
    /// Still waiting: wait again (the JVM thread checks for an interrupt in between).
    Pending,
    /// Acquired; the token comes along so the JVM side needs no further call to build its Lease.
    Acquired { lease: Arc<NativeLease>, token: i64 },
    /// A try-acquire found the lock held.
    Busy,
}

/// What [`NativeLocker::start_acquire`] answers: the outcome, when it came within the first
/// wait (an uncontended acquire: one call into Rust), or the acquire to wait on.
#[derive(uniffi::Enum)]
pub enum NativeAcquireStart {
    Acquired { lease: Arc<NativeLease>, token: i64 },
    Busy,
    Waiting { pending: Arc<NativePendingAcquire> },
}

/// An acquire running on the runtime, waited for by a blocking JVM thread in slices, so that
/// `Thread.interrupt()` is seen between them; [`NativePendingAcquire::cancel`] aborts it (the
/// core's acquire is cancel-safe), and so does dropping it.
#[derive(uniffi::Object)]
pub struct NativePendingAcquire {
    /// `Some(None)` is a try-acquire's busy.
    pending: Pending<Option<fencelock::Lease>>,
}

#[uniffi::export]
impl NativePendingAcquire {
    /// Waits up to `slice_millis` for the outcome.
    pub fn wait(&self, slice_millis: u32) -> Result<NativeAcquireOutcome, NativeError> {
        crate::error::guard(|| {
            Ok(match self.pending.wait(slice_millis)? {
                Some(Some(lease)) => NativeAcquireOutcome::Acquired {
                    token: lease.token() as i64,
                    lease: NativeLease::new(lease),
                },
                Some(None) => NativeAcquireOutcome::Busy,
                None => NativeAcquireOutcome::Pending,
            })
        })
    }

    pub fn cancel(&self) {
        self.pending.abort();
    }
}

#[uniffi::export]
impl NativeLocker {
    /// Starts an acquire of `name` in `mode` (or a try-acquire, `try_once`) for a blocking JVM
    /// thread and waits up to `first_wait_millis` for it; the outcome if it came, else the
    /// acquire to wait on.
    pub fn start_acquire(
        &self,
        name: String,
        mode: NativeLockMode,
        options: NativeLockOptions,
        scope: i64,
        try_once: bool,
        first_wait_millis: u32,
    ) -> Result<NativeAcquireStart, NativeError> {
        crate::error::guard(|| {
            let lock = self.lock(&name, mode)?;
            let options = lock_options(options)?;
            let scope = scope_of(scope)?;
            let pending = Pending::spawn(async move {
                if try_once {
                    lock.try_acquire_in(scope, &options).await
                } else {
                    lock.acquire_in(scope, &options).await.map(Some)
                }
            })?;
            // Answered (or failed) within the first wait: the task is over, nothing to abort.
            Ok(match pending.wait(first_wait_millis)? {
                Some(Some(lease)) => NativeAcquireStart::Acquired {
                    token: lease.token() as i64,
                    lease: NativeLease::new(lease),
                },
                Some(None) => NativeAcquireStart::Busy,
                None => NativeAcquireStart::Waiting {
                    pending: Arc::new(NativePendingAcquire { pending }),
                },
            })
        })
    }
}
