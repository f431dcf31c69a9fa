//! The lost signal: set once, when a lease is lost, and observable from any thread or task.
//!
//! It is a plain flag with three ways to wait on it (a blocking wait with a timeout, an
//! `await`, and callbacks), so bindings can deliver it in their own idiom: a Python Event-like
//! object, a Node `AbortSignal`, a JVM listener. Setting it needs no runtime and no lock held
//! by anybody else, which is why the deadline watchdog can fire it from its own thread.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::sync::unpoisoned;

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The client deadline passed without a confirmed renewal.
    Expired,
    /// A renewal or release found the lock was not ours any more.
    TakenOver,
    /// The backend session ended (ZooKeeper).
    SessionExpired,
}

impl LossReason {
    pub fn describe(self) -> &'static str {
        match self {
            LossReason::Expired => {
                "lease expired: no renewal was confirmed before the client deadline"
            }
            LossReason::TakenOver => {
                "the lock is no longer ours: it expired on the server or was released or taken over"
            }
            LossReason::SessionExpired => "the backend session expired",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Callback = Box<dyn FnOnce(LossReason) + Send>;

struct Inner {
    set: AtomicBool,
    reason: Mutex<Option<LossReason>>,
    condvar: Condvar,
    notify: Notify,
    callbacks: Mutex<Vec<Callback>>,
}

/// A one-shot signal, set when its lease is lost. Clones observe the same signal.
#[derive(Clone)]
pub struct LostSignal(Arc<Inner>);

impl Default for LostSignal {
    fn default() -> Self {
        LostSignal(Arc::new(Inner {
            set: AtomicBool::new(false),
            reason: Mutex::new(None),
            condvar: Condvar::new(),
            notify: Notify::new(),
            callbacks: Mutex::new(Vec::new()),
        }))
    }
}

impl LostSignal {
    pub fn is_set(&self) -> bool {
        self.0.set.load(Ordering::Acquire)
    }

    pub fn reason(&self) -> Option<LossReason> {
        *unpoisoned(&self.0.reason)
    }

    /// Sets the signal; only the first call has an effect. Returns whether this call set it.
    pub(crate) fn fire(&self, reason: LossReason) -> bool {
        {
            let mut slot = unpoisoned(&self.0.reason);
            if slot.is_some() {
                return false;
            }
            *slot = Some(reason);
            self.0.set.store(true, Ordering::Release);
        }
        self.0.condvar.notify_all();
        self.0.notify.notify_waiters();
        let callbacks = std::mem::take(&mut *unpoisoned(&self.0.callbacks));
        for callback in callbacks {
            // A binding's callback must not take the watchdog thread down with it.
            let _ = catch_unwind(AssertUnwindSafe(|| callback(reason)));
        }
        true
    }

    /// Blocks the calling thread until the signal is set or `timeout` passes; returns
    /// whether it is set. `None` waits forever.
    pub fn wait_blocking(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut guard = unpoisoned(&self.0.reason);
        while guard.is_none() {
            match deadline {
                None => {
                    guard = self
                        .0
                        .condvar
                        .wait(guard)
                        .unwrap_or_else(|e| e.into_inner())
                }
                Some(deadline) => {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    guard = self
                        .0
                        .condvar
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        true
    }

    /// Completes when the signal is set.
    pub async fn wait(&self) -> LossReason {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(reason) = self.reason() {
                return reason;
            }
            notified.await;
        }
    }

    /// Runs `callback` once when the signal is set: at once (on this thread) if it already
    /// is, else on the thread that sets it. Callbacks must be quick and must not block.
    pub fn on_lost(&self, callback: impl FnOnce(LossReason) + Send + 'static) {
        let mut callbacks = unpoisoned(&self.0.callbacks);
        if let Some(reason) = self.reason() {
            drop(callbacks);
            let _ = catch_unwind(AssertUnwindSafe(|| callback(reason)));
            return;
        }
        callbacks.push(Box::new(callback));
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("reason", &self.reason())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_and_wakes_every_kind_of_waiter() {
        let signal = LostSignal::default();
        assert!(!signal.is_set());
        assert!(!signal.wait_blocking(Some(Duration::from_millis(10))));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        signal.on_lost(move |r| unpoisoned(&s).push(r));
        let waiter = {
            let signal = signal.clone();
            std::thread::spawn(move || signal.wait_blocking(None))
        };
        assert!(signal.fire(LossReason::TakenOver));
        assert!(!signal.fire(LossReason::Expired));
        assert!(waiter.join().unwrap());
        assert_eq!(*unpoisoned(&seen), vec![LossReason::TakenOver]);
        assert_eq!(signal.reason(), Some(LossReason::TakenOver));
        // A callback added after the fact runs at once.
        let late = Arc::new(AtomicBool::new(false));
        let l = late.clone();
        signal.on_lost(move |_| l.store(true, Ordering::SeqCst));
        assert!(late.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn async_wait_sees_a_fire_from_another_thread() {
        let signal = LostSignal::default();
        let s = signal.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s.fire(LossReason::Expired);
        });
        let reason = tokio::time::timeout(Duration::from_secs(5), signal.wait())
            .await
            .unwrap();
        assert_eq!(reason, LossReason::Expired);
    }
}
