//! Which kind of thread polls a future, as a backend sees it: a runtime worker (the default),
//! a blocking caller's own thread ([`crate::blocking`]), or a host event loop's thread
//! ([`crate::event_loop`], Node's). The Redis backend's caller-driven connections read it to
//! do a round trip there instead of on the runtime. A module of its own, below the APIs and the
//! backends, so the backends need nothing of either API.

use std::cell::Cell;
use std::time::Instant;

/// The kind of thread a future is polled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A runtime worker, or any thread not marked: it must not block, and round trips go on
    /// the runtime's connections.
    Runtime,
    /// The thread of a blocking call: it may block in a socket read until the reply.
    Blocking,
    /// The thread of a host event loop: it must never block, but may ask the loop to poll the
    /// future again once a socket is readable ([`wait_readable`]).
    EventLoop,
}

/// A socket a future polled on an event loop waits for, and until when: the loop polls it
/// again once the socket is readable or the deadline has passed, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopWait {
    /// The socket's descriptor.
    #[cfg(unix)]
    pub fd: std::os::fd::RawFd,
    pub deadline: Instant,
}

thread_local! {
    static CALLER: Cell<Caller> = const { Cell::new(Caller::Runtime) };
    /// What the future being polled on an event loop asked the loop to watch.
    static LOOP_WAIT: Cell<Option<LoopWait>> = const { Cell::new(None) };
}

/// The kind of thread the future being polled runs on.
pub(crate) fn caller() -> Caller {
    CALLER.with(Cell::get)
}

/// Asks the event loop polling this future to poll it again once `fd` is readable or at
/// `deadline` (only meaningful on [`Caller::EventLoop`]; the future then returns pending).
#[cfg(unix)]
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, deadline: Instant) {
    LOOP_WAIT.with(|w| w.set(Some(LoopWait { fd, deadline })));
}

/// Marks this thread as `kind` until dropped (also when a poll panics), and clears a wait
/// left by an earlier poll.
pub(crate) struct CallerThread {
    was: Caller,
}

impl CallerThread {
    pub(crate) fn enter(kind: Caller) -> Self {
        LOOP_WAIT.with(|w| w.set(None));
        CallerThread {
            was: CALLER.with(|c| c.replace(kind)),
        }
    }

    /// The socket wait the poll under this mark asked for, if any.
    pub(crate) fn loop_wait(&self) -> Option<LoopWait> {
        LOOP_WAIT.with(Cell::take)
    }
}

impl Drop for CallerThread {
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.was));
    }
}
