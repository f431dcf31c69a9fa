//! Test-only entry points, compiled in only with the `test-hooks` feature: the test suites' builds
//! (python/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. They panic on purpose, so the tests can show that a
//! panic surfaces as `fencelock.InternalError` and never crosses into Python.

use pyo3::prelude::*;

use crate::{error, runtime};

/// Sets the hooks on the native module as plain attributes: not in its `__all__` (where
/// `add_function` would put them), so the module's public surface, and the `.pyi` stub that
/// stubtest checks against it, are the same with and without the feature.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.setattr("_test_panic", wrap_pyfunction!(_test_panic, m)?)?;
    m.setattr("_test_panic_async", wrap_pyfunction!(_test_panic_async, m)?)?;
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
        runtime::awaitable(py, async {
            if std::hint::black_box(true) {
                panic!("test panic requested by fencelock._native._test_panic_async()");
            }
            Ok(())
        })
    })
}
