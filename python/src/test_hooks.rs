//! Test-only entry points, compiled in only with the `test-hooks` feature: the test suites' builds
//! (python/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. They panic on purpose, so the tests can show that a
//! panic surfaces as `fencelock.InternalError` and never crosses into Python.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::{awaitable, error};

/// Sets the hooks on the native module as plain attributes: not in its `__all__` (where
/// `add_function` would put them), so the module's public surface, and the `.pyi` stub that
/// stubtest checks against it, are the same with and without the feature.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.setattr("_test_panic", wrap_pyfunction!(_test_panic, m)?)?;
    m.setattr("_test_panic_async", wrap_pyfunction!(_test_panic_async, m)?)?;
    m.setattr(
        "_test_pause_before_python",
        wrap_pyfunction!(_test_pause_before_python, m)?,
    )?;
    Ok(())
}

/// Panics inside Rust.
#[pyfunction]
fn _test_panic() -> PyResult<()> {
    error::guard(|| panic!("test panic requested by fencelock._native._test_panic()"))
}

/// An awaitable that panics on the runtime, to show the same for asyncio.
#[pyfunction]
fn _test_panic_async(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    error::guard(|| {
        awaitable::awaitable(py, async {
            if std::hint::black_box(true) {
                panic!("test panic requested by fencelock._native._test_panic_async()");
            }
            Ok(())
        })
    })
}

/// Set by `_test_pause_before_python()`: from then on, a thread about to take the GIL from
/// outside Python (a runtime worker delivering an awaitable's answer, the span and metrics
/// threads, a Python thread whose wait in fencelock ended) first waits until the interpreter is
/// finalizing, as if the scheduler had paused it there for that long.
static PAUSE_BEFORE_PYTHON: AtomicBool = AtomicBool::new(false);

/// The longest a paused thread waits for the finalization: a test that never exits goes on.
const LONGEST_PAUSE: Duration = Duration::from_secs(10);

#[pyfunction]
fn _test_pause_before_python() {
    PAUSE_BEFORE_PYTHON.store(true, Ordering::SeqCst);
}

/// Where a thread about to take the GIL from outside Python calls in: it waits there (when the
/// test asked for it) until the interpreter is finalizing, until `gives_way()` says the exit waits
/// for this thread, or for [`LONGEST_PAUSE`]; and says so on stderr when it goes on during
/// finalization.
pub(crate) fn pause_before_python(gives_way: impl Fn() -> bool) {
    // A thread that holds the GIL already takes nothing: pausing it would only hold up the exit.
    // SAFETY: PyGILState_Check only reads the calling thread's state.
    if !PAUSE_BEFORE_PYTHON.load(Ordering::SeqCst) || unsafe { PyGILState_Check() } != 0 {
        return;
    }
    let since = Instant::now();
    while !interpreter_finalizing() && !gives_way() && since.elapsed() < LONGEST_PAUSE {
        std::thread::sleep(Duration::from_millis(1));
    }
    if interpreter_finalizing() {
        // What the test looks for: whether the process then dies depends on the unwinder the
        // build links (the zig-linked wheels always die), this line does not.
        eprintln!("{FINALIZING_MARK}");
    }
}

/// Written to stderr by a thread that goes on to take the GIL while the interpreter finalizes.
const FINALIZING_MARK: &str = "fencelock test hook: a thread takes the GIL during finalization";

unsafe extern "C" {
    // Not in pyo3's abi3 bindings (outside the limited API), exported by every CPython.
    fn PyGILState_Check() -> c_int;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// Whether the interpreter is finalizing, read without the GIL: `Py_IsFinalizing` (3.13 and
/// later) or `_Py_IsFinalizing` (before), looked up at run time so the module loads on both.
fn interpreter_finalizing() -> bool {
    type IsFinalizing = unsafe extern "C" fn() -> c_int;
    static LOOKUP: std::sync::OnceLock<Option<IsFinalizing>> = std::sync::OnceLock::new();
    let found = LOOKUP.get_or_init(|| {
        [c"Py_IsFinalizing", c"_Py_IsFinalizing"]
            .iter()
            .find_map(|name| {
                // SAFETY: RTLD_DEFAULT (a null handle on Linux) searches the process's global
                // symbols; both names are functions of this signature in the interpreters that
                // export them.
                let symbol = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
                (!symbol.is_null())
                    .then(|| unsafe { std::mem::transmute::<*mut c_void, IsFinalizing>(symbol) })
            })
    });
    // SAFETY: both functions only read the runtime's state, and need no GIL.
    found.is_some_and(|is_finalizing| unsafe { is_finalizing() } != 0)
}
