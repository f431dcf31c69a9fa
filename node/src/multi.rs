//! `NativeMultiLease` (wrapped by the JS `MultiLease`): the leases of several names taken as one
//! by `NativeLocker::acquire_many` (the core's `Locker::acquire_many_in`, docs/design.md §1.9).
//!
//! Each part is an ordinary lease: `parts()` hands them out as `NativeLease`s (clones sharing
//! the core's state), so a part guards a Fence exactly as a single lease does. Everything about
//! the whole (held, lost, deadline, extend, release, the lost signal) is the core's
//! `MultiLease`.

use std::time::{SystemTime, UNIX_EPOCH};

use fencelock::{LostSignal, MultiLease};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::error::{Result, from_napi, guard, to_js};
use crate::lease::{NativeLease, reason_code};
use crate::options::duration_ms;
use crate::runtime::promise;

#[napi]
pub struct NativeMultiLease {
    multi: MultiLease,
}

impl NativeMultiLease {
    pub(crate) fn new(multi: MultiLease) -> Self {
        NativeMultiLease { multi }
    }
}

/// A wall-clock time in ms since the epoch, as JS `Date`s take it.
fn epoch_ms(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

#[napi]
impl NativeMultiLease {
    /// Every part, in the canonical order they were acquired in (by name, byte for byte).
    #[napi]
    pub fn parts(&self) -> Result<Vec<NativeLease>> {
        guard(|| {
            Ok(self
                .multi
                .parts()
                .iter()
                .cloned()
                .map(NativeLease::new)
                .collect())
        })
    }

    /// The earliest part's client deadline in ms since the epoch, read now (never null).
    #[napi(getter)]
    pub fn valid_until(&self) -> Result<f64> {
        guard(|| Ok(epoch_ms(self.multi.valid_until())))
    }

    /// The earliest part's server expiry estimate in ms since the epoch; null without a ttl
    /// (ZooKeeper).
    #[napi(getter)]
    pub fn expires_at(&self) -> Result<Option<f64>> {
        guard(|| Ok(self.multi.expires_at().map(epoch_ms)))
    }

    /// Some part is lost.
    #[napi(getter)]
    pub fn is_lost(&self) -> Result<bool> {
        guard(|| Ok(self.multi.is_lost()))
    }

    /// Every part is held.
    #[napi(getter)]
    pub fn is_held(&self) -> Result<bool> {
        guard(|| Ok(self.multi.is_held()))
    }

    /// Why the first lost part was lost (`expired`, `taken_over`, `session_expired`), or null.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Result<Option<String>> {
        guard(|| {
            Ok(self
                .multi
                .lost_signal()
                .reason()
                .map(|r| reason_code(r).to_string()))
        })
    }

    /// Throws the first part's LOST, NOT_HELD or CLOSED unless every part is held.
    #[napi]
    pub fn ensure_held(&self) -> Result<()> {
        guard(|| self.multi.ensure_held().map_err(to_js))
    }

    /// Sets a new ttl (ms) from now on every part, or the current ttl when absent.
    #[napi]
    pub fn extend(&self, env: Env, ttl: Option<f64>) -> Result<AsyncBlock<()>> {
        guard(|| {
            let ttl = ttl.map(|ms| duration_ms(ms, "ttl")).transpose()?;
            let multi = self.multi.clone();
            promise(&env, async move { multi.extend(ttl).await.map_err(to_js) })
        })
    }

    /// Releases every part; runs to its end on the runtime whether or not anybody awaits it.
    #[napi]
    pub fn release(&self, env: Env) -> Result<AsyncBlock<()>> {
        guard(|| {
            let multi = self.multi.clone();
            promise(&env, async move { multi.release().await.map_err(to_js) })
        })
    }

    /// Calls `callback(reason, message)` on the JS thread once, when any part is lost (soon
    /// after, if one already is), as `NativeLease::on_lost` does; the message names the part.
    #[napi]
    pub fn on_lost(&self, callback: Function<'_, FnArgs<(String, String)>, ()>) -> Result<()> {
        guard(|| {
            let tsfn = callback
                .build_threadsafe_function::<FnArgs<(String, String)>>()
                .callee_handled::<false>()
                .weak::<true>()
                .build()
                .map_err(from_napi)?;
            // The parts' own signals, to name the one that fired: reading whether a signal is
            // set is an atomic load, safe inside the callback.
            let parts: Vec<(String, LostSignal)> = self
                .multi
                .parts()
                .iter()
                .map(|part| (part.name().to_string(), part.lost_signal()))
                .collect();
            let count = parts.len();
            self.multi.lost_signal().on_lost(move |reason| {
                let message = match parts.iter().find(|(_, signal)| signal.is_set()) {
                    Some((name, _)) => {
                        format!("lock {name:?} lost: {reason} ({count} held as one)")
                    }
                    None => format!("a multi-name lock of {count} names lost: {reason}"),
                };
                tsfn.call(
                    FnArgs::from((reason_code(reason).to_string(), message)),
                    ThreadsafeFunctionCallMode::NonBlocking,
                );
            });
            Ok(())
        })
    }
}
