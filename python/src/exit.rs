//! What fencelock's threads do while the interpreter shuts down.
//!
//! CPython before 3.14 ends a thread that takes the GIL back during finalization (a daemon
//! thread returning from a wait, a native thread calling into Python) with `pthread_exit`. Its
//! forced unwinding runs through the Rust frames of that thread, which Rust does not allow for
//! frames with destructors, and which crashes the process (SIGSEGV) in the release builds, whose
//! unwinder is not libgcc's: a daemon thread waiting in `locker.acquire()` when the program
//! ended was enough. So an `atexit` hook, registered when the module loads, marks the start of
//! shutdown, and from then on a fencelock wait that ends, or a native thread about to call into
//! Python, parks its thread for good instead of taking the GIL back; the process exits around
//! it. The thread running the shutdown itself (an `atexit` handler that closes a Locker) is
//! never parked.

use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::Duration;

use pyo3::prelude::*;

/// The thread that ran fencelock's `atexit` hook: the one shutting the interpreter down.
static EXITING_ON: OnceLock<ThreadId> = OnceLock::new();

/// Python's main thread (`threading.main_thread().ident`), read when the module loads.
static MAIN_THREAD: OnceLock<u64> = OnceLock::new();

/// How long a wait off the main thread goes before it wakes: there is no Ctrl-C to look for
/// there (Python runs signal handlers on the main thread only), so it wakes for its answer.
const OFF_MAIN_THREAD: Duration = Duration::from_secs(3600);

/// How long a wait on the calling thread may go before it wakes to look for Ctrl-C: `slice` on
/// the main thread, far longer on any other. Every wake takes the GIL back, and a thread that
/// takes it while the interpreter shuts down is ended under fencelock's frames (above): a daemon
/// thread waiting in fencelock that woke every slice could do so at any exit, one that waits
/// for its answer only when the answer comes then.
pub(crate) fn wake_every(slice: Duration) -> Duration {
    // SAFETY: PyThread_get_thread_ident only reads the calling thread's identity.
    let current = unsafe { pyo3::ffi::PyThread_get_thread_ident() } as u64;
    if MAIN_THREAD.get().is_none_or(|main| *main == current) {
        slice
    } else {
        OFF_MAIN_THREAD
    }
}

/// Parks the calling thread for good once the interpreter is shutting down, unless it is the
/// thread doing that.
fn park_if_exiting() {
    if let Some(exiting_on) = EXITING_ON.get()
        && *exiting_on != std::thread::current().id()
    {
        loop {
            std::thread::park();
        }
    }
}

/// `py.detach(f)`, for waits: a thread whose wait ends while the interpreter shuts down stays
/// parked instead of taking the GIL back.
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    py.detach(|| {
        park_if_exiting();
        let out = f();
        park_if_exiting();
        out
    })
}

/// `Python::attach(f)`. On one of fencelock's own threads (the runtime's workers, the metrics
/// thread), which never hold the GIL already, the thread parks instead once the interpreter
/// shuts down. A Python thread is never parked here: it may hold the GIL, which the shutdown
/// needs.
pub(crate) fn attach<T>(f: impl for<'py> FnOnce(Python<'py>) -> T) -> T {
    let own_thread = tokio::runtime::Handle::try_current().is_ok()
        || std::thread::current()
            .name()
            .is_some_and(|name| name.starts_with("fencelock"));
    if own_thread {
        park_if_exiting();
    }
    Python::attach(f)
}

#[pyfunction]
fn _mark_interpreter_exiting() {
    let _ = EXITING_ON.set(std::thread::current().id());
}

/// Registers the `atexit` hook, and notes which thread is the main one.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(_mark_interpreter_exiting, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    let main: u64 = m
        .py()
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    let _ = MAIN_THREAD.set(main);
    Ok(())
}
