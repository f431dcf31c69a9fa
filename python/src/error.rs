//! The one place where core error codes become Python exceptions.
//!
//! The exception classes are defined in Python (`fencelock/_errors.py`), on builtins where
//! one fits, so they pickle and read like any Python exception. Every binding-made error (a bad
//! argument, a caught panic) goes through here too, with a core `Error`.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use fencelock::{Error, ErrorCode};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// The Python class for each code. `LockError` itself stands in for a code this binding does
/// not know yet (a newer core), and then carries the code on the instance.
fn class_name(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::Timeout => "Timeout",
        ErrorCode::Lost => "Lost",
        ErrorCode::NotHeld => "NotHeld",
        ErrorCode::Unavailable => "Unavailable",
        ErrorCode::InvalidArgument => "InvalidArgument",
        ErrorCode::Auth => "Auth",
        ErrorCode::StaleToken => "StaleToken",
        ErrorCode::Backend => "BackendError",
        ErrorCode::Deadlock => "Deadlock",
        ErrorCode::Closed => "Closed",
        ErrorCode::Internal => "InternalError",
        _ => "LockError",
    }
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An instance of the class `name` of `fencelock._errors`, made with `args`.
fn instance<'py>(
    py: Python<'py>,
    name: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyResult<PyErr> {
    let module = ERRORS
        .get_or_try_init(py, || py.import("fencelock._errors").map(Bound::unbind))?
        .bind(py);
    Ok(PyErr::from_value(module.getattr(name)?.call1(args)?))
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let name = class_name(err.code());
    let exception = if name == "LockError" {
        instance(py, name, (err.message(), err.code().as_str()))?
    } else {
        instance(py, name, (err.message(),))?
    };
    if let Some(cause) = err.cause() {
        let driver_error = instance(
            py,
            "DriverError",
            (cause.message(), cause.driver(), cause.code()),
        )?;
        exception.set_cause(py, Some(driver_error));
    }
    Ok(exception)
}

/// Converts a core error into its `fencelock.*` exception.
pub(crate) fn to_py(err: Error) -> PyErr {
    crate::exit::attach(|py| match build(py, &err) {
        Ok(exc) => exc,
        // The error module itself failed to load: surface that, it is the real problem.
        Err(import_error) => import_error,
    })
    .unwrap_or_else(crate::exit::exiting)
}

pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    to_py(Error::invalid(message))
}

/// An argument of the wrong type: `fencelock.InvalidArgument` that is also a `TypeError`.
pub(crate) fn invalid_type(message: impl Into<String>) -> PyErr {
    let message = message.into();
    // The error module failing to load is the real problem: surface that.
    crate::exit::attach(|py| {
        instance(py, "InvalidArgumentType", (message.as_str(),)).unwrap_or_else(|e| e)
    })
    .unwrap_or_else(crate::exit::exiting)
}

/// A blocking call made where it would stall a running asyncio event loop:
/// `fencelock.BlockingCallInEventLoop`, a `RuntimeError` (a mistake in the calling code, outside
/// the shared error codes).
pub(crate) fn blocking_in_event_loop(py: Python<'_>, message: &str) -> PyErr {
    instance(py, "BlockingCallInEventLoop", (message,)).unwrap_or_else(|e| e)
}

pub(crate) fn closed(message: impl Into<String>) -> PyErr {
    to_py(Error::closed(message))
}

/// A caught panic: `fencelock.InternalError`, never pyo3's PanicException.
pub(crate) fn panic_to_py(payload: Box<dyn Any + Send>) -> PyErr {
    to_py(Error::from_panic(payload.as_ref()))
}

/// Runs the body of an exported function, turning a panic into `fencelock.InternalError`.
/// Every `#[pyfunction]` and `#[pymethods]` entry goes through this, and only they do: it is
/// also where a Python thread takes its pass to run fencelock code with the GIL (`exit.rs`).
pub(crate) fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    let _call = crate::exit::PythonCall::begin();
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(panic_to_py(payload)))
}
