//! A lease: proof of holding one lock, its client deadline, and its renewal.
//!
//! The client deadline (docs/design.md §2.1) is the send time of the last confirmed acquire or
//! renewal, plus the ttl, minus the drift margin, on CLOCK_BOOTTIME. Past it the lease is lost
//! whatever else happens: [`Lease::is_lost`] computes it on every read, and the watchdog
//! thread fires the lost signal at that moment even if the renewal task is stuck.
//!
//! `state.rs` and `renewal.rs` are one state machine in two files, and import each other: the
//! state schedules renewals, and a renewal's outcome moves the state (the one import circle
//! tests/import-circles.allow accepts).

pub(crate) mod multi;
pub(crate) mod reentry;
mod release;
pub(crate) mod renewal;
pub(crate) mod state;

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::clock::BootInstant;
use crate::deployment::Deployment;
use crate::error::Result;
use crate::events::LockEventKind;
use crate::mode::LockMode;
use crate::signal::LostSignal;
use crate::sync::unpoisoned;
use crate::watchdog;
use reentry::Ticket;
use state::{LeaseShared, NewLease, Phase, State, client_deadline, wall_expiry};

/// Makes the shared state of a lease the backend just granted, and starts watching its deadline
/// and (with `auto_renew`) renewing it.
pub(crate) fn start(new: NewLease) -> Arc<LeaseShared> {
    let deadline = client_deadline(new.backend.as_ref(), new.counted_from, new.ttl);
    let shared = Arc::new(LeaseShared {
        id: new.id,
        name: new.name,
        token: new.token,
        owner: new.owner,
        mode: new.mode,
        backend: new.backend,
        runtime: new.runtime,
        renewals: new.renewals,
        held: new.held,
        pid: crate::runtime::process_id(),
        acquired_at: new.sent_at,
        deployment: new.deployment,
        origin: new.origin,
        auto_renew: new.auto_renew,
        max_hold: new.max_hold,
        pipelined_release: new.pipelined_release,
        renewing: tokio::sync::Mutex::new(()),
        operation_timeout: new.operation_timeout,
        state: Mutex::new(State {
            phase: Phase::Held,
            deadline,
            expires_at: wall_expiry(new.sent_wall, new.sent_at, new.counted_from, new.ttl),
            ttl: new.ttl,
            last_sent: new.sent_at,
            renewal_failing: false,
            suspended: false,
            renewal_due: None,
        }),
        signal: LostSignal::default(),
        release_sent: AtomicBool::new(false),
        events: new.events,
        metrics: new.metrics,
        spans: new.spans,
        attempt_round_trip: new.sent_at.until(new.answered_at),
    });
    shared.emit(LockEventKind::Acquired, None, None);
    watchdog::watch(&shared, deadline);
    if new.auto_renew {
        shared.schedule_renewal(new.sent_at.checked_add(new.ttl / 3).unwrap_or(new.sent_at));
    }
    shared
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

    /// The fencing token: strictly increasing per lock name, below 2^63. Only a mutex's or a
    /// write lease's token may guard a fence: readers and a semaphore's permits run at once.
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// How this lease holds its name: a mutex's, a semaphore's permit, a read or a write lease.
    pub fn mode(&self) -> LockMode {
        self.shared.mode
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

    /// How long the lease lives from one renewal to the next: the ttl asked for (or set by
    /// the last [`Lease::extend`]), except on ZooKeeper, where the lease lives by its session
    /// and this is the session timeout the server granted. Anything timed from the lease's
    /// life (a grace before its deadline, a watchdog's silence) is timed from this.
    pub fn ttl(&self) -> Duration {
        unpoisoned(&self.shared.state).ttl
    }

    /// The client deadline, on CLOCK_BOOTTIME.
    pub fn deadline(&self) -> BootInstant {
        unpoisoned(&self.shared.state).deadline
    }

    /// The client deadline on the wall clock (read now): the moment after which this client
    /// counts the lease lost unless a renewal succeeds before it. It moves forward with each
    /// renewal, and stays where it was once the lease is lost or released. On TTL backends it
    /// comes before [`Lease::expires_at`] by the clock-drift allowance, so work that checks it
    /// stops before the server could hand the lock to someone else.
    pub fn valid_until(&self) -> SystemTime {
        self.deadline().to_system_time()
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

    pub(crate) fn deployment(&self) -> &Deployment {
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
