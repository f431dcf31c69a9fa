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

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let module = ERRORS
        .get_or_try_init(py, || py.import("fencelock._errors").map(Bound::unbind))?
        .bind(py);
    let name = class_name(err.code());
    let class = module.getattr(name)?;
    let instance = if name == "LockError" {
        class.call1((err.message(), err.code().as_str()))?
    } else {
        class.call1((err.message(),))?
    };
    Ok(PyErr::from_value(instance))
}

/// Converts a core error into its `fencelock.*` exception.
pub(crate) fn to_py(err: Error) -> PyErr {
    Python::attach(|py| match build(py, &err) {
        Ok(exc) => exc,
        // The error module itself failed to load: surface that, it is the real problem.
        Err(import_error) => import_error,
    })
}

pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    to_py(Error::invalid(message))
}

/// An argument of the wrong type: `fencelock.InvalidArgument` that is also a `TypeError`.
pub(crate) fn invalid_type(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let class = ERRORS
            .get_or_try_init(py, || py.import("fencelock._errors").map(Bound::unbind))
            .and_then(|module| module.bind(py).getattr("InvalidArgumentType"));
        match class.and_then(|class| class.call1((message.as_str(),))) {
            Ok(instance) => PyErr::from_value(instance),
            Err(import_error) => import_error,
        }
    })
}

pub(crate) fn closed(message: impl Into<String>) -> PyErr {
    to_py(Error::closed(message))
}

/// A caught panic: `fencelock.InternalError`, never pyo3's PanicException.
pub(crate) fn panic_to_py(payload: Box<dyn Any + Send>) -> PyErr {
    to_py(Error::from_panic(payload.as_ref()))
}

/// Runs the body of an exported function, turning a panic into `fencelock.InternalError`.
/// Every `#[pyfunction]` and `#[pymethods]` entry goes through this.
pub(crate) fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(panic_to_py(payload)))
}
