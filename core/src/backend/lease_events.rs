//! A backend's handle on one lease, given to [`super::Backend::track`] when the lease starts,
//! so a backend that learns of a loss by itself (a ZooKeeper watch or session event) reports
//! it at once, and reports its connection going down and coming back.
//!
//! The lease is seen through [`TrackedLease`] so that backends sit below the lease in the
//! module graph: they report to it and know nothing else of it.

use std::fmt;
use std::sync::{Arc, Weak};

use crate::clock::BootInstant;
use crate::signal::LossReason;

/// What a backend may tell a lease, and ask of it.
pub(crate) trait TrackedLease: Send + Sync {
    /// Makes the lease lost (if it is still held) and fires its signal.
    fn mark_lost(&self, reason: LossReason);
    /// The server keeps the lease until at least `counted_from` + its ttl.
    fn advance(self: Arc<Self>, counted_from: BootInstant);
    /// The connection the lease depends on went down (`true`) or came back.
    fn set_suspended(&self, suspended: bool);
    /// Held: not released, lost or past its deadline.
    fn is_held(&self) -> bool;
    /// Runs `callback` once when the lease is lost.
    fn on_lost(&self, callback: Box<dyn FnOnce(LossReason) + Send>);
}

/// A weak handle on one lease: nothing happens once the lease is gone.
#[derive(Clone)]
pub struct LeaseEvents {
    lease: Weak<dyn TrackedLease>,
}

impl LeaseEvents {
    pub(crate) fn new<L: TrackedLease + 'static>(lease: &Arc<L>) -> Self {
        let lease: Weak<dyn TrackedLease> = Arc::downgrade(lease) as Weak<L>;
        LeaseEvents { lease }
    }

    /// Makes the lease lost (if it is still held) and fires its signal.
    pub fn lost(&self, reason: LossReason) {
        if let Some(lease) = self.lease.upgrade() {
            lease.mark_lost(reason);
        }
    }

    /// The backend proved that the server keeps the lease until at least `counted_from` + its
    /// ttl (ZooKeeper's session heartbeat): its client deadline moves up to that.
    pub fn advance(&self, counted_from: BootInstant) {
        if let Some(lease) = self.lease.upgrade() {
            lease.advance(counted_from);
        }
    }

    /// Marks the lease suspended (connection down) or not.
    pub fn set_suspended(&self, suspended: bool) {
        if let Some(lease) = self.lease.upgrade() {
            lease.set_suspended(suspended);
        }
    }

    /// Whether the lease still exists and is held (not released, lost or past its deadline).
    pub fn is_held(&self) -> bool {
        self.lease.upgrade().is_some_and(|lease| lease.is_held())
    }

    /// Runs `callback` once when the lease is lost (on the thread that notices it, which may
    /// be the deadline watchdog's: it must be quick). Nothing runs if the lease is gone.
    pub fn on_lost(&self, callback: impl FnOnce(LossReason) + Send + 'static) {
        if let Some(lease) = self.lease.upgrade() {
            lease.on_lost(Box::new(callback));
        }
    }
}

impl fmt::Debug for LeaseEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseEvents")
    }
}
