//! The deadline watchdog: one OS thread per process that makes leases lost at their client
//! deadline.
//!
//! It is deliberately independent of the renewal tasks and of any async runtime: a renewal
//! task that is stuck, a runtime that is shutting down, or a host thread that never yields
//! (a Python thread holding the GIL, a busy Node event loop) cannot delay or hide a loss.
//! The thread sleeps on a condition variable, but never longer than a quarter second at a
//! time, and compares against CLOCK_BOOTTIME when it wakes, so a suspended machine fires
//! overdue deadlines right after it resumes.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::clock::BootInstant;
use crate::due::{Due, DueHeap};
use crate::sync::unpoisoned;

/// What the watchdog needs of a lease. A trait, so the watchdog sits below the lease in the
/// module graph: the lease registers itself, the watchdog knows nothing else of it.
pub(crate) trait Watched: Send + Sync {
    /// Whether `deadline` is still the lease's current one (renewals replace deadlines; the
    /// entries of replaced ones are pruned). True when that cannot be told without waiting.
    fn is_watched_at(&self, deadline: BootInstant) -> bool;
    /// Called when a registered deadline comes due: the lease is lost if it has passed.
    fn check_deadline(&self);
}

const MAX_SLEEP: Duration = Duration::from_millis(250);

struct Watchdog {
    /// Deadlines of leases; released leases and the deadlines renewals replaced are pruned
    /// (see [`crate::due`]).
    heap: Mutex<DueHeap<dyn Watched>>,
    wake: Condvar,
}

/// Whether `entry` is its lease's current deadline. try_lock inside: a lease busy elsewhere
/// keeps its entry, so pruning never waits on a lease's state while holding the heap.
fn is_current(entry: &Due<dyn Watched>) -> bool {
    entry
        .item
        .upgrade()
        .is_some_and(|lease| lease.is_watched_at(entry.at))
}

/// The watchdog of this process. A child made by `fork()` has no watchdog thread (threads
/// do not survive fork), so the pid is checked and a new one started there.
static WATCHDOG: Mutex<Option<(u32, Arc<Watchdog>)>> = Mutex::new(None);

fn watchdog() -> Arc<Watchdog> {
    let mut slot = unpoisoned(&WATCHDOG);
    let pid = crate::runtime::process_id();
    if let Some((owner_pid, dog)) = slot.as_ref()
        && *owner_pid == pid
    {
        return dog.clone();
    }
    let dog = Arc::new(Watchdog {
        heap: Mutex::new(DueHeap::default()),
        wake: Condvar::new(),
    });
    let runner = dog.clone();
    let spawned = std::thread::Builder::new()
        .name("fencelock-deadline".into())
        .spawn(move || runner.run());
    if let Err(e) = spawned {
        // Without the thread, is_lost() still computes the deadline on every read; only the
        // push notification is missing. Say so loudly rather than failing the acquire.
        flog!(error, "cannot start the deadline watchdog thread: {e}");
    }
    *slot = Some((pid, dog.clone()));
    dog
}

/// Asks the watchdog to check `lease` at `deadline`. Each renewal registers its new
/// deadline; stale entries are skipped when they come due.
pub(crate) fn watch<W: Watched + 'static>(lease: &Arc<W>, deadline: BootInstant) {
    let dog = watchdog();
    let earliest = {
        let mut heap = unpoisoned(&dog.heap);
        let earliest = heap.peek().is_none_or(|top| deadline < top.at);
        let lease: Weak<dyn Watched> = Arc::downgrade(lease) as Weak<W>;
        heap.push(deadline, lease, is_current);
        earliest
    };
    // The thread already wakes in time for anything later than its current first deadline.
    if earliest {
        dog.wake.notify_one();
    }
}

impl Watchdog {
    fn run(&self) {
        let mut heap = unpoisoned(&self.heap);
        loop {
            let now = BootInstant::now();
            let mut due = Vec::new();
            while heap.peek().is_some_and(|top| top.at <= now) {
                if let Some(entry) = heap.pop() {
                    due.push(entry.item);
                }
            }
            if !due.is_empty() {
                drop(heap);
                for lease in due.into_iter().filter_map(|w| w.upgrade()) {
                    // One lease's observers (a panicking metrics sink or log subscriber) must
                    // not end this thread: every lease of the process depends on it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        lease.check_deadline()
                    }));
                }
                heap = unpoisoned(&self.heap);
                continue;
            }
            let sleep = heap
                .peek()
                .map(|top| now.until(top.at).min(MAX_SLEEP))
                .unwrap_or(MAX_SLEEP);
            heap = self
                .wake
                .wait_timeout(heap, sleep)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// How many deadlines the watchdog of this process holds (for tests of its bound).
pub(crate) fn entries() -> usize {
    unpoisoned(&watchdog().heap).len()
}
