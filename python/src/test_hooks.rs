//! Test-only entry points, compiled in only with the `test-hooks` feature: the test suites' builds
//! (python/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. They panic on purpose, so the tests can show that a
//! panic surfaces as `fencelock.InternalError` and never crosses into Python.

use pyo3::prelude::*;

use crate::{error, runtime};

/// Adds the hooks to the native module, next to the public API.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_test_panic, m)?)?;
    m.add_function(wrap_pyfunction!(_test_panic_async, m)?)?;
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
