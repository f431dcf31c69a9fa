//! The multi-name lock (docs/design.md §1.9) for the Kotlin `MultiLease`: the core's
//! `acquire_many_in` on behalf of the caller's execution scope, and its `MultiLease`. Each part
//! goes to the JVM as an ordinary `NativeLease`, so a Fence takes `part(name)` exactly like a
//! single lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::MultiLease;

use crate::error::{NativeError, guard};
use crate::handoff::{Handed, NativeHandoff};
use crate::lease::{NativeLease, NativeLossReason, NativeLostListener};
use crate::locker::{NativeLocker, scope_of};
use crate::options::{NativeLockOptions, lock_options};
use crate::runtime::{OnDrop, Pending, run};

#[uniffi::export]
impl NativeLocker {
    /// Acquires the mutexes of every name in `names` as one lease, all or none, in the canonical
    /// order, on behalf of the execution scope `scope` (a thread or coroutine, named by the
    /// Kotlin layer): the core's `acquire_many_in`. Cancelling the caller leaves nothing behind
    /// (the parts taken so far are released in the background).
    pub async fn acquire_many(
        &self,
        names: Vec<String>,
        options: NativeLockOptions,
        scope: i64,
        handoff: Arc<NativeHandoff>,
    ) -> Result<(), NativeError> {
        let options = lock_options(options)?;
        let scope = scope_of(scope)?;
        let locker = self.core().clone();
        let multi = run(
            async move {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                locker.acquire_many_in(scope, &names, &options).await
            },
            OnDrop::Cancel,
        )
        .await?;
        handoff.put(Handed::Many(Arc::new(NativeMultiLease { multi })));
        Ok(())
    }

    /// Starts [`NativeLocker::acquire_many`] for a blocking JVM thread (whose scope is `scope`)
    /// and waits up to `first_wait_millis` for it, as `start_acquire` does for one name: the
    /// lease if it came, else the acquire to wait on.
    pub fn start_acquire_many(
        &self,
        names: Vec<String>,
        options: NativeLockOptions,
        scope: i64,
        first_wait_millis: u32,
    ) -> Result<NativeAcquireManyStart, NativeError> {
        guard(|| {
            let options = lock_options(options)?;
            let scope = scope_of(scope)?;
            let locker = self.core().clone();
            let pending = Pending::spawn(async move {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                locker.acquire_many_in(scope, &names, &options).await
            })?;
            // Answered (or failed) within the first wait: the task is over, nothing to abort.
            Ok(match pending.wait(first_wait_millis)? {
                Some(multi) => NativeAcquireManyStart::Acquired {
                    multi: Arc::new(NativeMultiLease { multi }),
                },
                None => NativeAcquireManyStart::Waiting {
                    pending: Arc::new(NativePendingAcquireMany { pending }),
                },
            })
        })
    }
}

/// What [`NativeLocker::start_acquire_many`] answers.
#[derive(uniffi::Enum)]
pub enum NativeAcquireManyStart {
    Acquired {
        multi: Arc<NativeMultiLease>,
    },
    Waiting {
        pending: Arc<NativePendingAcquireMany>,
    },
}

/// A multi-name acquire running on the runtime, waited for by a blocking JVM thread in slices,
/// so that `Thread.interrupt()` is seen between them; [`NativePendingAcquireMany::cancel`]
/// aborts it (the core then releases the parts taken so far in the background), and so does
/// dropping it.
#[derive(uniffi::Object)]
pub struct NativePendingAcquireMany {
    pending: Pending<MultiLease>,
}

#[uniffi::export]
impl NativePendingAcquireMany {
    /// The lease, if the acquire ends within `slice_millis`; none while it still waits.
    pub fn wait(&self, slice_millis: u32) -> Result<Option<Arc<NativeMultiLease>>, NativeError> {
        guard(|| {
            let multi = self.pending.wait(slice_millis)?;
            Ok(multi.map(|multi| Arc::new(NativeMultiLease { multi })))
        })
    }

    pub fn cancel(&self) {
        self.pending.abort();
    }
}

/// One part of a multi-name lease: its name's lease, with the name and token, so the JVM side
/// builds its `Lease` without further calls.
#[derive(uniffi::Record)]
pub struct NativeMultiPart {
    pub name: String,
    /// The part's fencing token; below 2^63, so it fits a `Long`.
    pub token: i64,
    pub lease: Arc<NativeLease>,
}

#[derive(uniffi::Object)]
pub struct NativeMultiLease {
    multi: MultiLease,
}

#[uniffi::export]
impl NativeMultiLease {
    /// Every part, in the canonical order they were acquired in. Each part's lease shares its
    /// state with the whole's.
    pub fn parts(&self) -> Vec<NativeMultiPart> {
        self.multi
            .parts()
            .iter()
            .map(|part| NativeMultiPart {
                name: part.name().to_string(),
                token: part.token() as i64,
                lease: NativeLease::new(part.clone()),
            })
            .collect()
    }

    /// Every part is held (none released, none lost).
    pub fn is_held(&self) -> bool {
        self.multi.is_held()
    }

    /// Some part is lost.
    pub fn is_lost(&self) -> bool {
        self.multi.is_lost()
    }

    /// Why the first part lost was lost, or none while none is.
    pub fn lost_reason(&self) -> Option<NativeLossReason> {
        self.multi.lost_signal().reason().map(Into::into)
    }

    /// LOST, NOT_HELD or CLOSED (the first part's, in the canonical order) unless every part is
    /// held.
    pub fn ensure_held(&self) -> Result<(), NativeError> {
        guard(|| Ok(self.multi.ensure_held()?))
    }

    /// The earliest part's client deadline on the wall clock (an `Instant` in Kotlin).
    pub fn valid_until(&self) -> SystemTime {
        self.multi.valid_until()
    }

    /// The earliest part's server expiry as this client estimates it, in ms since the epoch;
    /// none where the backend has no ttl (ZooKeeper).
    pub fn expires_at_millis(&self) -> Option<i64> {
        self.multi
            .expires_at()
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
    }

    /// Sets a new ttl from now on every part, or the current ttl when absent.
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<(), NativeError> {
        let multi = self.multi.clone();
        run(async move { multi.extend(ttl).await }, OnDrop::Finish).await
    }

    /// Releases every part; runs to its end on the runtime whether or not anybody waits for it.
    pub async fn release(&self) -> Result<(), NativeError> {
        let multi = self.multi.clone();
        run(async move { multi.release().await }, OnDrop::Finish).await
    }

    /// [`NativeMultiLease::release`] for a blocking JVM thread: one wake-up instead of several.
    pub fn release_blocking(&self) -> Result<(), NativeError> {
        let multi = self.multi.clone();
        crate::runtime::block(async move { multi.release().await })
    }

    /// Calls `listener` once when the first part is lost (at once if one already is), with a
    /// message naming that part. The parts' lost signals are the ones the whole's follows.
    pub fn on_lost(&self, listener: Box<dyn NativeLostListener>) -> Result<(), NativeError> {
        guard(|| {
            let listener: Arc<dyn NativeLostListener> = Arc::from(listener);
            let told = Arc::new(AtomicBool::new(false));
            for part in self.multi.parts() {
                let (listener, told) = (listener.clone(), told.clone());
                let name = part.name().to_string();
                part.lost_signal().on_lost(move |reason| {
                    if !told.swap(true, Ordering::AcqRel) {
                        listener.on_lost(reason.into(), format!("lock {name:?} lost: {reason}"));
                    }
                });
            }
            Ok(())
        })
    }

    /// Completes when some part is lost; cancelling the caller stops only the wait.
    pub async fn wait_lost(&self) -> Result<NativeLossReason, NativeError> {
        let signal = self.multi.lost_signal();
        run(
            async move { Ok(signal.wait().await.into()) },
            OnDrop::Cancel,
        )
        .await
    }

    /// Blocks the calling thread until some part is lost or `timeout` passes (forever when
    /// absent); whether one is lost.
    pub fn wait_lost_blocking(&self, timeout: Option<Duration>) -> bool {
        self.multi.lost_signal().wait_blocking(timeout)
    }
}
