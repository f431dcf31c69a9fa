//! A holder's description (`fencelock::HolderDescription`) as Python sees it: a dict.

use fencelock::HolderDescription;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A holder's description as a dict with the keys it has: host, pid, language, text.
pub(crate) fn holder_dict<'py>(
    py: Python<'py>,
    holder: &HolderDescription,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    if let Some(host) = &holder.host {
        dict.set_item("host", host)?;
    }
    if let Some(pid) = holder.pid {
        dict.set_item("pid", pid)?;
    }
    if let Some(language) = &holder.language {
        dict.set_item("language", language)?;
    }
    if let Some(text) = &holder.text {
        dict.set_item("text", text)?;
    }
    Ok(dict)
}
