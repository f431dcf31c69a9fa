//! The mark of a blocking caller's thread: set while a blocking call polls its future on the
//! caller's own thread ([`crate::blocking`]), read by a backend that can do a round trip there
//! with blocking socket calls (the Redis backend's caller-driven connections). A module of its
//! own, below both, so the backends need nothing of the blocking API.

use std::cell::Cell;

thread_local! {
    /// Set while a blocking call polls its future on the caller's own thread.
    static ON_CALLER: Cell<bool> = const { Cell::new(false) };
}

/// Whether the future being polled runs on the thread of a blocking call, which may block on
/// a socket (never a runtime worker's: blocking one would stall every task on it).
pub(crate) fn on_caller_thread() -> bool {
    ON_CALLER.with(Cell::get)
}

/// Marks this thread as a blocking caller's until dropped (also when a poll panics).
pub(crate) struct CallerThread {
    was: bool,
}

impl CallerThread {
    pub(crate) fn enter() -> Self {
        CallerThread {
            was: ON_CALLER.with(|on| on.replace(true)),
        }
    }
}

impl Drop for CallerThread {
    fn drop(&mut self) {
        ON_CALLER.with(|on| on.set(self.was));
    }
}
