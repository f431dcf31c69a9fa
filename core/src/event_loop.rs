//! Futures polled on a host's event loop thread (Node's), for a binding that runs its own
//! small executor there instead of handing each call to the runtime.
//!
//! Handing a call to a runtime worker and its answer back to the loop costs two thread
//! wake-ups per call, more than a round trip to Redis on loopback (bench/RESULTS.md,
//! "Caller-driven I/O"). Polled on the loop's thread instead, a lock script on one Redis
//! instance goes out on a caller-driven connection (the Redis backend's `direct` module) in
//! non-blocking mode: the future writes the request, and when the reply is not there yet it
//! returns pending with the socket to watch ([`LoopPoll::Pending`] with a [`LoopWait`]); the
//! binding asks its loop to poll it again once the socket is readable, so the reply is read on
//! the loop's thread as the host's own clients read theirs. Anything else the future waits for
//! (a lock held by another, a backend without caller-driven I/O) wakes it through the `Waker`
//! the binding passed, from the runtime's threads.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

pub use crate::caller::LoopWait;
use crate::caller::{Caller, CallerThread};

/// What one poll of a future on an event loop came to.
pub enum LoopPoll<T> {
    Ready(T),
    /// Not yet: poll again when `cx`'s waker is woken, and also, with a [`LoopWait`], once its
    /// socket is readable or its deadline has passed (the loop's own poller watches the socket,
    /// which wakes nobody).
    Pending(Option<LoopWait>),
    /// It panicked (a bug): the payload, for the binding to turn into its host's error; the
    /// future must not be polled again.
    Panicked(Box<dyn Any + Send>),
}

/// Polls `fut` once on this (the event loop's) thread, in `runtime`'s context. The thread is
/// never blocked: a round trip that has to wait returns pending with the socket to watch.
pub fn poll_on_event_loop<F: Future + ?Sized>(
    runtime: &Handle,
    fut: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> LoopPoll<F::Output> {
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _context = runtime.enter();
        let caller = CallerThread::enter(Caller::EventLoop);
        let poll = fut.poll(cx);
        (poll, caller.loop_wait())
    }));
    match polled {
        Ok((Poll::Ready(output), _)) => LoopPoll::Ready(output),
        Ok((Poll::Pending, wait)) => LoopPoll::Pending(wait),
        Err(payload) => LoopPoll::Panicked(payload),
    }
}
