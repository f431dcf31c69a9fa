//! The one tokio runtime of this process, and the two ways Python waits on it.
//!
//! - Blocking calls first poll the core future on the caller's own thread, with the GIL
//!   released (`py.detach`): there an uncontended acquire or a release on one Redis instance
//!   does its round trip on a caller-driven connection and answers without waking any other
//!   thread (`fencelock::blocking::first_poll_on_caller`), as redis-py's own calls do. A future
//!   that has to wait (a lock held by another, a backend without caller-driven I/O) continues
//!   on the runtime, and the caller waits for its answer on a plain channel, in slices of at
//!   most [`SLICE`]; between slices `py.check_signals()` lets Ctrl-C (KeyboardInterrupt)
//!   through. On an interrupt the task is either aborted (acquire: cancel-safe in the core) or
//!   left to finish in the background (release, close: so nothing is left behind). A round
//!   trip on the caller's thread is not interrupted: it ends with its reply or with the
//!   operation timeout.
//! - Awaitable calls run the future on this runtime and complete an asyncio future on the
//!   caller's event loop (`awaitable.rs`): the loop is never blocked.
//!
//! The runtime is made lazily and is pid-checked on every use: threads do not survive `fork()`,
//! so a child process builds its own runtime the first time it needs one. The parent's runtime
//! is leaked in the child, never dropped (dropping would wait for worker threads that do not
//! exist there).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use fencelock::blocking::FirstPoll;
use futures_util::FutureExt;
use pyo3::prelude::*;
use tokio::runtime::{Handle, Runtime};

use crate::error::{blocking_in_event_loop, panic_to_py, to_py};

/// Set (to anything but `0` or empty) to let blocking calls run inside a running asyncio event
/// loop, stalling it: for Jupyter, whose cells run inside one.
const ALLOW_BLOCKING_IN_EVENT_LOOP: &str = "FENCELOCK_ALLOW_BLOCKING_IN_EVENT_LOOP";

static GET_RUNNING_LOOP: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Refuses a blocking call that waits for a lock's holders on a thread whose asyncio event loop
/// is running: it would stall every task of that loop for as long as it waited (a
/// `with locker.lock(...)` inside `async def`), and a holder in the same loop could never
/// release. The calls of one round trip (try_acquire, inspect, release, extend, close) are let
/// through: they block the loop for that round trip, as a synchronous driver's call does.
pub(crate) fn refuse_waiting_inside_event_loop(py: Python<'_>) -> PyResult<()> {
    let get_running_loop = GET_RUNNING_LOOP.import(py, "asyncio", "_get_running_loop")?;
    if get_running_loop.call0()?.is_none() {
        return Ok(());
    }
    if std::env::var(ALLOW_BLOCKING_IN_EVENT_LOOP).is_ok_and(|v| !v.is_empty() && v != "0") {
        return Ok(());
    }
    Err(blocking_in_event_loop(
        py,
        &format!(
            "a blocking fencelock call that waits for the lock (`with locker.lock(...)`, \
             acquire(), acquire_many(), ...) was made inside a running asyncio event loop, which \
             it would stall while it waited, and a holder in that loop could never release: use \
             the async form there (`async with locker.lock(...)`, `await \
             locker.acquire_async(...)`). Set {ALLOW_BLOCKING_IN_EVENT_LOOP}=1 to allow it \
             (Jupyter)"
        ),
    ))
}

/// The longest a blocking call goes without checking for Ctrl-C.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// The runtime and the process that made it.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// The runtime of this process, made on first use (and again in a child made by `fork()`).
pub(crate) fn runtime() -> fencelock::Result<&'static Runtime> {
    let pid = fencelock::runtime::process_id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *slot
        && owner == pid
    {
        return Ok(rt);
    }
    let rt = fencelock::runtime::host_runtime("fencelock-rt")?;
    // Leaked on purpose: it lives as long as the process, and a parent's runtime inherited
    // across fork() must never be dropped in the child.
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// What a blocking call does with its future when Ctrl-C interrupts it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnInterrupt {
    /// Drop it: for acquire (cancel-safe in the core) and reads.
    Cancel,
    /// Let it finish on the runtime: for release and close, so nothing is left behind.
    FinishInBackground,
}

/// Runs `fut` to completion on this process's runtime from the calling Python thread, with the
/// GIL released. The outer `PyResult` carries a KeyboardInterrupt (or another exception raised
/// by a signal handler) and caught panics; the inner result is the core's, so callers can act on
/// its code before it becomes a Python exception.
pub(crate) fn block<T, F>(
    py: Python<'_>,
    fut: F,
    on_interrupt: OnInterrupt,
) -> PyResult<fencelock::Result<T>>
where
    F: Future<Output = fencelock::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime().map_err(to_py)?;
    if Handle::try_current().is_ok() {
        return Ok(Err(fencelock::Error::internal(
            "a blocking fencelock call was made from a thread of fencelock's async runtime; use the async API there",
        )));
    }
    let handle = rt.handle().clone();
    let fut = fencelock::spans::in_caller_context(crate::spans::caller_context(py), fut);
    let first = crate::exit::detach(py, move || {
        fencelock::blocking::first_poll_on_caller(&handle, fut)
    });
    let fut = match first {
        FirstPoll::Ready(result) => return Ok(result),
        FirstPoll::Pending(fut) => fut,
        FirstPoll::Panicked(payload) => return Err(panic_to_py(payload)),
    };
    let (answer, answered) = mpsc::sync_channel(1);
    let task = rt.spawn(async move {
        let outcome = AssertUnwindSafe(fut).catch_unwind().await;
        let _ = answer.send(outcome);
    });
    let mut answered = answered;
    let slice = crate::exit::wake_every(SLICE);
    loop {
        // The receiver is moved in and back out: `detach` takes only what may cross threads.
        let (reply, receiver) =
            crate::exit::detach(py, move || (answered.recv_timeout(slice), answered));
        answered = receiver;
        match reply {
            Ok(Ok(result)) => return Ok(result),
            Ok(Err(payload)) => return Err(panic_to_py(payload)),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    match on_interrupt {
                        // Aborting drops the future at its next await, on the runtime.
                        OnInterrupt::Cancel => task.abort(),
                        OnInterrupt::FinishInBackground => {}
                    }
                    return Err(interrupt);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Ok(Err(fencelock::Error::internal(
                    "the operation was dropped by fencelock's runtime before it answered",
                )));
            }
        }
    }
}

/// [`block`] with the core error turned into its Python exception.
pub(crate) fn wait<T, F>(py: Python<'_>, fut: F, on_interrupt: OnInterrupt) -> PyResult<T>
where
    F: Future<Output = fencelock::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    block(py, fut, on_interrupt)?.map_err(to_py)
}
