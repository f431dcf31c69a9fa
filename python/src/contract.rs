//! The core's contract (`fencelock::contract`, docs/design.md §9.3) handed to the tests, which
//! compare it with what the Python package offers (`python/tests/test_contract.py`).
//!
//! Private: set on the module as plain attributes, outside its `__all__`, like the test hooks,
//! so they are no part of the public API and the module's public surface stays what the stub
//! declares. They are in every build, not only `test-hooks` ones, because they expose nothing
//! but data and let the tests run on a release wheel too.

use fencelock::contract::{self, OPTIONS, Operation};
use fencelock::{Error, ErrorCode};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::error::{guard, invalid, to_py};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.setattr("_contract", wrap_pyfunction!(_contract, m)?)?;
    m.setattr(
        "_exception_for_code",
        wrap_pyfunction!(_exception_for_code, m)?,
    )?;
    Ok(())
}

/// The core's lists: `error_codes`, `event_kinds`, `operations` and `options`
/// (one dict per option: `name`, `kind`, `default`, `operations`, `set_by_binding`).
#[pyfunction]
fn _contract(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    guard(|| {
        let out = PyDict::new(py);
        out.set_item("error_codes", contract::error_code_names())?;
        out.set_item("event_kinds", contract::event_kind_names())?;
        let operations: Vec<&str> = Operation::ALL.iter().map(|op| op.as_str()).collect();
        out.set_item("operations", operations)?;
        let options = PyList::empty(py);
        for spec in OPTIONS {
            let option = PyDict::new(py);
            option.set_item("name", spec.name)?;
            option.set_item("kind", spec.kind.as_str())?;
            option.set_item("default", spec.default)?;
            let operations: Vec<&str> = spec.operations.iter().map(|op| op.as_str()).collect();
            option.set_item("operations", operations)?;
            option.set_item("set_by_binding", spec.set_by_binding)?;
            options.append(option)?;
        }
        out.set_item("options", options)?;
        Ok(out)
    })
}

/// The exception this module raises for a core error with `code`, made by the one conversion
/// every error goes through (`error::to_py`), returned rather than raised.
#[pyfunction]
fn _exception_for_code(py: Python<'_>, code: &str) -> PyResult<Py<PyAny>> {
    guard(|| {
        let Some(code) = ErrorCode::ALL.into_iter().find(|c| c.as_str() == code) else {
            return Err(invalid(format!("no error code {code:?}")));
        };
        let exception = to_py(Error::new(code, "made by _exception_for_code"));
        Ok(exception.into_value(py).into_any())
    })
}
