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

use pyo3::prelude::*;

/// The thread that ran fencelock's `atexit` hook: the one shutting the interpreter down.
static EXITING_ON: OnceLock<ThreadId> = OnceLock::new();

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

/// Registers the `atexit` hook.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(_mark_interpreter_exiting, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
