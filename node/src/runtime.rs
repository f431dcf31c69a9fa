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

use crate::error::{Result, aborted, from_napi, panic_to_js, rejection};

/// A bad `FENCELOCK_RUNTIME_THREADS`, kept to be reported by `connect` and `Fence.open` (module
/// init cannot throw); napi's default runtime runs meanwhile.
static RUNTIME_ERROR: std::sync::OnceLock<fencelock::Error> = std::sync::OnceLock::new();

/// Gives napi the core's host runtime (one worker unless `FENCELOCK_RUNTIME_THREADS` says
/// otherwise), as the Python and JVM packages use: with more workers, each wake-up lets tokio
/// wake a second thread to steal the task.
#[napi_derive::module_init]
fn init_runtime() {
    match fencelock::runtime::host_runtime("fencelock-rt") {
        Ok(rt) => {
            let _ = crate::event_loop::RUNTIME.set(rt.handle().clone());
            napi::bindgen_prelude::create_custom_tokio_runtime(rt);
        }
        Err(e) => {
            let _ = RUNTIME_ERROR.set(e);
        }
    }
}

/// INVALID_ARGUMENT when `FENCELOCK_RUNTIME_THREADS` was refused at load.
pub(crate) fn runtime_setting() -> std::result::Result<(), fencelock::Error> {
    RUNTIME_ERROR.get().map_or(Ok(()), |e| Err(e.clone()))
}

/// Runs `fut` on napi's tokio runtime and returns a Promise of its result. A panic inside
/// rejects the Promise with code INTERNAL.
pub(crate) fn promise<T, F>(env: &Env, fut: F) -> Result<AsyncBlock<T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let fut = fencelock::spans::in_caller_context(fencelock::spans::numbered::take(), fut);
    // The outcome reaches the JS thread as a value, failure included: napi would reject with
    // its own status as the code (see error.rs).
    let settled = async move {
        Ok(match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(result) => result,
            Err(payload) => Err(panic_to_js(payload)),
        })
    };
    AsyncBlockBuilder::build_with_map(env, settled, |env, outcome: Result<T>| {
        outcome.map_err(|err| rejection(env, err))
    })
    .map_err(from_napi)
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
