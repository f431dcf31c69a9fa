//! The deadline watchdog: one OS thread per process that makes leases lost at their client
//! deadline.
//!
//! It is deliberately independent of the renewal tasks and of any async runtime: a renewal
//! task that is stuck, a runtime that is shutting down, or a host thread that never yields
//! (a Python thread holding the GIL, a busy Node event loop) cannot delay or hide a loss.
//! The thread sleeps on a condition variable, but never longer than a quarter second at a
//! time, and compares against CLOCK_BOOTTIME when it wakes, so a suspended machine fires
//! overdue deadlines right after it resumes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::clock::BootInstant;
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

/// How many entries beyond the current ones the heap may hold before it is pruned. Released
/// leases and the deadlines that renewals replaced stay in the heap until they come due (an
/// hour away with a one-hour ttl), each keeping its lease's allocation alive through the weak
/// reference; pruning when this many have piled up bounds the heap at the live leases plus
/// this slack, at an amortised constant cost per entry.
const PRUNE_SLACK: usize = 1024;

struct Entry {
    deadline: BootInstant,
    lease: Weak<dyn Watched>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.deadline.cmp(&other.deadline)
    }
}

struct Watchdog {
    heap: Mutex<Heap>,
    wake: Condvar,
}

struct Heap {
    entries: BinaryHeap<Reverse<Entry>>,
    /// The size at which the next push prunes first.
    prune_at: usize,
}

impl Heap {
    fn push(&mut self, entry: Entry) {
        if self.entries.len() >= self.prune_at {
            // try_lock inside: a lease busy elsewhere keeps its entry, so this never waits
            // on a lease's state while holding the heap.
            self.entries.retain(|Reverse(e)| {
                e.lease
                    .upgrade()
                    .is_some_and(|l| l.is_watched_at(e.deadline))
            });
            self.prune_at = self.entries.len() + PRUNE_SLACK;
        }
        self.entries.push(Reverse(entry));
    }
}

/// The watchdog of this process. A child made by `fork()` has no watchdog thread (threads
/// do not survive fork), so the pid is checked and a new one started there.
static WATCHDOG: Mutex<Option<(u32, Arc<Watchdog>)>> = Mutex::new(None);

fn watchdog() -> Arc<Watchdog> {
    let mut slot = unpoisoned(&WATCHDOG);
    let pid = std::process::id();
    if let Some((owner_pid, dog)) = slot.as_ref()
        && *owner_pid == pid
    {
        return dog.clone();
    }
    let dog = Arc::new(Watchdog {
        heap: Mutex::new(Heap {
            entries: BinaryHeap::new(),
            prune_at: PRUNE_SLACK,
        }),
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
        let earliest = heap
            .entries
            .peek()
            .is_none_or(|Reverse(top)| deadline < top.deadline);
        let lease: Weak<dyn Watched> = Arc::downgrade(lease) as Weak<W>;
        heap.push(Entry { deadline, lease });
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
            while let Some(Reverse(top)) = heap.entries.peek() {
                if top.deadline > now {
                    break;
                }
                if let Some(Reverse(entry)) = heap.entries.pop() {
                    due.push(entry.lease);
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
                .entries
                .peek()
                .map(|Reverse(top)| now.until(top.deadline).min(MAX_SLEEP))
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
    unpoisoned(&watchdog().heap).entries.len()
}
