//! A lease: proof of holding one lock, its client deadline, and its renewal.
//!
//! The client deadline (docs/design.md §2.1) is the send time of the last confirmed acquire or
//! renewal, plus the ttl, minus the drift margin, on CLOCK_BOOTTIME. Past it the lease is lost
//! whatever else happens: [`Lease::is_lost`] computes it on every read, and the watchdog
//! thread fires the lost signal at that moment even if the renewal task is stuck.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;

use crate::backend::{Backend, Renewal};
use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::events::{EventHub, LockEvent, LockEventKind};
use crate::ids::OwnerId;
use crate::locker::LockerInner;
use crate::name::LockName;
use crate::options::validate_ttl;
use crate::reentry::Ticket;
use crate::signal::{LossReason, LostSignal};
use crate::sync::unpoisoned;
use crate::watchdog;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Held,
    Released,
    Lost(LossReason),
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// The client deadline.
    deadline: BootInstant,
    /// The server's expiry as this client estimates it (wall clock), for display.
    expires_at: SystemTime,
    /// The ttl renewals use (changed by `extend(Some(ttl))`).
    ttl: Duration,
    /// When the last confirmed acquire, renewal or extend was sent: the next renewal is due a
    /// third of the ttl after it.
    last_sent: BootInstant,
    /// The last renewal attempt failed and none has succeeded since.
    renewal_failing: bool,
    /// The backend reports the connection this lease depends on as down (ZooKeeper).
    suspended: bool,
}

pub(crate) struct LeaseShared {
    pub(crate) id: u64,
    pub(crate) name: LockName,
    pub(crate) token: u64,
    pub(crate) owner: OwnerId,
    backend: Arc<dyn Backend>,
    runtime: Handle,
    locker: Weak<LockerInner>,
    /// The process that acquired: a child made by fork() must not renew or release.
    pid: u32,
    acquired_at: BootInstant,
    deployment: Arc<crate::fence::Deployment>,
    /// The origin mark of the stored data the token was minted from (see [`NewLease::origin`]).
    origin: Option<u64>,
    /// Renewed by its own task (not `auto_renew = false`): a backend's own proof of liveness
    /// ([`LeaseEvents::advance`]) moves its deadline only then.
    auto_renew: bool,
    max_hold: Option<Duration>,
    operation_timeout: Duration,
    /// See [`crate::LockOptions::pipelined_release`].
    pipelined_release: bool,
    /// Held while a renewal or an extend is in flight, so they never overlap: otherwise the
    /// server could apply them in one order and the client confirm them in the other (two SQL
    /// connections), leaving the client deadline past the server's expiry.
    renewing: tokio::sync::Mutex<()>,
    /// Wakes the renewal task when the schedule changed (an extend, to a shorter ttl say).
    reschedule: Arc<tokio::sync::Notify>,
    state: Mutex<State>,
    signal: LostSignal,
    /// Set once a release (explicit or on drop) has been sent, so it is sent only once.
    release_sent: AtomicBool,
    /// The Locker's event subscribers (see [`crate::events`]).
    events: Arc<EventHub>,
    metrics: Option<Arc<crate::metrics::LockMetrics>>,
    /// The round trip of the acquire attempt that took the lock (for metrics).
    attempt_round_trip: Duration,
}

/// What the locker knows when it creates a lease.
pub(crate) struct NewLease {
    pub id: u64,
    pub name: LockName,
    pub token: u64,
    pub owner: OwnerId,
    pub backend: Arc<dyn Backend>,
    pub runtime: Handle,
    pub locker: Weak<LockerInner>,
    pub sent_at: BootInstant,
    /// The identity fences know the lock's deployment by.
    pub deployment: Arc<crate::fence::Deployment>,
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
    /// When the answer to the acquire came.
    pub answered_at: BootInstant,
}

/// The server's expiry on the wall clock, estimated from a request's send time (both clocks)
/// and the instant the expiry counts from.
fn wall_expiry(
    sent_wall: SystemTime,
    sent_at: BootInstant,
    counted_from: BootInstant,
    ttl: Duration,
) -> SystemTime {
    (sent_wall + ttl)
        .checked_sub(counted_from.until(sent_at))
        .unwrap_or(sent_wall)
}

fn client_deadline(backend: &dyn Backend, sent_at: BootInstant, ttl: Duration) -> BootInstant {
    let lifetime = ttl.saturating_sub(drift_margin(ttl, backend.max_clock_skew()));
    sent_at.checked_add(lifetime).unwrap_or(sent_at)
}

impl LeaseShared {
    pub(crate) fn start(new: NewLease) -> Arc<LeaseShared> {
        let deadline = client_deadline(new.backend.as_ref(), new.counted_from, new.ttl);
        let shared = Arc::new(LeaseShared {
            id: new.id,
            name: new.name,
            token: new.token,
            owner: new.owner,
            backend: new.backend,
            runtime: new.runtime,
            locker: new.locker,
            pid: std::process::id(),
            acquired_at: new.sent_at,
            deployment: new.deployment,
            origin: new.origin,
            auto_renew: new.auto_renew,
            max_hold: new.max_hold,
            pipelined_release: new.pipelined_release,
            renewing: tokio::sync::Mutex::new(()),
            reschedule: Arc::default(),
            operation_timeout: new.operation_timeout,
            state: Mutex::new(State {
                phase: Phase::Held,
                deadline,
                expires_at: wall_expiry(new.sent_wall, new.sent_at, new.counted_from, new.ttl),
                ttl: new.ttl,
                last_sent: new.sent_at,
                renewal_failing: false,
                suspended: false,
            }),
            signal: LostSignal::default(),
            release_sent: AtomicBool::new(false),
            events: new.events,
            metrics: new.metrics,
            attempt_round_trip: new.sent_at.until(new.answered_at),
        });
        shared.emit(LockEventKind::Acquired, None, None);
        watchdog::watch(&shared, deadline);
        if new.auto_renew {
            let weak = Arc::downgrade(&shared);
            shared.runtime.spawn(renew_loop(weak));
        }
        shared
    }

    /// Tells the Locker's event subscribers. Called while the state is locked where another
    /// thread could report a change of the same lease, so subscribers see them in order.
    fn emit(&self, kind: LockEventKind, reason: Option<String>, loss: Option<LossReason>) {
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

    fn emit_lost(&self, reason: LossReason) {
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

    fn inherited_across_fork(&self) -> bool {
        self.pid != std::process::id()
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
        let name = self.name.clone();
        let owner = self.owner;
        let timeout = self.operation_timeout;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, backend.release(&name, owner)).await;
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

    /// Whether the watchdog's entry for `deadline` is still needed: the lease is held and that is
    /// its current deadline. True when the state is busy elsewhere (kept, never waited for).
    pub(crate) fn is_watched_at(&self, deadline: BootInstant) -> bool {
        match self.state.try_lock() {
            Ok(state) => state.phase == Phase::Held && state.deadline == deadline,
            Err(_) => true,
        }
    }

    /// Called by the watchdog when a registered deadline comes due.
    pub(crate) fn check_deadline(&self) {
        let passed = {
            let state = unpoisoned(&self.state);
            state.phase == Phase::Held && state.deadline.has_passed()
        };
        if passed {
            self.mark_lost(LossReason::Expired);
        }
    }

    /// The phase as of now, turning a passed deadline into a loss.
    fn current_phase(&self) -> Phase {
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
    fn confirm(self: &Arc<Self>, sent_at: BootInstant, sent_wall: SystemTime, ttl: Duration) {
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
        self.reschedule.notify_one();
    }

    /// The backend proved, by itself, that the server keeps the lease until at least
    /// `counted_from` + its ttl: the deadline moves up to that (never down; no event: the
    /// renewal task reports renewals). Not for a lease that stopped renewing (`auto_renew =
    /// false`, `max_hold` reached): it ends at the deadline it has.
    fn advance(self: &Arc<Self>, counted_from: BootInstant) {
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

    async fn with_timeout<T>(&self, what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.operation_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(Error::unavailable(format!(
                "{what} of lock {:?} got no answer within {:?}",
                self.name.as_str(),
                self.operation_timeout
            ))),
        }
    }

    fn unregister(&self) {
        if let Some(locker) = self.locker.upgrade() {
            locker.forget(self.id);
        }
    }

    pub(crate) async fn release(self: &Arc<Self>) -> Result<()> {
        if self.inherited_across_fork() {
            return self.ensure_held();
        }
        let phase = {
            let mut state = unpoisoned(&self.state);
            let phase = match state.phase {
                Phase::Held if state.deadline.has_passed() => Phase::Lost(LossReason::Expired),
                phase => phase,
            };
            if phase == Phase::Held {
                state.phase = Phase::Released;
            }
            phase
        };
        match phase {
            Phase::Released => return self.ensure_held(),
            Phase::Lost(LossReason::Expired) => {
                self.mark_lost(LossReason::Expired);
                // The row may still name us: clean up so the next holder need not wait for
                // the server's expiry. The caller still hears LOST.
                if !self.release_sent.swap(true, Ordering::AcqRel) {
                    let _ = self
                        .with_timeout("release", self.backend.release(&self.name, self.owner))
                        .await;
                }
                self.unregister();
                return self.ensure_held();
            }
            Phase::Lost(_) => {
                self.unregister();
                return self.ensure_held();
            }
            Phase::Held => {}
        }
        self.release_sent.store(true, Ordering::Release);
        self.unregister();
        if self.pipelined_release {
            self.release_pipelined().await;
            return Ok(());
        }
        let ours = self.release_with_retries().await?;
        if ours {
            self.emit(LockEventKind::Released, None, None);
        } else {
            self.signal.fire(LossReason::TakenOver);
            self.emit_lost(LossReason::TakenOver);
            return Err(Error::lost(format!(
                "lock {:?} was no longer ours when released: {}",
                self.name.as_str(),
                LossReason::TakenOver
            )));
        }
        Ok(())
    }

    /// Starts the release here, so its command is queued on the connection before the caller's
    /// next one, and lets the runtime finish it and check the reply.
    async fn release_pipelined(self: &Arc<Self>) {
        let lease = self.clone();
        let mut finish = Box::pin(async move {
            match lease.release_with_retries().await {
                Ok(true) => lease.emit(LockEventKind::Released, None, None),
                Ok(false) => {
                    flog!(
                        warn,
                        lock = lease.name,
                        "pipelined release found the lock no longer ours"
                    );
                    lease.signal.fire(LossReason::TakenOver);
                    lease.emit_lost(LossReason::TakenOver);
                }
                Err(e) => {
                    flog!(
                        warn,
                        lock = lease.name,
                        "pipelined release failed ({e}); the lock expires at its ttl"
                    );
                }
            }
        });
        // One poll sends the command (on Redis it is queued on the shared connection); the rest
        // (the reply) is awaited in the background.
        let sent =
            std::future::poll_fn(|cx| std::task::Poll::Ready(finish.as_mut().poll(cx))).await;
        if sent.is_pending() {
            self.runtime.spawn(finish);
        }
    }

    /// A release that fails fast (a connection being re-established) is tried twice more,
    /// so a lock is not left to expire for a blip; a backend that hangs costs one timeout.
    async fn release_with_retries(&self) -> Result<bool> {
        let mut attempt = 0;
        loop {
            let started = BootInstant::now();
            match self
                .with_timeout("release", self.backend.release(&self.name, self.owner))
                .await
            {
                Err(e)
                    if e.is_retryable()
                        && attempt < 2
                        && started.elapsed() < Duration::from_millis(500) =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                result => return result,
            }
        }
    }

    pub(crate) async fn extend(self: &Arc<Self>, ttl: Option<Duration>) -> Result<()> {
        self.ensure_held()?;
        let ttl = match ttl {
            Some(ttl) => {
                validate_ttl(ttl)?;
                // A backend whose liveness is its session (ZooKeeper) keeps its own length.
                self.backend.lease_ttl(ttl)
            }
            None => unpoisoned(&self.state).ttl,
        };
        let _turn = self.renewing.lock().await;
        self.ensure_held()?;
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        match self
            .with_timeout("extend", self.backend.renew(&self.name, self.owner, ttl))
            .await?
        {
            Renewal::Renewed => {
                self.confirm(sent_at, sent_wall, ttl);
                self.ensure_held()
            }
            Renewal::NotOurs => {
                self.mark_lost(LossReason::TakenOver);
                self.ensure_held()
            }
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

/// Renews every ttl/3 while the lease is held; retries failures until the client deadline
/// (the watchdog makes the lease lost then, not this task).
async fn renew_loop(weak: Weak<LeaseShared>) {
    let mut retry_in: Option<Duration> = None;
    loop {
        // Only the wake-up is kept across the sleep, not the lease: a lease dropped meanwhile
        // is released.
        let (wait, reschedule) = match weak.upgrade() {
            None => return,
            Some(lease) => {
                let wait = match retry_in {
                    Some(d) => d,
                    None => {
                        let state = unpoisoned(&lease.state);
                        (state.ttl / 3).saturating_sub(state.last_sent.elapsed())
                    }
                };
                (wait, lease.reschedule.clone())
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            // Confirmed by an extend (or this task's own renewal): count again from it.
            _ = reschedule.notified() => {
                if retry_in.is_none() {
                    continue;
                }
            }
        }
        let Some(lease) = weak.upgrade() else { return };
        if lease.current_phase() != Phase::Held {
            return;
        }
        if let Some(max_hold) = lease.max_hold
            && lease.acquired_at.elapsed() >= max_hold
        {
            flog!(
                info,
                lock = lease.name,
                "max_hold reached; renewals stop and the lease ends at its deadline"
            );
            return;
        }
        // Held until the outcome is recorded (end of this iteration).
        let _turn = lease.renewing.lock().await;
        if lease.current_phase() != Phase::Held {
            return;
        }
        let ttl = unpoisoned(&lease.state).ttl;
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        let outcome = lease
            .with_timeout(
                "renewal",
                lease.backend.renew(&lease.name, lease.owner, ttl),
            )
            .await;
        match outcome {
            Ok(Renewal::Renewed) => {
                lease.confirm(sent_at, sent_wall, ttl);
                retry_in = None;
            }
            Ok(Renewal::NotOurs) => {
                lease.mark_lost(LossReason::TakenOver);
                return;
            }
            Err(e) => {
                {
                    let mut state = unpoisoned(&lease.state);
                    state.renewal_failing = true;
                    if state.phase == Phase::Held {
                        lease.emit(LockEventKind::RenewalRetried, Some(e.to_string()), None);
                    }
                }
                flog!(
                    warn,
                    lock = lease.name,
                    "renewal failed, retrying until the client deadline: {e}"
                );
                retry_in =
                    Some((ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1)));
            }
        }
    }
}

/// A backend's handle on one lease, given to [`Backend::track`] when the lease starts, so a
/// backend that learns of a loss by itself (a ZooKeeper watch or session event) reports it at
/// once, and reports its connection going down and coming back. It holds the lease weakly.
#[derive(Clone)]
pub struct LeaseEvents {
    lease: Weak<LeaseShared>,
}

impl LeaseEvents {
    pub(crate) fn new(lease: &Arc<LeaseShared>) -> Self {
        LeaseEvents {
            lease: Arc::downgrade(lease),
        }
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
        self.lease
            .upgrade()
            .is_some_and(|lease| lease.current_phase() == Phase::Held)
    }

    /// Runs `callback` once when the lease is lost (on the thread that notices it, which may
    /// be the deadline watchdog's: it must be quick). Nothing runs if the lease is gone.
    pub fn on_lost(&self, callback: impl FnOnce(LossReason) + Send + 'static) {
        if let Some(lease) = self.lease.upgrade() {
            lease.signal.on_lost(callback);
        }
    }
}

impl fmt::Debug for LeaseEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseEvents")
    }
}

/// Proof of holding one lock. Clones share the same lease; it is released when
/// [`Lease::release`] is called, or in the background (best effort) when the last clone is
/// dropped.
///
/// A lease acquired in an execution scope ([`crate::Locker::acquire_in`]) is one acquisition of
/// that scope's lease: nested acquisitions share the server lease and its token, and the lock
/// is released on the server when the last of them is released.
#[derive(Clone)]
pub struct Lease {
    pub(crate) shared: Arc<LeaseShared>,
    pub(crate) ticket: Option<Arc<Ticket>>,
}

impl Lease {
    pub fn name(&self) -> &str {
        self.shared.name.as_str()
    }

    /// The fencing token: strictly increasing per lock name, below 2^63.
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// When the server will expire the lease unless it is renewed (the client's estimate).
    /// `None` where the lease has no server-side expiry time: on ZooKeeper it lives as long
    /// as its session and node (see [`Lease::deadline`] for the client's own limit).
    pub fn expires_at(&self) -> Option<SystemTime> {
        if !self.shared.backend.server_expiry() {
            return None;
        }
        Some(unpoisoned(&self.shared.state).expires_at)
    }

    /// The client deadline, on CLOCK_BOOTTIME.
    pub fn deadline(&self) -> BootInstant {
        unpoisoned(&self.shared.state).deadline
    }

    /// Whether the lease is lost; computed from the deadline on every call.
    pub fn is_lost(&self) -> bool {
        matches!(self.shared.current_phase(), Phase::Lost(_))
    }

    /// Held: neither released nor lost.
    pub fn is_held(&self) -> bool {
        self.ticket
            .as_ref()
            .is_none_or(|ticket| !ticket.is_released())
            && self.shared.is_held_now()
    }

    /// Whether the last renewal attempt failed (renewals retry until the deadline).
    pub fn renewal_failing(&self) -> bool {
        unpoisoned(&self.shared.state).renewal_failing
    }

    /// Held, but its standing is in doubt: the backend connection it depends on is down
    /// (ZooKeeper's "suspended"), or the last renewal failed. Stop writing until it clears;
    /// the lease is lost at its client deadline if it does not.
    pub fn is_suspended(&self) -> bool {
        if !self.is_held() {
            return false;
        }
        let state = unpoisoned(&self.shared.state);
        state.suspended || state.renewal_failing
    }

    /// The signal set when this lease is lost.
    pub fn lost_signal(&self) -> LostSignal {
        // Reading the phase first turns a passed deadline into a fired signal.
        let _ = self.shared.current_phase();
        self.shared.signal.clone()
    }

    /// `Ok` while held; LOST, NOT_HELD or CLOSED otherwise.
    pub fn ensure_held(&self) -> Result<()> {
        match &self.ticket {
            Some(ticket) => ticket.ensure_held(),
            None => self.shared.ensure_held(),
        }
    }

    /// Sets a new ttl from now (the current ttl when `None`).
    ///
    /// # Errors
    /// NOT_HELD after release, LOST after a loss (including when the server says the lock is
    /// no longer ours), CLOSED in a forked child, UNAVAILABLE when the backend does not answer.
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        self.ensure_held()?;
        self.shared.extend(ttl).await
    }

    /// Releases the lock on the server if it is still ours.
    ///
    /// # Errors
    /// NOT_HELD on a second release, LOST when the lease was lost first (the caller's work may
    /// have run without the lock), UNAVAILABLE when the backend does not answer (the lock
    /// then expires on its own).
    ///
    /// A nested acquisition ([`crate::Locker::acquire_in`] with `reentrant`) releases only
    /// itself while outer ones remain; in any order.
    pub async fn release(&self) -> Result<()> {
        match &self.ticket {
            Some(ticket) => ticket.release().await,
            None => self.shared.release().await,
        }
    }

    /// The token with what a fence needs to check it (the lock's identity and deadline).
    pub fn fence_token(&self) -> crate::fence::FenceToken {
        crate::fence::FenceToken::from_lease(self)
    }

    pub(crate) fn deployment(&self) -> &crate::fence::Deployment {
        &self.shared.deployment
    }

    pub(crate) fn origin(&self) -> Option<u64> {
        self.shared.origin
    }

    /// Tells the Locker's subscribers that a fence took this lease's token for one of another
    /// origin ([`crate::fence`]).
    pub(crate) fn report_deployment_mismatch(&self, reason: String) {
        self.shared
            .emit(LockEventKind::DeploymentMismatch, Some(reason), None);
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.shared.name)
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}
