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

/// Runs `futures` concurrently in the caller's task (none is spawned) and returns their outputs
/// in the order given, once all are done.
pub(crate) async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
