//! What the clones of one Locker share: its backend, options, held leases and waiting queues.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::backend::Backend;
use crate::deployment::Deployment;
use crate::error::{Error, Result};
use crate::lease::reentry::ScopeRegistry;
use crate::lease::renewal::RenewalSchedule;
use crate::lease::state::HeldLeases;
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::sync::unpoisoned;
use crate::url::LockerUrl;

pub(super) struct LockerInner {
    pub(super) url: LockerUrl,
    /// How fences know this Locker's leases' deployment.
    pub(super) deployment: Arc<Deployment>,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) options: LockerOptions,
    pub(super) runtime: Handle,
    pub(super) language: String,
    pub(super) closed: AtomicBool,
    /// The process that connected: after fork() the child has none of its threads.
    pub(super) pid: u32,
    pub(super) leases: Arc<HeldLeases>,
    /// When this Locker's leases renew (see [`crate::lease::renewal`]).
    pub(super) renewals: Arc<RenewalSchedule>,
    /// One queue per lock name for this Locker's waiters (see [`super::Locker::acquire`]).
    pub(super) turnstiles: Mutex<HashMap<LockName, Weak<tokio::sync::Mutex<()>>>>,
    /// Which execution scopes hold which names (see [`super::Locker::acquire_in`]).
    pub(super) scopes: Arc<ScopeRegistry>,
    /// Subscribers to the leases' lifecycle events (see [`super::Locker::subscribe`]).
    pub(super) events: Arc<crate::events::EventHub>,
    /// OpenTelemetry instruments, when [`LockerOptions::metrics`] is on.
    pub(super) metrics: Option<Arc<crate::metrics::LockMetrics>>,
    /// Spans, when [`LockerOptions::tracing`] is on or a span sink is given.
    pub(super) spans: Option<Arc<crate::spans::LockSpans>>,
}

impl LockerInner {
    pub(super) fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        if self.pid != crate::runtime::process_id() {
            return Err(Error::closed(format!(
                "this locker was connected in process {} before fork(); connect a new one in this process",
                self.pid
            )));
        }
        Ok(())
    }

    pub(super) fn turnstile(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut turnstiles = unpoisoned(&self.turnstiles);
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
    pub(super) fn background_cleanup_timeout(&self) -> Duration {
        self.options.operation_timeout.saturating_mul(2) + Duration::from_secs(1)
    }

    pub(super) fn hook(&self, point: &'static str) {
        if let Some(hook) = &self.options.test_hook {
            (hook.0)(point);
        }
    }
}
