//! `NativeLease` (wrapped by the Kotlin `Lease`) and the delivery of its lost signal.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{Lease, LossReason};

use crate::error::{NativeError, guard};
use crate::mode::NativeLockMode;
use crate::runtime::{OnDrop, run};

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeLossReason {
    /// The client deadline passed without a confirmed renewal.
    Expired,
    /// A renewal or release found the lock was not ours any more.
    TakenOver,
    /// The backend session ended (ZooKeeper).
    SessionExpired,
}

impl From<LossReason> for NativeLossReason {
    fn from(reason: LossReason) -> Self {
        match reason {
            LossReason::Expired => NativeLossReason::Expired,
            LossReason::TakenOver => NativeLossReason::TakenOver,
            LossReason::SessionExpired => NativeLossReason::SessionExpired,
        }
    }
}

/// Told once when a lease is lost. Called on the thread that noticed the loss (a runtime thread
/// or the deadline watchdog): the Kotlin side hands the user's listener to an executor at once.
#[uniffi::export(callback_interface)]
pub trait NativeLostListener: Send + Sync {
    fn on_lost(&self, reason: NativeLossReason, message: String);
}

#[derive(uniffi::Object)]
pub struct NativeLease {
    lease: Lease,
}

impl NativeLease {
    pub(crate) fn new(lease: Lease) -> Arc<Self> {
        Arc::new(NativeLease { lease })
    }

    pub(crate) fn core(&self) -> &Lease {
        &self.lease
    }
}

#[uniffi::export]
impl NativeLease {
    pub fn name(&self) -> String {
        self.lease.name().to_string()
    }

    /// The fencing token; below 2^63, so it fits a `Long`.
    pub fn token(&self) -> i64 {
        self.lease.token() as i64
    }

    /// How the lease holds its name (a nested read in a scope that holds the write lease is a
    /// share of that write lease: `Write`).
    pub fn mode(&self) -> NativeLockMode {
        self.lease.mode().into()
    }

    /// The server's expiry as this client estimates it, in ms since the epoch; none where the
    /// backend has no ttl (ZooKeeper).
    pub fn expires_at_millis(&self) -> Option<i64> {
        self.lease
            .expires_at()
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
    }

    /// The client deadline on the wall clock, read now (an `Instant` in Kotlin): after it this
    /// client counts the lease lost unless a renewal succeeded first. It moves forward with
    /// renewals and stays put once the lease is lost or released; on TTL backends it comes
    /// before [`NativeLease::expires_at_millis`].
    pub fn valid_until(&self) -> SystemTime {
        self.lease.valid_until()
    }

    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Held, but in doubt: the connection is down or the last renewal failed.
    pub fn is_suspended(&self) -> bool {
        self.lease.is_suspended()
    }

    pub fn lost_reason(&self) -> Option<NativeLossReason> {
        self.lease.lost_signal().reason().map(Into::into)
    }

    /// LOST, NOT_HELD or CLOSED unless the lease is held.
    pub fn ensure_held(&self) -> Result<(), NativeError> {
        guard(|| Ok(self.lease.ensure_held()?))
    }

    /// Sets a new ttl from now, or the current ttl when absent.
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<(), NativeError> {
        let lease = self.lease.clone();
        run(async move { lease.extend(ttl).await }, OnDrop::Finish).await
    }

    /// Releases the lock; runs to its end on the runtime whether or not anybody waits for it.
    pub async fn release(&self) -> Result<(), NativeError> {
        let lease = self.lease.clone();
        run(async move { lease.release().await }, OnDrop::Finish).await
    }

    /// [`NativeLease::release`] for a blocking JVM thread: one wake-up instead of several.
    pub fn release_blocking(&self) -> Result<(), NativeError> {
        let lease = self.lease.clone();
        crate::runtime::block(async move { lease.release().await })
    }

    /// Calls `listener` once when the lease is lost (at once if it already is).
    pub fn on_lost(&self, listener: Box<dyn NativeLostListener>) -> Result<(), NativeError> {
        guard(|| {
            let name = self.lease.name().to_string();
            self.lease.lost_signal().on_lost(move |reason| {
                listener.on_lost(reason.into(), format!("lock {name:?} lost: {reason}"));
            });
            Ok(())
        })
    }

    /// Completes when the lease is lost; cancelling the caller stops only the wait.
    pub async fn wait_lost(&self) -> Result<NativeLossReason, NativeError> {
        let signal = self.lease.lost_signal();
        run(
            async move { Ok(signal.wait().await.into()) },
            OnDrop::Cancel,
        )
        .await
    }

    /// Blocks the calling thread until the lease is lost or `timeout` passes (forever when
    /// absent); whether it is lost.
    pub fn wait_lost_blocking(&self, timeout: Option<Duration>) -> bool {
        self.lease.lost_signal().wait_blocking(timeout)
    }
}
