//! `fencelock.Fence`: the resource side, which refuses writes carrying an older token.

use fencelock::{Fence, FenceToken, SqlValue, Statement};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};

use crate::awaitable::awaitable;
use crate::error::{closed, guard, invalid, to_py};
use crate::lease::PyLease;
use crate::multi::PyMultiLease;
use crate::options::{FENCE_OPTIONS, Options, locker_options, text};
use crate::runtime::{OnInterrupt, wait};

/// A fence on one resource, opened on its own URL: it accepts a write only if its token is at
/// least the highest it has accepted for that resource.
///
/// `fenced_execute(lease_or_token, [(sql, params), ...])` runs your statements in one
/// transaction together with the token check, so a holder that paused past its lease cannot
/// overwrite the work of the next one: its write fails with `fencelock.StaleToken` and nothing is
/// written. `check()` is advisory only: a check followed by a separate write protects nothing.
#[pyclass(name = "Fence", module = "fencelock", frozen)]
pub struct PyFence {
    /// `None` only while being dropped in a forked child.
    fence: Option<Fence>,
    pid: u32,
}

impl Drop for PyFence {
    fn drop(&mut self) {
        if self.pid != fencelock::runtime::process_id() {
            // Opened before fork(): its connections belong to the parent.
            std::mem::forget(self.fence.take());
        }
    }
}

impl PyFence {
    fn core(&self) -> PyResult<Fence> {
        if self.pid != fencelock::runtime::process_id() {
            return Err(closed(format!(
                "this Fence was opened in process {} before fork(); open a new one in this process",
                self.pid
            )));
        }
        self.fence
            .clone()
            .ok_or_else(|| closed("the fence was closed"))
    }
}

/// A lease or an int token.
fn fence_token(value: &Bound<'_, PyAny>) -> PyResult<FenceToken> {
    if let Ok(lease) = value.cast::<PyLease>() {
        return Ok(lease.get().core().fence_token());
    }
    if value.is_instance_of::<PyMultiLease>() {
        return Err(invalid(
            "token must be a fencelock.Lease or an int, not a MultiLease, whose names each have \
             a token of their own: pass lease.part(name) for the name that guards this resource",
        ));
    }
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        let token: u64 = value
            .extract()
            .ok()
            .filter(|t| *t < 1 << 63)
            .ok_or_else(|| {
                invalid(format!(
                    "token must be between 0 and 2**63 - 1, got {value}"
                ))
            })?;
        return Ok(FenceToken::from(token));
    }
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(invalid(format!(
        "token must be a fencelock.Lease or an int, not {type_name}"
    )))
}

fn sql_value(value: &Bound<'_, PyAny>, at: &str) -> PyResult<SqlValue> {
    if value.is_none() {
        return Ok(SqlValue::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(SqlValue::Int(i64::from(value.extract::<bool>()?)));
    }
    if value.is_instance_of::<PyInt>() {
        return value
            .extract::<i64>()
            .map(SqlValue::Int)
            .map_err(|_| invalid(format!("{at}: the int {value} does not fit in 64 bits")));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(SqlValue::Float(value.extract()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(SqlValue::Text(text(value, at)?));
    }
    if value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
        || value.is_instance_of::<PyMemoryView>()
    {
        let bytes = value.call_method0("__bytes__").or_else(|_| {
            value
                .py()
                .import("builtins")?
                .getattr("bytes")?
                .call1((value,))
        })?;
        return Ok(SqlValue::Bytes(bytes.extract::<Vec<u8>>()?));
    }
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(invalid(format!(
        "{at} is a {type_name}; parameters may be None, int, float, str or bytes"
    )))
}

/// `fenced_set`'s key (str) and value (bytes or str).
fn key_value(key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<(String, Vec<u8>)> {
    let key: String = key
        .extract()
        .map_err(|_| crate::error::invalid(format!("key must be a str, not {}", type_name(key))))?;
    let value = if let Ok(bytes) = value.cast::<pyo3::types::PyBytes>() {
        bytes.as_bytes().to_vec()
    } else if let Ok(text) = value.extract::<String>() {
        text.into_bytes()
    } else {
        return Err(crate::error::invalid(format!(
            "value must be bytes or str, not {}",
            type_name(value)
        )));
    };
    Ok((key, value))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn is_sequence(value: &Bound<'_, PyAny>) -> bool {
    value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>()
}

/// `[(sql, params), ...]`; a statement may also be a bare `sql` string or `(sql,)`.
fn statements(value: &Bound<'_, PyAny>) -> PyResult<Vec<Statement>> {
    if !is_sequence(value) {
        return Err(invalid(
            "statements must be a list of (sql, params) pairs, e.g. [(\"UPDATE t SET n = n + 1 WHERE id = ?\", [7])]",
        ));
    }
    let mut out = Vec::new();
    for (i, item) in value.try_iter()?.enumerate() {
        let item = item?;
        let n = i + 1;
        let (sql, params) = if item.is_instance_of::<PyString>() {
            (item.clone(), None)
        } else if is_sequence(&item) && (1..=2).contains(&item.len()?) {
            let sql = item.get_item(0)?;
            let params = if item.len()? == 2 {
                Some(item.get_item(1)?)
            } else {
                None
            };
            (sql, params)
        } else {
            return Err(invalid(format!(
                "statement {n} must be a (sql, params) pair or an sql string"
            )));
        };
        let mut statement = Statement::new(text(&sql, &format!("the sql of statement {n}"))?);
        if let Some(params) = params.filter(|p| !p.is_none()) {
            if !is_sequence(&params) {
                return Err(invalid(format!(
                    "the params of statement {n} must be a list or tuple"
                )));
            }
            for (j, param) in params.try_iter()?.enumerate() {
                statement = statement.bind(sql_value(
                    &param?,
                    &format!("parameter {} of statement {n}", j + 1),
                )?);
            }
        }
        out.push(statement);
    }
    Ok(out)
}

/// `query`'s parameters: a list or tuple of None, int, float, str or bytes (or None: none).
fn query_params(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<SqlValue>> {
    let Some(params) = value.filter(|p| !p.is_none()) else {
        return Ok(Vec::new());
    };
    if !is_sequence(params) {
        return Err(invalid("the params of a query must be a list or tuple"));
    }
    params
        .try_iter()?
        .enumerate()
        .map(|(j, param)| sql_value(&param?, &format!("parameter {} of the query", j + 1)))
        .collect()
}

/// `query`'s rows: a list of tuples of None, int, float, str or bytes, as `sqlite3` gives them.
struct QueryRows(Vec<Vec<SqlValue>>);

impl<'py> IntoPyObject<'py> for QueryRows {
    type Target = PyList;
    type Output = Bound<'py, PyList>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let rows = self
            .0
            .into_iter()
            .map(|row| {
                let values = row
                    .into_iter()
                    .map(|value| match value {
                        SqlValue::Null => Ok(py.None().into_bound(py)),
                        SqlValue::Int(v) => Ok(v.into_pyobject(py)?.into_any()),
                        SqlValue::Float(v) => Ok(v.into_pyobject(py)?.into_any()),
                        SqlValue::Text(v) => Ok(v.into_pyobject(py)?.into_any()),
                        SqlValue::Bytes(v) => Ok(PyBytes::new(py, &v).into_any()),
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                PyTuple::new(py, values)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }
}

fn open_args(
    url: &Bound<'_, PyAny>,
    resource: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, String, fencelock::LockerOptions)> {
    let py = url.py();
    let url = text(url, "url")?;
    let resource = text(resource, "fence resource name")?;
    let options = locker_options(py, &Options::check(options, FENCE_OPTIONS, "Fence.open")?)?;
    Ok((url, resource, options))
}

fn new_fence(fence: Fence) -> PyFence {
    PyFence {
        fence: Some(fence),
        pid: fencelock::runtime::process_id(),
    }
}

#[pymethods]
impl PyFence {
    /// Opens the fence of `resource` in the database at `url` (sqlite:///abs/path.db today);
    /// the fence table is created on first use. Options as for `connect()`.
    #[staticmethod]
    #[pyo3(signature = (url, resource, **options), text_signature = "(url, resource, *, poll_interval=None, operation_timeout=None, tracing=False)")]
    fn open(
        py: Python<'_>,
        url: Bound<'_, PyAny>,
        resource: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyFence> {
        guard(|| {
            let (url, resource, options) = open_args(&url, &resource, options)?;
            let fence = wait(
                py,
                async move { Fence::open_with(&url, &resource, options).await },
                OnInterrupt::Cancel,
            )?;
            Ok(new_fence(fence))
        })
    }

    /// Awaitable `open`.
    #[staticmethod]
    #[pyo3(signature = (url, resource, **options), text_signature = "(url, resource, *, poll_interval=None, operation_timeout=None, tracing=False)")]
    fn open_async<'py>(
        py: Python<'py>,
        url: Bound<'py, PyAny>,
        resource: Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let (url, resource, options) = open_args(&url, &resource, options)?;
            awaitable(py, async move {
                Fence::open_with(&url, &resource, options)
                    .await
                    .map(new_fence)
                    .map_err(to_py)
            })
        })
    }

    /// The resource this fence guards.
    #[getter]
    fn resource(&self) -> String {
        self.fence
            .as_ref()
            .map(|f| f.resource().to_string())
            .unwrap_or_default()
    }

    /// Runs `statements` (a list of `(sql, params)`; params a list of None, int, float, str or
    /// bytes) in one transaction if `token` (a Lease or an int) is at least the highest this fence
    /// has accepted, and records it as the highest. Returns the rows each statement changed.
    /// Raises StaleToken (nothing written) when a newer holder has written, Lost for a lease past
    /// its deadline (nothing sent), BackendError when a statement fails (all rolled back).
    fn fenced_execute(
        &self,
        py: Python<'_>,
        token: Bound<'_, PyAny>,
        statements: Bound<'_, PyAny>,
    ) -> PyResult<Vec<u64>> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            let statements = self::statements(&statements)?;
            wait(
                py,
                async move { fence.fenced_execute(token, &statements).await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `fenced_execute`.
    fn fenced_execute_async<'py>(
        &self,
        py: Python<'py>,
        token: Bound<'py, PyAny>,
        statements: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            let statements = self::statements(&statements)?;
            awaitable(py, async move {
                fence
                    .fenced_execute(token, &statements)
                    .await
                    .map_err(to_py)
            })
        })
    }

    /// Sets `key` to `value` (bytes or str) if `token` (a Lease or an int) is at least the
    /// highest this fence has accepted, in one script (Redis fences). Raises StaleToken
    /// (nothing written) when a newer holder has written, Lost for a lease past its deadline
    /// (nothing sent), InvalidArgument on a SQL fence (use `fenced_execute`).
    fn fenced_set(
        &self,
        py: Python<'_>,
        token: Bound<'_, PyAny>,
        key: Bound<'_, PyAny>,
        value: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            let (key, value) = key_value(&key, &value)?;
            wait(
                py,
                async move { fence.fenced_set(token, &key, &value).await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `fenced_set`.
    fn fenced_set_async<'py>(
        &self,
        py: Python<'py>,
        token: Bound<'py, PyAny>,
        key: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            let (key, value) = key_value(&key, &value)?;
            awaitable(py, async move {
                fence.fenced_set(token, &key, &value).await.map_err(to_py)
            })
        })
    }

    /// Advisory: returns if `token` would be accepted now, raises StaleToken if not. A check
    /// followed by a separate write protects nothing; use `fenced_execute` for the write.
    fn check(&self, py: Python<'_>, token: Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            wait(
                py,
                async move { fence.check(token).await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `check`.
    fn check_async<'py>(
        &self,
        py: Python<'py>,
        token: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let fence = self.core()?;
            let token = fence_token(&token)?;
            awaitable(py, async move { fence.check(token).await.map_err(to_py) })
        })
    }

    /// Reads the fence's database: runs `sql` with `params` (a list of None, int, float, str or
    /// bytes) read-only, outside any fenced write, and returns the rows as a list of tuples.
    /// For a SQLite fence, read your data this way rather than with `sqlite3`: a second SQLite
    /// library in the process drops fencelock's file locks when it closes the file, and SQLite
    /// may then delete a live WAL file. Raises InvalidArgument for a statement that writes
    /// (nothing is written; write with `fenced_execute`) and on a Redis fence, BackendError for
    /// a statement the database rejects or a column that is not an integer, a float, text or
    /// bytes (CAST it in the query).
    #[pyo3(signature = (sql, params=None))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        sql: Bound<'py, PyAny>,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard(|| {
            let fence = self.core()?;
            let sql = text(&sql, "the sql of the query")?;
            let params = query_params(params.as_ref())?;
            let rows = wait(
                py,
                async move { fence.query(&sql, &params).await },
                OnInterrupt::Cancel,
            )?;
            QueryRows(rows).into_pyobject(py)
        })
    }

    /// Awaitable `query`.
    #[pyo3(signature = (sql, params=None))]
    fn query_async<'py>(
        &self,
        py: Python<'py>,
        sql: Bound<'py, PyAny>,
        params: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let fence = self.core()?;
            let sql = text(&sql, "the sql of the query")?;
            let params = query_params(params.as_ref())?;
            awaitable(py, async move {
                fence
                    .query(&sql, &params)
                    .await
                    .map(QueryRows)
                    .map_err(to_py)
            })
        })
    }

    /// The highest token accepted so far, or None.
    fn highest(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        guard(|| {
            let fence = self.core()?;
            wait(
                py,
                async move { fence.highest().await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `highest`.
    fn highest_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let fence = self.core()?;
            awaitable(py, async move { fence.highest().await.map_err(to_py) })
        })
    }

    /// Closes the fence's connections.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            if self.pid != fencelock::runtime::process_id() {
                return Ok(());
            }
            let fence = self.core()?;
            wait(
                py,
                async move {
                    fence.close().await;
                    Ok(())
                },
                OnInterrupt::FinishInBackground,
            )
        })
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        exc_value: Option<Bound<'_, PyAny>>,
        traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc_type, exc_value, traceback);
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.fence {
            Some(fence) => format!("<fencelock.{fence:?}>"),
            None => "<fencelock.Fence>".to_string(),
        }
    }
}
