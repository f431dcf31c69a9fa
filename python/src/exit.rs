//! What fencelock's threads do while the interpreter shuts down: none of them takes the GIL once
//! finalization has started.
//!
//! CPython before 3.14 ends a thread that takes the GIL during finalization with
//! `pthread_exit`. Its forced unwinding runs through the Rust frames of that thread, which Rust
//! does not allow for frames with destructors, and the process dies (SIGSEGV, or SIGABRT from
//! `PyGILState_Release`), in the release wheels always. So every path from fencelock into Python
//! goes through one gate, which the `atexit` hook registered when the module loads closes before
//! finalization starts (docs/design.md §9.4 lists the paths):
//!
//! - A thread that is not Python's (a runtime worker delivering an awaitable's answer, the span
//!   and metrics threads) takes a [`Pass`] before it takes the GIL ([`attach`]); once the gate
//!   is closed it gets none, and skips what it wanted to do in Python: the process is ending.
//! - A Python thread whose wait in fencelock ends takes a pass before it takes the GIL back
//!   ([`detach`]); once the gate is closed it parks for good, without the GIL.
//! - A Python thread holds its pass for as long as it runs fencelock code with the GIL
//!   ([`PythonCall`], made by `error::guard` around every exported function): the Rust frames
//!   below any Python code that fencelock calls are never on a thread that finalization ends.
//!   A call that starts once the gate is closed parks for good, releasing the GIL.
//!
//! Closing the gate waits (with the GIL released) until every pass is given back, so what was
//! already on its way into Python finishes first; only then does finalization start. The thread
//! running the shutdown itself (an `atexit` handler that closes a Locker) never needs a pass.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// The gate: the passes out in its low bits, and [`CLOSED`] once the interpreter exits.
static GATE: AtomicUsize = AtomicUsize::new(0);
const CLOSED: usize = 1 << (usize::BITS - 1);

/// How long closing the gate waits for the passes out. A pass is held for one short call into
/// Python (an answer handed to an event loop, a batch of spans) or one fencelock call with the
/// GIL; a host hook that blocks longer (a span exporter waiting on a dead collector) is let go
/// after this, and its thread may then meet finalization.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The thread that closed the gate: the one shutting the interpreter down.
static EXITING_ON: OnceLock<ThreadId> = OnceLock::new();

/// Python's main thread (`threading.main_thread().ident`), read when the module loads.
static MAIN_THREAD: OnceLock<u64> = OnceLock::new();

thread_local! {
    /// How many fencelock calls from Python are on this thread's stack.
    static CALL_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The pass this Python thread holds while it runs fencelock code with the GIL.
    static HELD: Cell<Option<Pass>> = const { Cell::new(None) };
}

/// Leave to take the GIL. Given back when dropped.
pub(crate) struct Pass {
    counted: bool,
}

impl Drop for Pass {
    fn drop(&mut self) {
        if self.counted {
            GATE.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn is_exiting_thread() -> bool {
    EXITING_ON
        .get()
        .is_some_and(|exiting| *exiting == std::thread::current().id())
}

/// A pass, or None once the gate is closed (except on the thread shutting down).
fn try_pass() -> Option<Pass> {
    if GATE.fetch_add(1, Ordering::SeqCst) & CLOSED == 0 {
        return Some(Pass { counted: true });
    }
    GATE.fetch_sub(1, Ordering::SeqCst);
    is_exiting_thread().then_some(Pass { counted: false })
}

/// A pass, or this thread parks for good (it must not hold the GIL).
fn pass_or_park() -> Pass {
    match try_pass() {
        Some(pass) => pass,
        None => loop {
            std::thread::park();
        },
    }
}

/// One fencelock call from Python on this thread, which holds the GIL: the outermost one takes
/// the thread's pass, and gives it back when it returns.
pub(crate) struct PythonCall(());

impl PythonCall {
    pub(crate) fn begin() -> PythonCall {
        let depth = CALL_DEPTH.get();
        CALL_DEPTH.set(depth + 1);
        if depth == 0 {
            match try_pass() {
                Some(pass) => HELD.set(Some(pass)),
                None => {
                    // The interpreter is exiting and this is not the thread doing it: this
                    // thread runs no more fencelock code. It gives the GIL up and waits for the
                    // process to end.
                    // SAFETY: a fencelock call from Python holds the GIL, which this releases
                    // for good; the thread never runs Python again.
                    unsafe { pyo3::ffi::PyEval_SaveThread() };
                    loop {
                        std::thread::park();
                    }
                }
            }
        }
        PythonCall(())
    }
}

impl Drop for PythonCall {
    fn drop(&mut self) {
        let depth = CALL_DEPTH.get().saturating_sub(1);
        CALL_DEPTH.set(depth);
        if depth == 0 {
            drop(HELD.take());
        }
    }
}

/// How long a wait off the main thread goes before it wakes: there is no Ctrl-C to look for
/// there (Python runs signal handlers on the main thread only), so it wakes for its answer.
const OFF_MAIN_THREAD: Duration = Duration::from_secs(3600);

/// How long a wait on the calling thread may go before it wakes to look for Ctrl-C: `slice` on
/// the main thread, far longer on any other, where a wake would only cost a GIL acquisition.
pub(crate) fn wake_every(slice: Duration) -> Duration {
    // SAFETY: PyThread_get_thread_ident only reads the calling thread's identity.
    let current = unsafe { pyo3::ffi::PyThread_get_thread_ident() } as u64;
    if MAIN_THREAD.get().is_none_or(|main| *main == current) {
        slice
    } else {
        OFF_MAIN_THREAD
    }
}

/// `py.detach(f)`, for waits: the thread gives its pass back while it waits without the GIL,
/// and takes one again before it takes the GIL back, or parks for good once the interpreter
/// is exiting.
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    drop(HELD.take());
    let (out, pass) = py.detach(|| {
        let out = f();
        let pass = pass_or_park();
        pause_before_python();
        (out, pass)
    });
    if CALL_DEPTH.get() > 0 {
        HELD.set(Some(pass));
    }
    out
}

/// `Python::attach(f)` from a thread that does not hold the GIL (a runtime worker, the span and
/// metrics threads): None, without running `f`, once the interpreter is exiting. On a Python
/// thread inside a fencelock call, which holds the GIL already, it always runs `f`.
pub(crate) fn attach<T>(f: impl for<'py> FnOnce(Python<'py>) -> T) -> Option<T> {
    if CALL_DEPTH.get() > 0 && HELD.with(held_pass_is_set) {
        return Some(Python::attach(f));
    }
    let pass = try_pass()?;
    pause_before_python();
    let out = Python::attach(f);
    drop(pass);
    Some(out)
}

fn held_pass_is_set(held: &Cell<Option<Pass>>) -> bool {
    let pass = held.take();
    let set = pass.is_some();
    held.set(pass);
    set
}

/// [`attach`] for what makes a Python value: once the interpreter is exiting, an error that
/// nobody will see (the answer it was for is never delivered).
pub(crate) fn attach_or_exiting<T>(
    f: impl for<'py> FnOnce(Python<'py>) -> PyResult<T>,
) -> PyResult<T> {
    attach(f).unwrap_or_else(|| Err(exiting()))
}

/// The error made without the GIL once the interpreter is exiting.
pub(crate) fn exiting() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("fencelock: the Python interpreter is exiting")
}

/// The tests' pause before a thread takes the GIL (a no-op outside builds with the `test-hooks`
/// feature): it gives way as soon as the gate closes, since the exit then waits for it.
fn pause_before_python() {
    #[cfg(feature = "test-hooks")]
    crate::test_hooks::pause_before_python(|| GATE.load(Ordering::SeqCst) & CLOSED != 0);
}

/// The `atexit` hook: closes the gate, and waits (with the GIL released) until every pass is
/// given back, so nothing on its way into Python is there when finalization starts.
#[pyfunction]
fn _close_the_gate(py: Python<'_>) {
    let _ = EXITING_ON.set(std::thread::current().id());
    GATE.fetch_or(CLOSED, Ordering::SeqCst);
    // The hook runs outside any fencelock call, so this thread holds no pass of its own.
    py.detach(|| {
        let since = Instant::now();
        while GATE.load(Ordering::SeqCst) & !CLOSED != 0 && since.elapsed() < DRAIN_LIMIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// After `fork()`, in the child: only the forking thread exists there, so the passes the
/// parent's other threads held are not out, and a stale count would hold the child's exit up.
#[pyfunction]
fn _reset_the_gate_after_fork() {
    let pass = HELD.take();
    let own = pass.as_ref().is_some_and(|pass| pass.counted);
    HELD.set(pass);
    GATE.store(usize::from(own), Ordering::SeqCst);
}

/// Registers the `atexit` hook and the child's `fork()` hook, and notes which thread is the
/// main one.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(_close_the_gate, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    let os = m.py().import("os")?;
    if os.hasattr("register_at_fork")? {
        let kwargs = pyo3::types::PyDict::new(m.py());
        kwargs.set_item(
            "after_in_child",
            wrap_pyfunction!(_reset_the_gate_after_fork, m)?,
        )?;
        os.call_method("register_at_fork", (), Some(&kwargs))?;
    }
    let main: u64 = m
        .py()
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    let _ = MAIN_THREAD.set(main);
    Ok(())
}
