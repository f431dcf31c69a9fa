//! Lifecycle events of the leases of one Locker, for users who want to hear when something
//! happens (a lease lost, a renewal retried) without polling, and for bindings that turn them
//! into their language's idiom (a Python callback, a Node EventEmitter, a JVM listener).
//!
//! [`crate::Locker::subscribe`] returns an [`EventSubscription`]: a queue that the Locker's
//! leases push into and the subscriber drains on its own thread or task, so no subscriber code
//! ever runs on a renewal task or the deadline watchdog. Each event is pushed while the
//! lease's state is locked, at the moment of the change it reports, so a subscriber sees the
//! events of one lease in the order they happened: `Acquired`, then any of `Renewed`,
//! `RenewalRetried`, `Suspended`, `Resumed`, and last `Released` or `Lost`; a fence's warning,
//! `DeploymentMismatch`, comes when a fence checks the lease's token.
//! With nobody subscribed, an event costs one atomic load.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::inbox::{Hub, Membership};
use crate::signal::LossReason;
use crate::url::BackendKind;

/// What happened to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockEventKind {
    /// The lock was taken.
    Acquired,
    /// A renewal (or an `extend`) was confirmed.
    Renewed,
    /// A renewal failed with a transient error; it is retried until the client deadline.
    RenewalRetried,
    /// The connection the lease depends on is down (ZooKeeper): stop writing.
    Suspended,
    /// That connection is back and the lease is still held.
    Resumed,
    /// The lease was lost: expired, taken over, released by an operator, session ended.
    Lost,
    /// The holder released the lock.
    Released,
    /// A fence took this lease's token for one minted from other stored data than its highest
    /// token's, and the token was not above that highest: two servers answer behind one
    /// address, or the server lost the lock's data and its clock went back. A warning: the
    /// lease is still held, and the fence refused the token if it was below its highest.
    DeploymentMismatch,
}

impl LockEventKind {
    /// Every kind, in lifecycle order.
    pub const ALL: [LockEventKind; 8] = [
        LockEventKind::Acquired,
        LockEventKind::Renewed,
        LockEventKind::RenewalRetried,
        LockEventKind::Suspended,
        LockEventKind::Resumed,
        LockEventKind::Lost,
        LockEventKind::Released,
        LockEventKind::DeploymentMismatch,
    ];

    /// The stable spelling every binding uses: `acquired`, `renewed`, `renewal_retried`,
    /// `suspended`, `resumed`, `lost`, `released`, `deployment_mismatch`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockEventKind::Acquired => "acquired",
            LockEventKind::Renewed => "renewed",
            LockEventKind::RenewalRetried => "renewal_retried",
            LockEventKind::Suspended => "suspended",
            LockEventKind::Resumed => "resumed",
            LockEventKind::Lost => "lost",
            LockEventKind::Released => "released",
            LockEventKind::DeploymentMismatch => "deployment_mismatch",
        }
    }
}

impl fmt::Display for LockEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened to one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEvent {
    pub kind: LockEventKind,
    /// The lock's name.
    pub name: String,
    /// The lease's fencing token (it identifies the lease among the lock's holders).
    pub token: u64,
    pub backend: BackendKind,
    /// When it happened (wall clock, for people and logs).
    pub at: SystemTime,
    /// Why, for `Lost` (see [`LockEvent::loss`]), `RenewalRetried` (the error) and `Suspended`.
    pub reason: Option<String>,
    /// The loss reason of a `Lost` event.
    pub loss: Option<LossReason>,
}

/// The receiving end of [`crate::Locker::subscribe`]. Dropping it (or [`EventSubscription::close`])
/// unsubscribes. Closing the Locker ends it: receiving then drains what is queued and returns
/// `None`.
pub struct EventSubscription {
    membership: Membership<LockEvent, ()>,
}

impl EventSubscription {
    /// The next event, waiting up to `timeout` (forever when `None`). Blocks the calling
    /// thread: call it from a thread of your own (or a binding's), not from an async task.
    /// `None` on timeout, or once the subscription ended and its queue is drained.
    pub fn recv_blocking(&self, timeout: Option<Duration>) -> Option<LockEvent> {
        self.membership.inbox.recv_blocking(timeout)
    }

    /// The next event; `None` once the subscription ended and its queue is drained.
    pub async fn recv(&self) -> Option<LockEvent> {
        self.membership.inbox.recv().await
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Option<LockEvent> {
        self.membership.inbox.try_recv()
    }

    /// How many events were dropped because more than [`crate::INBOX_CAPACITY`]
    /// waited unread.
    pub fn dropped(&self) -> u64 {
        self.membership.inbox.dropped()
    }

    /// Whether the subscription ended (closed, or its Locker closed).
    pub fn is_closed(&self) -> bool {
        self.membership.inbox.is_closed()
    }

    /// Unsubscribes; events already queued can still be received.
    pub fn close(&self) {
        if let Some(hub) = self.membership.hub.upgrade() {
            hub.unsubscribe(self.membership.id);
        }
    }
}

impl fmt::Debug for EventSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSubscription")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The subscribers of one Locker.
pub(crate) type EventHub = Hub<LockEvent, ()>;

pub(crate) fn subscribe(hub: &Arc<EventHub>) -> EventSubscription {
    let (id, inbox) = hub.subscribe(());
    EventSubscription {
        membership: Membership {
            id,
            inbox,
            hub: Arc::downgrade(hub),
        },
    }
}
