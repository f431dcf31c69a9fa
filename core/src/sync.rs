//! Locking the core's own mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
///
/// A mutex is poisoned when a thread panicked while holding it: perhaps a binding's callback or
/// a host thread that the core does not control. A lock library must keep working after such a
/// panic elsewhere: if its own bookkeeping (the held leases, the watchdog's deadlines, the lost
/// signal) became unusable, every later acquire, renewal and release in the process would fail
/// or panic, and leases could be neither renewed nor released. Every critical section in the
/// core leaves its data valid at each step, so the data behind a poisoned mutex is still sound
/// and the poison flag carries no information worth stopping for.
pub(crate) fn unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
