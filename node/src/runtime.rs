//! Futures become Promises on napi's tokio runtime (off the JS thread), with panics caught;
//! and the cancellation handle an `AbortSignal` drives.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::FutureExt;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use tokio::sync::Notify;

use crate::error::{aborted, panic_to_js};

/// Runs `fut` on napi's tokio runtime and returns a Promise of its result. A panic inside
/// rejects the Promise with code INTERNAL.
pub(crate) fn promise<T, F>(env: &Env, fut: F) -> Result<AsyncBlock<T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let guarded = async move {
        match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(result) => result,
            Err(payload) => Err(panic_to_js(payload)),
        }
    };
    AsyncBlockBuilder::new(guarded).build(env)
}

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    notify: Notify,
}

/// Cancels one operation: `index.js` makes one per call that has an `AbortSignal` and calls
/// `cancel()` from the signal's `abort` event. The operation's future is then dropped on the
/// runtime, which the core's cancellation guards make leave nothing behind.
#[napi]
#[derive(Clone, Default)]
pub struct CancelHandle {
    state: Arc<CancelState>,
}

#[napi]
impl CancelHandle {
    #[napi(constructor)]
    pub fn new() -> Self {
        CancelHandle::default()
    }

    #[napi]
    pub fn cancel(&self) -> Result<()> {
        crate::error::guard(|| {
            self.state.cancelled.store(true, Ordering::Release);
            self.state.notify.notify_waiters();
            Ok(())
        })
    }
}

impl CancelHandle {
    /// Completes once `cancel()` was called (at once if it already was).
    async fn cancelled(&self) {
        loop {
            let notified = self.state.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.cancelled.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// Runs `fut` until it completes or `cancel` fires; on cancellation `fut` is dropped (here, on
/// the runtime) and the result is an `ABORTED` error.
pub(crate) async fn cancellable<T>(
    cancel: Option<CancelHandle>,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match cancel {
        None => fut.await,
        Some(cancel) => {
            tokio::select! {
                // Cancellation first: an acquire that completes at the same moment is dropped,
                // and a dropped Lease releases in the background.
                biased;
                _ = cancel.cancelled() => Err(aborted()),
                result = fut => result,
            }
        }
    }
}
