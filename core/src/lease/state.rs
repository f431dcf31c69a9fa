//! A lease's state and what changes it: the phase (held, released, lost), the client deadline
//! and the events each change emits. The operations that talk to the backend (release, extend,
//! renewal) are in the sibling files; the public handle is [`super::Lease`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;

use crate::backend::{Backend, TrackedLease};
use crate::clock::{BootInstant, drift_margin};
use crate::deployment::Deployment;
use crate::error::{Error, Result};
use crate::events::{EventHub, LockEvent, LockEventKind};
use crate::ids::OwnerId;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::signal::{LossReason, LostSignal};
use crate::sync::unpoisoned;
use crate::watchdog::{self, Watched};

use super::renewal::RenewalSchedule;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Held,
    Released,
    Lost(LossReason),
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) phase: Phase,
    /// The client deadline.
    pub(super) deadline: BootInstant,
    /// The server's expiry as this client estimates it (wall clock), for display.
    pub(super) expires_at: SystemTime,
    /// The ttl renewals use (changed by `extend(Some(ttl))`).
    pub(super) ttl: Duration,
    /// When the last confirmed acquire, renewal or extend was sent: the next renewal is due a
    /// third of the ttl after it.
    pub(super) last_sent: BootInstant,
    /// The last renewal attempt failed and none has succeeded since.
    pub(super) renewal_failing: bool,
    /// The backend reports the connection this lease depends on as down (ZooKeeper).
    pub(super) suspended: bool,
    /// When its schedule entry says to renew it next; `None` while a renewal runs and for a
    /// lease that does not renew (see [`super::renewal`]).
    pub(super) renewal_due: Option<BootInstant>,
}

pub(crate) struct LeaseShared {
    pub(crate) id: u64,
    pub(crate) name: LockName,
    pub(crate) token: u64,
    pub(crate) owner: OwnerId,
    /// How this lease holds its name.
    pub(crate) mode: LockMode,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) runtime: Handle,
    pub(super) held: Weak<HeldLeases>,
    /// The process that acquired: a child made by fork() must not renew or release.
    pub(super) pid: u32,
    pub(super) acquired_at: BootInstant,
    pub(super) deployment: Arc<Deployment>,
    /// The origin mark of the stored data the token was minted from (see [`NewLease::origin`]).
    pub(super) origin: Option<u64>,
    /// Renewed by its own task (not `auto_renew = false`): a backend's own proof of liveness
    /// ([`crate::backend::LeaseEvents::advance`]) moves its deadline only then.
    pub(super) auto_renew: bool,
    pub(super) max_hold: Option<Duration>,
    pub(super) operation_timeout: Duration,
    /// See [`crate::LockOptions::pipelined_release`].
    pub(super) pipelined_release: bool,
    /// Held while a renewal or an extend is in flight, so they never overlap: otherwise the
    /// server could apply them in one order and the client confirm them in the other (two SQL
    /// connections), leaving the client deadline past the server's expiry.
    pub(super) renewing: tokio::sync::Mutex<()>,
    /// The Locker's renewal schedule, which this lease is on while it renews itself.
    pub(super) renewals: Arc<RenewalSchedule>,
    pub(super) state: Mutex<State>,
    pub(super) signal: LostSignal,
    /// Set once a release (explicit or on drop) has been sent, so it is sent only once.
    pub(super) release_sent: AtomicBool,
    /// The Locker's event subscribers (see [`crate::events`]).
    pub(super) events: Arc<EventHub>,
    pub(super) metrics: Option<Arc<crate::metrics::LockMetrics>>,
    pub(super) spans: Option<Arc<crate::spans::LockSpans>>,
    /// The round trip of the acquire attempt that took the lock (for metrics).
    pub(super) attempt_round_trip: Duration,
}

/// What the locker knows when it creates a lease.
pub(crate) struct NewLease {
    pub id: u64,
    pub name: LockName,
    pub token: u64,
    pub owner: OwnerId,
    pub mode: LockMode,
    pub backend: Arc<dyn Backend>,
    pub runtime: Handle,
    /// The Locker's renewal schedule.
    pub renewals: Arc<RenewalSchedule>,
    /// The Locker's registry of its leases, which the lease leaves when it ends.
    pub held: Weak<HeldLeases>,
    pub sent_at: BootInstant,
    /// The identity fences know the lock's deployment by.
    pub deployment: Arc<Deployment>,
    /// The origin mark the backend answered with the token ([`crate::backend::Attempt`]).
    pub origin: Option<u64>,
    /// What the client deadline counts from: `sent_at` unless the backend proves better
    /// ([`Backend::expiry_counted_from`]).
    pub counted_from: BootInstant,
    pub sent_wall: SystemTime,
    pub ttl: Duration,
    pub auto_renew: bool,
    pub max_hold: Option<Duration>,
    pub operation_timeout: Duration,
    pub pipelined_release: bool,
    pub events: Arc<EventHub>,
    pub metrics: Option<Arc<crate::metrics::LockMetrics>>,
    pub spans: Option<Arc<crate::spans::LockSpans>>,
    /// When the answer to the acquire came.
    pub answered_at: BootInstant,
}

/// The server's expiry on the wall clock, estimated from a request's send time (both clocks)
/// and the instant the expiry counts from.
pub(super) fn wall_expiry(
    sent_wall: SystemTime,
    sent_at: BootInstant,
    counted_from: BootInstant,
    ttl: Duration,
) -> SystemTime {
    (sent_wall + ttl)
        .checked_sub(counted_from.until(sent_at))
        .unwrap_or(sent_wall)
}

pub(crate) fn client_deadline(
    backend: &dyn Backend,
    sent_at: BootInstant,
    ttl: Duration,
) -> BootInstant {
    let lifetime = ttl.saturating_sub(drift_margin(ttl, backend.max_clock_skew()));
    sent_at.checked_add(lifetime).unwrap_or(sent_at)
}

impl LeaseShared {
    /// Tells the Locker's event subscribers. Called while the state is locked where another
    /// thread could report a change of the same lease, so subscribers see them in order.
    pub(super) fn emit(
        &self,
        kind: LockEventKind,
        reason: Option<String>,
        loss: Option<LossReason>,
    ) {
        if let Some(metrics) = &self.metrics {
            metrics.lease_event(kind, loss, self.acquired_at.elapsed());
        }
        if !self.events.is_active() {
            return;
        }
        let event = LockEvent {
            kind,
            name: self.name.to_string(),
            token: self.token,
            backend: self.backend.kind(),
            at: SystemTime::now(),
            reason,
            loss,
        };
        self.events.publish(&event, |_| true);
    }

    pub(super) fn emit_lost(&self, reason: LossReason) {
        self.emit(
            LockEventKind::Lost,
            Some(reason.describe().to_string()),
            Some(reason),
        );
    }

    /// Marks the lease suspended (its backend connection is down) or not, telling
    /// subscribers when that changes while it is held.
    pub(crate) fn set_suspended(&self, suspended: bool) {
        let mut state = unpoisoned(&self.state);
        if state.suspended == suspended {
            return;
        }
        state.suspended = suspended;
        if state.phase == Phase::Held {
            if suspended {
                self.emit(
                    LockEventKind::Suspended,
                    Some("the connection to the backend is down".to_string()),
                    None,
                );
            } else {
                self.emit(LockEventKind::Resumed, None, None);
            }
        }
    }

    pub(crate) fn attempt_round_trip(&self) -> Duration {
        self.attempt_round_trip
    }

    pub(super) fn inherited_across_fork(&self) -> bool {
        self.pid != crate::runtime::process_id()
    }

    /// Held, not released or lost, and not inherited across fork(), as of now.
    pub(crate) fn is_held_now(&self) -> bool {
        !self.inherited_across_fork() && self.current_phase() == Phase::Held
    }

    /// Ends a lease that its holder let go of without release: sends the release in the
    /// background, best effort. If the runtime is gone the lock simply expires on the server.
    pub(crate) fn release_in_background(&self) {
        {
            let mut state = unpoisoned(&self.state);
            if state.phase != Phase::Held {
                return;
            }
            state.phase = Phase::Released;
            self.emit(
                LockEventKind::Released,
                Some("dropped without release: released in the background".to_string()),
                None,
            );
        }
        if self.inherited_across_fork() || self.release_sent.swap(true, Ordering::AcqRel) {
            return;
        }
        let backend = self.backend.clone();
        let (name, mode, owner) = (self.name.clone(), self.mode, self.owner);
        let timeout = self.operation_timeout;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.release(&name, mode, owner)).await;
            })
        }));
        self.unregister();
    }

    /// Makes the lease lost (once) and fires its signal, before anything observes the loss:
    /// a metrics sink, a log subscriber or an event hub that is slow or panics must neither
    /// delay the signal nor keep it from firing. (No event of this lease can be emitted between
    /// the phase change and the Lost event: every emitter checks the phase under the lock.)
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        {
            let mut state = unpoisoned(&self.state);
            if state.phase != Phase::Held {
                return;
            }
            state.phase = Phase::Lost(reason);
        }
        self.signal.fire(reason);
        // An observer that panics (the sink or the logger) loses its own report only: the loss
        // is recorded and signalled already.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.emit_lost(reason);
            flog!(warn, lock = self.name, "lease lost: {reason}");
        }));
    }

    /// The phase as of now, turning a passed deadline into a loss.
    pub(super) fn current_phase(&self) -> Phase {
        let phase = {
            let state = unpoisoned(&self.state);
            match state.phase {
                Phase::Held if state.deadline.has_passed() => None,
                phase => Some(phase),
            }
        };
        match phase {
            Some(phase) => phase,
            None => {
                self.mark_lost(LossReason::Expired);
                Phase::Lost(LossReason::Expired)
            }
        }
    }

    pub(crate) fn ensure_held(&self) -> Result<()> {
        if self.inherited_across_fork() {
            return Err(Error::closed(format!(
                "lease on {:?} was inherited across fork(); only the process that acquired it may use it",
                self.name.as_str()
            )));
        }
        match self.current_phase() {
            Phase::Held => Ok(()),
            Phase::Released => Err(Error::not_held(format!(
                "lock {:?} was already released",
                self.name.as_str()
            ))),
            Phase::Lost(reason) => Err(Error::lost(format!(
                "lock {:?} lost: {reason}",
                self.name.as_str()
            ))),
        }
    }

    /// Records a confirmed renewal that was sent at `sent_at`. A confirmation that arrives
    /// after the old deadline does not revive the lease: it was already lost.
    pub(super) fn confirm(
        self: &Arc<Self>,
        sent_at: BootInstant,
        sent_wall: SystemTime,
        ttl: Duration,
    ) {
        let counted_from = self
            .backend
            .expiry_counted_from(self.owner)
            .unwrap_or(sent_at);
        let new_deadline = client_deadline(self.backend.as_ref(), counted_from, ttl);
        let mut state = unpoisoned(&self.state);
        if state.phase != Phase::Held || state.deadline.has_passed() {
            return;
        }
        // Assigned, not maxed: an extend to a shorter ttl moves the server's expiry closer,
        // and the client deadline must follow it.
        state.deadline = new_deadline;
        state.expires_at = wall_expiry(sent_wall, sent_at, counted_from, ttl);
        state.ttl = ttl;
        state.last_sent = sent_at;
        state.renewal_failing = false;
        self.emit(LockEventKind::Renewed, None, None);
        let deadline = state.deadline;
        drop(state);
        watchdog::watch(self, deadline);
        // The next renewal is due a third of the (maybe new) ttl after this send.
        if self.auto_renew {
            self.schedule_renewal(sent_at.checked_add(ttl / 3).unwrap_or(sent_at));
        }
    }

    /// The backend proved, by itself, that the server keeps the lease until at least
    /// `counted_from` + its ttl: the deadline moves up to that (never down; no event: the
    /// renewal task reports renewals). Not for a lease that stopped renewing (`auto_renew =
    /// false`, `max_hold` reached): it ends at the deadline it has.
    pub(super) fn advance(self: &Arc<Self>, counted_from: BootInstant) {
        if !self.auto_renew
            || self
                .max_hold
                .is_some_and(|max| self.acquired_at.elapsed() >= max)
        {
            return;
        }
        let mut state = unpoisoned(&self.state);
        let new_deadline = client_deadline(self.backend.as_ref(), counted_from, state.ttl);
        if state.phase != Phase::Held
            || state.deadline.has_passed()
            || new_deadline <= state.deadline
        {
            return;
        }
        state.deadline = new_deadline;
        let deadline = state.deadline;
        drop(state);
        watchdog::watch(self, deadline);
    }

    pub(super) async fn with_timeout<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.operation_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(Error::unavailable(format!(
                "{what} of lock {:?} got no answer within {:?}",
                self.name.as_str(),
                self.operation_timeout
            ))),
        }
    }

    pub(super) fn unregister(&self) {
        if let Some(held) = self.held.upgrade() {
            held.forget(self.id);
        }
    }
}

impl Drop for LeaseShared {
    fn drop(&mut self) {
        self.release_in_background();
        // A lease lost (or released) before it was dropped is forgotten here too: the Locker's
        // map holds only leases somebody can still use.
        self.unregister();
    }
}

impl Watched for LeaseShared {
    /// Whether the watchdog's entry for `deadline` is still needed: the lease is held and that is
    /// its current deadline. True when the state is busy elsewhere (kept, never waited for).
    fn is_watched_at(&self, deadline: BootInstant) -> bool {
        match self.state.try_lock() {
            Ok(state) => state.phase == Phase::Held && state.deadline == deadline,
            Err(_) => true,
        }
    }

    /// Called by the watchdog when a registered deadline comes due.
    fn check_deadline(&self) {
        let passed = {
            let state = unpoisoned(&self.state);
            state.phase == Phase::Held && state.deadline.has_passed()
        };
        if passed {
            self.mark_lost(LossReason::Expired);
        }
    }
}

impl TrackedLease for LeaseShared {
    fn mark_lost(&self, reason: LossReason) {
        LeaseShared::mark_lost(self, reason);
    }

    fn advance(self: Arc<Self>, counted_from: BootInstant) {
        LeaseShared::advance(&self, counted_from);
    }

    fn set_suspended(&self, suspended: bool) {
        LeaseShared::set_suspended(self, suspended);
    }

    fn is_held(&self) -> bool {
        self.current_phase() == Phase::Held
    }

    fn on_lost(&self, callback: Box<dyn FnOnce(LossReason) + Send>) {
        self.signal.on_lost(callback);
    }
}

/// The leases one Locker holds, so that closing it releases them. Each lease holds this weakly
/// and leaves it when it ends; the map holds the leases weakly, so it never keeps one alive.
#[derive(Default)]
pub(crate) struct HeldLeases {
    next_id: AtomicU64,
    leases: Mutex<HashMap<u64, Weak<LeaseShared>>>,
}

impl HeldLeases {
    /// A lease id unique within this Locker.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn insert(&self, lease: &Arc<LeaseShared>) {
        unpoisoned(&self.leases).insert(lease.id, Arc::downgrade(lease));
    }

    fn forget(&self, lease_id: u64) {
        unpoisoned(&self.leases).remove(&lease_id);
    }

    /// Empties the registry, returning the leases still alive.
    pub(crate) fn drain(&self) -> Vec<Arc<LeaseShared>> {
        unpoisoned(&self.leases)
            .drain()
            .filter_map(|(_, weak)| weak.upgrade())
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        unpoisoned(&self.leases).len()
    }
}

impl fmt::Debug for HeldLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeldLeases({})", self.len())
    }
}
