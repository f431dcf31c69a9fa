//! `NativeLocker` (wrapped by the JS `Locker`), `connect`, and lock info.

use fencelock::{HolderDescription, LockInfo, Locker};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{guard, to_js};
use crate::lease::NativeLease;
use crate::options::{AcquireOptions, ConnectOptions, lock_options, locker_options};
use crate::runtime::{CancelHandle, cancellable, promise};

/// Connects to the backend `url` selects; resolves to a `NativeLocker`.
#[napi]
pub fn connect(env: Env, url: String, options: Option<ConnectOptions>) -> Result<AsyncBlock<NativeLocker>> {
    guard(|| {
        let options = locker_options(options)?;
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
    /// Acquires `name`; `cancel` (driven by an AbortSignal) stops the wait and leaves nothing
    /// behind.
    #[napi]
    pub fn acquire(
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
                let lease = cancellable(cancel, async {
                    locker.acquire(&name, &options).await.map_err(to_js)
                })
                .await?;
                Ok(NativeLease::new(lease))
            })
        })
    }

    /// Tries once: a `NativeLease`, or null when somebody else holds the lock.
    #[napi]
    pub fn try_acquire(
        &self,
        env: Env,
        name: String,
        options: Option<AcquireOptions>,
    ) -> Result<AsyncBlock<Option<NativeLease>>> {
        guard(|| {
            let options = lock_options(options)?;
            let locker = self.locker.clone();
            promise(&env, async move {
                let lease = locker.try_acquire(&name, &options).await.map_err(to_js)?;
                Ok(lease.map(NativeLease::new))
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

/// Who holds a lock, as `inspect` reads it. The token is a decimal string (`index.js` makes it
/// a bigint).
#[napi(object)]
pub struct NativeLockInfo {
    pub name: String,
    pub held: bool,
    pub token: Option<String>,
    pub holder: Option<NativeHolder>,
    pub time_left: Option<f64>,
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
            name: info.name,
            held: info.held,
            token: info.token.map(|t| t.to_string()),
            holder: info.holder.as_deref().map(|h| {
                let h = HolderDescription::parse(h);
                NativeHolder { host: h.host, pid: h.pid, language: h.language, text: h.text }
            }),
            time_left: info.time_left.map(|d| d.as_secs_f64() * 1000.0),
        }
    }
}
