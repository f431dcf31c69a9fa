//! The blocking form of the API, for bindings and programs without an async runtime of
//! their own. Each call runs its future to completion on the Locker's runtime.
//!
//! Caller-driven I/O: while a blocking call polls its future on the caller's own thread, the
//! thread may block, so a backend can do a round trip there with plain blocking socket calls,
//! and the call answers without waking any other thread. The Redis backend does so for the
//! acquire, release and extend of every kind on one instance (see its `direct` module); every
//! other step falls back to the runtime's connections, and a future that has to
//! wait for them continues on the runtime ([`first_poll_on_caller`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::caller::CallerThread;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceToken, Statement};
use crate::lease::Lease;
use crate::locker::Locker;
use crate::options::LockOptions;

/// What the first poll of a blocking call's future came to.
pub enum FirstPoll<F: Future> {
    /// It answered on the caller's thread.
    Ready(F::Output),
    /// It waits for something: continue it on the runtime (spawn it there and wait for its
    /// answer). Its wake-ups were not registered anywhere that matters: the runtime's first
    /// poll registers them again and sees whatever happened meanwhile.
    Pending(Pin<Box<F>>),
}

/// Polls `fut` once on this thread, in `runtime`'s context, as a blocking caller (whose thread
/// a backend may block on a socket): an uncontended acquire or a release on one Redis instance answers
/// here without waking a runtime thread. A panic inside unwinds to the caller.
pub fn first_poll_on_caller<F: Future>(runtime: &Handle, fut: F) -> FirstPoll<F> {
    let mut fut = Box::pin(fut);
    let _context = runtime.enter();
    let _caller = CallerThread::enter();
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => FirstPoll::Ready(output),
        Poll::Pending => FirstPoll::Pending(fut),
    }
}

/// Runs `fut` on `runtime`, blocking this thread, which drives its round trips itself where a
/// backend can. Called from a thread of an async runtime it would
/// deadlock or panic, so it refuses with INTERNAL instead.
pub fn block_on<T>(runtime: &Handle, fut: impl Future<Output = Result<T>>) -> Result<T> {
    if Handle::try_current().is_ok() {
        return Err(Error::internal(
            "a blocking fencelock call was made from inside an async runtime; use the async API there",
        ));
    }
    let _caller = CallerThread::enter();
    runtime.block_on(fut)
}

impl Locker {
    pub fn acquire_blocking(&self, name: &str, options: &LockOptions) -> Result<Lease> {
        block_on(self.runtime(), self.acquire(name, options))
    }

    pub fn try_acquire_blocking(&self, name: &str, options: &LockOptions) -> Result<Option<Lease>> {
        block_on(self.runtime(), self.try_acquire(name, options))
    }

    pub fn close_blocking(&self) -> Result<()> {
        block_on(self.runtime(), async {
            self.close().await;
            Ok(())
        })
    }
}

impl Lease {
    pub fn release_blocking(&self, runtime: &Handle) -> Result<()> {
        block_on(runtime, self.release())
    }

    pub fn extend_blocking(&self, runtime: &Handle, ttl: Option<Duration>) -> Result<()> {
        block_on(runtime, self.extend(ttl))
    }
}

impl Fence {
    pub fn fenced_execute_blocking(
        &self,
        runtime: &Handle,
        token: impl Into<FenceToken>,
        statements: &[Statement],
    ) -> Result<Vec<u64>> {
        block_on(runtime, self.fenced_execute(token, statements))
    }
}
