//! `NativeLocker` (wrapped by the JS `Locker`), `connect`, and lock info.

use fencelock::{HolderDescription, LeaseInfo, LockInfo, Locker, Scope};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{Result, guard, to_js};
use crate::event_loop::promise_on_loop;
use crate::lease::NativeLease;
use crate::multi::NativeMultiLease;
use crate::options::{
    AcquireOptions, ConnectOptions, NativeLockMode, lock_mode, lock_options, locker_options,
};
use crate::runtime::{CancelHandle, cancellable, promise};

/// Connects to the backend `url` selects; resolves to a `NativeLocker`. With `metrics`, each
/// measurement of the Locker's locks is passed to it on the JS thread (see `metrics.rs`); with
/// `tracing`, each span (see `spans.rs`).
#[napi]
pub fn connect(
    env: Env,
    url: String,
    options: Option<ConnectOptions>,
    metrics: Option<Function<'_, crate::metrics::NativeMeasurement, ()>>,
    tracing: Option<Function<'_, crate::spans::NativeSpan, ()>>,
) -> Result<AsyncBlock<NativeLocker>> {
    guard(|| {
        crate::runtime::runtime_setting().map_err(to_js)?;
        let mut options = locker_options(options)?;
        if let Some(callback) = metrics {
            options = options.with_metrics_sink(crate::metrics::js_sink(callback)?);
        }
        if let Some(callback) = tracing {
            options = options.with_span_sink(crate::spans::js_sink(callback)?);
        }
        // Connected inside the runtime: the core keeps its handle for renewals.
        promise(&env, async move {
            let locker = Locker::connect_with(&url, options).await.map_err(to_js)?;
            Ok(NativeLocker { locker })
        })
    })
}

#[napi]
pub struct NativeLocker {
    locker: Locker,
}

#[napi]
impl NativeLocker {
    /// Acquires `name` in `mode` (the mutex, a semaphore's permit, the read or the write lock:
    /// one path for every mode, the core's `Lock`) on behalf of the execution scope `scope` (an
    /// id `index.js` keeps in AsyncLocalStorage; see the core's `reentry`); `cancel` (driven by
    /// an AbortSignal) stops the wait and leaves nothing behind.
    #[napi]
    pub fn acquire(
        &self,
        env: Env,
        name: String,
        mode: NativeLockMode,
        options: Option<AcquireOptions>,
        scope: f64,
        cancel: Option<&CancelHandle>,
    ) -> Result<PromiseRaw<'static, NativeLease>> {
        guard(|| {
            let mode = lock_mode(&mode)?;
            let options = lock_options(options)?;
            let scope = scope_of(scope)?;
            let locker = self.locker.clone();
            let cancel = cancel.cloned();
            promise_on_loop(&env, async move {
                let lease = cancellable(cancel, async {
                    let lock = locker.lock(&name, mode).map_err(to_js)?;
                    lock.acquire_in(scope, &options).await.map_err(to_js)
                })
                .await?;
                Ok(NativeLease::new(lease))
            })
        })
    }

    /// Acquires the mutexes of every name in `names` as one `NativeMultiLease`, all or none, in
    /// the core's canonical order (`Locker::acquire_many_in`), on behalf of `scope` and with
    /// `cancel` as for `acquire`: a cancelled wait releases the parts already taken.
    #[napi]
    pub fn acquire_many(
        &self,
        env: Env,
        names: Vec<String>,
        options: Option<AcquireOptions>,
        scope: f64,
        cancel: Option<&CancelHandle>,
    ) -> Result<AsyncBlock<NativeMultiLease>> {
        guard(|| {
            let options = lock_options(options)?;
            let scope = scope_of(scope)?;
            let locker = self.locker.clone();
            let cancel = cancel.cloned();
            promise(&env, async move {
                let multi = cancellable(cancel, async {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    locker
                        .acquire_many_in(scope, &names, &options)
                        .await
                        .map_err(to_js)
                })
                .await?;
                Ok(NativeMultiLease::new(multi))
            })
        })
    }

    /// Tries once, in `scope`: a `NativeLease`, or null when somebody else holds the lock.
    #[napi]
    pub fn try_acquire(
        &self,
        env: Env,
        name: String,
        options: Option<AcquireOptions>,
        scope: f64,
    ) -> Result<PromiseRaw<'static, Option<NativeLease>>> {
        guard(|| {
            let options = lock_options(options)?;
            let scope = scope_of(scope)?;
            let locker = self.locker.clone();
            promise_on_loop(&env, async move {
                let lease = locker
                    .try_acquire_in(scope, &name, &options)
                    .await
                    .map_err(to_js)?;
                Ok(lease.map(NativeLease::new))
            })
        })
    }

    /// Campaigns for leadership of `name` (the core's `campaign`); `cancel` as for `acquire`.
    #[napi]
    pub fn campaign(
        &self,
        env: Env,
        name: String,
        options: Option<AcquireOptions>,
        cancel: Option<&CancelHandle>,
    ) -> Result<AsyncBlock<NativeLease>> {
        guard(|| {
            let options = lock_options(options)?;
            let locker = self.locker.clone();
            let cancel = cancel.cloned();
            promise(&env, async move {
                let leadership = cancellable(cancel, async {
                    locker.campaign(&name, &options).await.map_err(to_js)
                })
                .await?;
                // index.js wraps the lease as a Leadership (term = token, resign = release).
                Ok(NativeLease::new(leadership.lease().clone()))
            })
        })
    }

    /// Who leads `name` now (the core's `leader`), or null.
    #[napi]
    pub fn leader(&self, env: Env, name: String) -> Result<AsyncBlock<Option<NativeLeader>>> {
        guard(|| {
            let locker = self.locker.clone();
            promise(&env, async move {
                let leader = locker.leader(&name).await.map_err(to_js)?;
                Ok(leader.map(|l| NativeLeader {
                    term: l.term.to_string(),
                    holder: l.holder.map(native_holder),
                }))
            })
        })
    }

    #[napi]
    pub fn inspect(&self, env: Env, name: String) -> Result<AsyncBlock<NativeLockInfo>> {
        guard(|| {
            let locker = self.locker.clone();
            promise(&env, async move {
                let info = locker.inspect(&name).await.map_err(to_js)?;
                Ok(NativeLockInfo::from(info))
            })
        })
    }

    /// The locks held now whose names start with `prefix`, by name (at most 1000; `truncated`
    /// says more matched).
    #[napi]
    pub fn list(&self, env: Env, prefix: String) -> Result<AsyncBlock<NativeLockList>> {
        guard(|| {
            let locker = self.locker.clone();
            promise(&env, async move {
                let listed = locker.list(&prefix).await.map_err(to_js)?;
                Ok(NativeLockList {
                    locks: listed.locks.into_iter().map(NativeLockInfo::from).collect(),
                    truncated: listed.truncated,
                })
            })
        })
    }

    /// Frees `name` whoever holds it (an operator's release); NOT_HELD when nobody did.
    #[napi]
    pub fn force_release(&self, env: Env, name: String) -> Result<AsyncBlock<()>> {
        guard(|| {
            let locker = self.locker.clone();
            promise(&env, async move {
                locker.force_release(&name).await.map_err(to_js)
            })
        })
    }

    /// Delivers the lifecycle events of this Locker's leases to `callback` on the JS thread,
    /// in order for each lease, until the subscription or the Locker is closed.
    #[napi]
    pub fn subscribe_events(
        &self,
        callback: Function<'_, crate::observe::NativeLockEvent, ()>,
    ) -> Result<crate::observe::NativeEventSubscription> {
        guard(|| crate::observe::deliver_events(self.locker.subscribe(), callback))
    }

    /// Releases every lease still held and closes the connections; the close runs to its end
    /// on the runtime even if nobody awaits it.
    #[napi]
    pub fn close(&self, env: Env) -> Result<AsyncBlock<()>> {
        guard(|| {
            let locker = self.locker.clone();
            promise(&env, async move {
                locker.close().await;
                Ok(())
            })
        })
    }

    #[napi(getter)]
    pub fn closed(&self) -> Result<bool> {
        guard(|| Ok(self.locker.is_closed()))
    }

    /// The URL with any password redacted.
    #[napi(getter)]
    pub fn url(&self) -> Result<String> {
        guard(|| Ok(self.locker.url()))
    }
}

/// Who holds a lock, as `inspect` reads it. Tokens are decimal strings (`index.js` makes them
/// bigints); `kind` is the core's spelling (`LockKind::as_str`).
#[napi(object)]
pub struct NativeLockInfo {
    pub name: String,
    pub held: bool,
    pub token: Option<String>,
    pub holder: Option<NativeHolder>,
    pub time_left: Option<f64>,
    pub waiters: Vec<NativeWaiter>,
    pub kind: String,
    pub permits: Option<u32>,
    pub leases: Vec<NativeLeaseInfo>,
}

/// One holder of a semaphore or read-write lock: its mode (`LockMode::as_str`), token, holder
/// and time left (ms, TTL backends).
#[napi(object)]
pub struct NativeLeaseInfo {
    pub mode: String,
    pub token: Option<String>,
    pub holder: Option<NativeHolder>,
    pub time_left: Option<f64>,
}

impl From<LeaseInfo> for NativeLeaseInfo {
    fn from(lease: LeaseInfo) -> Self {
        NativeLeaseInfo {
            mode: lease.mode.as_str().to_string(),
            holder: lease.holder_description().map(native_holder),
            token: lease.token.map(|t| t.to_string()),
            time_left: lease.time_left.map(|d| d.as_secs_f64() * 1000.0),
        }
    }
}

/// A waiter queued behind the holder (ZooKeeper).
#[napi(object)]
pub struct NativeWaiter {
    pub node: String,
    pub holder: Option<NativeHolder>,
}

#[napi(object)]
pub struct NativeLockList {
    pub locks: Vec<NativeLockInfo>,
    pub truncated: bool,
}

#[napi(object)]
pub struct NativeHolder {
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub language: Option<String>,
    pub text: Option<String>,
}

impl From<LockInfo> for NativeLockInfo {
    fn from(info: LockInfo) -> Self {
        NativeLockInfo {
            holder: info.holder_description().map(native_holder),
            name: info.name,
            held: info.held,
            token: info.token.map(|t| t.to_string()),
            time_left: info.time_left.map(|d| d.as_secs_f64() * 1000.0),
            kind: info.kind.as_str().to_string(),
            permits: info.permits,
            leases: info.leases.into_iter().map(NativeLeaseInfo::from).collect(),
            waiters: info
                .waiters
                .into_iter()
                .map(|w| NativeWaiter {
                    node: w.node,
                    holder: w
                        .holder
                        .as_deref()
                        .map(|h| native_holder(HolderDescription::parse(h))),
                })
                .collect(),
        }
    }
}

fn native_holder(h: HolderDescription) -> NativeHolder {
    NativeHolder {
        host: h.host,
        pid: h.pid,
        language: h.language,
        text: h.text,
    }
}

/// The largest integer a JS number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A scope id from `index.js`: a safe non-negative integer, never reused in the process.
fn scope_of(id: f64) -> Result<Scope> {
    if !((0.0..=MAX_SAFE).contains(&id) && id.fract() == 0.0) {
        return Err(crate::error::invalid(format!(
            "scope id must be a safe integer, got {id}"
        )));
    }
    Ok(Scope::new(id as u64))
}

/// Who leads an election now: the term as a decimal string, and the holder.
#[napi(object)]
pub struct NativeLeader {
    pub term: String,
    pub holder: Option<NativeHolder>,
}
