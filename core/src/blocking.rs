//! The blocking form of the API, for bindings and programs without an async runtime of
//! their own. Each call runs its future to completion on the Locker's runtime.
//!
//! Caller-driven I/O: while a blocking call polls its future on the caller's own thread, the
//! thread may block, so a backend can do a round trip there with plain blocking socket calls,
//! and the call answers without waking any other thread. The Redis backend does so for the
//! acquire, release and extend of every kind on one instance (see its `direct` module); every
//! other step falls back to the runtime's connections, and a future that has to
//! wait for them continues on the runtime ([`first_poll_on_caller`]).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::caller::{Caller, CallerThread};
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
    /// It panicked (a bug): the payload, for the binding to turn into its host's error, since
    /// a panic must not unwind into a host language's frames. The future is dropped.
    Panicked(Box<dyn Any + Send>),
}

/// Polls `fut` once on this thread, in `runtime`'s context, as a blocking caller (whose thread
/// a backend may block on a socket): an uncontended acquire or a release on one Redis instance
/// answers here without waking a runtime thread. A panic inside is caught and returned.
pub fn first_poll_on_caller<F: Future>(runtime: &Handle, fut: F) -> FirstPoll<F> {
    let mut fut = Box::pin(fut);
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _context = runtime.enter();
        let _caller = CallerThread::enter(Caller::Blocking);
        fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }));
    match polled {
        Ok(Poll::Ready(output)) => FirstPoll::Ready(output),
        Ok(Poll::Pending) => FirstPoll::Pending(fut),
        Err(payload) => FirstPoll::Panicked(payload),
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
    let _caller = CallerThread::enter(Caller::Blocking);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_first_poll_answers_waits_or_returns_its_panic() {
        let rt = runtime();
        let ready = first_poll_on_caller(rt.handle(), async {
            crate::caller::caller() == Caller::Blocking
        });
        assert!(matches!(ready, FirstPoll::Ready(true)));
        assert!(
            !(crate::caller::caller() == Caller::Blocking),
            "the mark outlived the poll"
        );
        let waiting = first_poll_on_caller(rt.handle(), async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            7
        });
        let FirstPoll::Pending(rest) = waiting else {
            panic!("a sleeping future answered on its first poll");
        };
        assert_eq!(rt.block_on(rest), 7);
        let panicked = first_poll_on_caller(rt.handle(), async {
            if crate::caller::caller() == Caller::Blocking {
                panic!("a bug");
            }
        });
        let FirstPoll::Panicked(payload) = panicked else {
            panic!("the panic was not caught");
        };
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"a bug"));
        assert!(
            !(crate::caller::caller() == Caller::Blocking),
            "the mark outlived the panic"
        );
    }
}
