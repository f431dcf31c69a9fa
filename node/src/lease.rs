//! `NativeLease` (wrapped by the JS `Lease`) and the delivery of its lost signal to JS.

use std::time::UNIX_EPOCH;

use fencelock::{Lease, LossReason};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::error::{Result, from_napi, guard, to_js};
use crate::event_loop::promise_on_loop;
use crate::options::duration_ms;

#[napi]
pub struct NativeLease {
    lease: Lease,
}

impl NativeLease {
    pub(crate) fn new(lease: Lease) -> Self {
        NativeLease { lease }
    }

    pub(crate) fn core(&self) -> &Lease {
        &self.lease
    }
}

/// A loss reason as JS sees it (`lease.signal.reason`'s message and `lostReason`).
pub(crate) fn reason_code(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::TakenOver => "taken_over",
        LossReason::SessionExpired => "session_expired",
    }
}

#[napi]
impl NativeLease {
    #[napi(getter)]
    pub fn name(&self) -> Result<String> {
        guard(|| Ok(self.lease.name().to_string()))
    }

    /// How the lease holds its name, in the core's spelling (`LockMode::as_str`): "exclusive"
    /// (a mutex), "permit" (a semaphore's), "read" or "write".
    #[napi(getter)]
    pub fn mode(&self) -> Result<String> {
        guard(|| Ok(self.lease.mode().as_str().to_string()))
    }

    /// The fencing token as a decimal string (`index.js` makes it a bigint once).
    #[napi(getter)]
    pub fn token(&self) -> Result<String> {
        guard(|| Ok(self.lease.token().to_string()))
    }

    /// The server's expiry as this client estimates it, in ms since the epoch; null where the
    /// backend has no ttl (ZooKeeper).
    #[napi(getter)]
    pub fn expires_at(&self) -> Result<Option<f64>> {
        guard(|| {
            Ok(self
                .lease
                .expires_at()
                .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64() * 1000.0))
        })
    }

    /// The client deadline in ms since the epoch, read now: after it this client counts the
    /// lease lost unless a renewal succeeded first (`Lease::valid_until`). Never null.
    #[napi(getter)]
    pub fn valid_until(&self) -> Result<f64> {
        guard(|| {
            Ok(self
                .lease
                .valid_until()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0))
        })
    }

    #[napi(getter)]
    pub fn is_lost(&self) -> Result<bool> {
        guard(|| Ok(self.lease.is_lost()))
    }

    #[napi(getter)]
    pub fn is_held(&self) -> Result<bool> {
        guard(|| Ok(self.lease.is_held()))
    }

    /// Whether the last renewal failed (renewals are retried until the client deadline).
    #[napi(getter)]
    pub fn renewal_failing(&self) -> Result<bool> {
        guard(|| Ok(self.lease.renewal_failing()))
    }

    /// Whether the lease's connection to its backend is down (ZooKeeper's "suspended") or its
    /// last renewal failed: stop writing until it clears.
    #[napi(getter)]
    pub fn is_suspended(&self) -> Result<bool> {
        guard(|| Ok(self.lease.is_suspended()))
    }

    /// Why the lease was lost (`expired`, `taken_over`, `session_expired`), or null.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Result<Option<String>> {
        guard(|| {
            Ok(self
                .lease
                .lost_signal()
                .reason()
                .map(|r| reason_code(r).to_string()))
        })
    }

    /// Throws LOST, NOT_HELD or CLOSED unless the lease is held.
    #[napi]
    pub fn ensure_held(&self) -> Result<()> {
        guard(|| self.lease.ensure_held().map_err(to_js))
    }

    /// Sets a new ttl (ms) from now, or the current ttl when absent.
    #[napi]
    pub fn extend(&self, env: Env, ttl: Option<f64>) -> Result<PromiseRaw<'static, ()>> {
        guard(|| {
            let ttl = ttl.map(|ms| duration_ms(ms, "ttl")).transpose()?;
            let lease = self.lease.clone();
            promise_on_loop(&env, async move { lease.extend(ttl).await.map_err(to_js) })
        })
    }

    /// Releases the lock; runs to its end on the runtime whether or not anybody awaits it.
    #[napi]
    pub fn release(&self, env: Env) -> Result<PromiseRaw<'static, ()>> {
        guard(|| {
            let lease = self.lease.clone();
            promise_on_loop(&env, async move { lease.release().await.map_err(to_js) })
        })
    }

    /// Calls `callback(reason, message)` on the JS thread once, when the lease is lost (soon
    /// after, if it already is). The callback is held weakly: it does not keep the process
    /// alive. The core fires it from whichever thread notices the loss (a renewal task, or
    /// the deadline watchdog); the threadsafe function queues it onto the JS thread.
    #[napi]
    pub fn on_lost(&self, callback: Function<'_, FnArgs<(String, String)>, ()>) -> Result<()> {
        guard(|| {
            let tsfn = callback
                .build_threadsafe_function::<FnArgs<(String, String)>>()
                .callee_handled::<false>()
                .weak::<true>()
                .build()
                .map_err(from_napi)?;
            let name = self.lease.name().to_string();
            self.lease.lost_signal().on_lost(move |reason| {
                let message = format!("lock {name:?} lost: {reason}");
                tsfn.call(
                    FnArgs::from((reason_code(reason).to_string(), message)),
                    ThreadsafeFunctionCallMode::NonBlocking,
                );
            });
            Ok(())
        })
    }
}
