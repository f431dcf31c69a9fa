//! `fencelock.MultiLease` and `fencelock.MultiLock`: several mutexes held as one, the core's
//! `Locker::acquire_many_in` (docs/design.md §1.9) in Python's terms.
//!
//! The core takes every name or none, in one canonical order, and checks the set; this file
//! only converts the names, and keeps `lock_many()`'s re-entry scopes as `lock()`'s are kept
//! (`locker.rs`).

use std::mem::ManuallyDrop;
use std::sync::Arc;

use fencelock::{LockOptions, Locker, MultiLease, Scope};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};

use crate::awaitable::awaitable;
use crate::error::{guard, invalid_type, to_py};
use crate::lease::{PyLease, in_background, settle_exit, utc_datetime};
use crate::options::{LOCK_OPTIONS, acquire_options, optional_duration, text};
use crate::process_locker::ProcessLocker;
use crate::runtime::{OnInterrupt, block, refuse_waiting_inside_event_loop, wait};
use crate::scope::{
    Claim, Entering, Scopes, claim, current_scope, drop_scopes, new_scopes, received, take,
};
use crate::signal::PyLostSignal;

/// The names of a multi-name lock: any iterable of str (each checked as `lock(name)` checks
/// its name), but not one str or bytes, whose letters would be taken for the names. The set
/// itself (none, one twice, too many, a bad name) is the core's to check.
pub(crate) fn lock_names(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let kind = || {
        value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".to_string())
    };
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
    {
        return Err(invalid_type(format!(
            "names must be an iterable of str such as a list, not one {}; pass [name]",
            kind()
        )));
    }
    let items = value.try_iter().map_err(|_| {
        invalid_type(format!(
            "names must be an iterable of str such as a list, got {}",
            kind()
        ))
    })?;
    items.map(|item| text(&item?, "lock name")).collect()
}

/// Releases `lease` on leaving a `with` block (as `lease::exit_blocking` does a single lease).
fn exit_blocking(py: Python<'_>, lease: MultiLease, propagating: bool) -> PyResult<bool> {
    let result = block(
        py,
        async move { lease.release().await },
        OnInterrupt::FinishInBackground,
    )?;
    settle_exit(result, propagating)
}

/// Releases `lease` on leaving an `async with` block, finishing even if the task is cancelled.
fn exit_async<'py>(
    py: Python<'py>,
    lease: MultiLease,
    propagating: bool,
) -> PyResult<Bound<'py, PyAny>> {
    awaitable(py, async move {
        let result = in_background(async move { lease.release().await }).await;
        settle_exit(result, propagating)
    })
}

/// Proof of holding several locks at once, from `locker.acquire_many(names)` or
/// `with locker.lock_many(names) as lease:`.
///
/// Each name is held by a lease of its own (`part(name)`, a `fencelock.Lease` with its own
/// fencing token, renewal and deadline): give a fence the part of the name that guards it. The
/// whole is held while every part is, and lost the moment any part is (`lost` is set then:
/// stop the work). `release()` releases every part. As a context manager it releases on exit,
/// like a Lease.
#[pyclass(name = "MultiLease", module = "fencelock", frozen)]
pub struct PyMultiLease {
    /// Dropped by hand in `Drop`: never in a forked child (as `PyLease`).
    lease: ManuallyDrop<MultiLease>,
    /// Each part's Lease object, made once so `part(name)` is always the same object.
    parts: Vec<Py<PyLease>>,
    pid: u32,
}

impl PyMultiLease {
    pub(crate) fn new(py: Python<'_>, lease: MultiLease) -> PyResult<Self> {
        let parts = lease
            .parts()
            .iter()
            .map(|part| Py::new(py, PyLease::new(part.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyMultiLease {
            lease: ManuallyDrop::new(lease),
            parts,
            pid: fencelock::runtime::process_id(),
        })
    }

    fn core(&self) -> &MultiLease {
        &self.lease
    }
}

impl Drop for PyMultiLease {
    fn drop(&mut self) {
        // Inherited across fork(): the child must not touch the parent's locks (see PyLease).
        if self.pid == fencelock::runtime::process_id() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.lease) };
        }
    }
}

#[pymethods]
impl PyMultiLease {
    /// The names, in the canonical order they were taken in (sorted by name).
    #[getter]
    fn names(&self) -> Vec<String> {
        self.core().names().map(str::to_string).collect()
    }

    /// Each name's fencing token, as a dict in the canonical order.
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let tokens = PyDict::new(py);
            for (name, token) in self.core().tokens() {
                tokens.set_item(name, token)?;
            }
            Ok(tokens)
        })
    }

    /// The Lease of one name, to guard a `Fence` for what that name protects (always the same
    /// object for a name); None for a name that is not a part. Releasing a part by itself
    /// leaves the whole no longer held.
    fn part(&self, py: Python<'_>, name: Bound<'_, PyAny>) -> PyResult<Option<Py<PyLease>>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            Ok(self
                .core()
                .parts()
                .iter()
                .position(|part| part.name() == name)
                .map(|at| self.parts[at].clone_ref(py)))
        })
    }

    /// Whether every part is still held: none released, none lost (False in a forked child).
    #[getter]
    fn is_held(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().is_held()))
    }

    /// Whether any part is lost; computed from the client deadlines on every read.
    #[getter]
    fn is_lost(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().is_lost()))
    }

    /// The signal set the moment any part is lost: `lost.is_set()`, `lost.wait(timeout)`,
    /// `await lease.lost`.
    #[getter]
    fn lost(&self) -> PyResult<PyLostSignal> {
        guard(|| Ok(PyLostSignal::new(self.core().lost_signal())))
    }

    /// Returns if every part is held. Raises `fencelock.Lost` if a part was lost,
    /// `fencelock.NotHeld` after release, `fencelock.Closed` in a process forked from the one
    /// that acquired (the first part's error, in the canonical order).
    fn raise_if_lost(&self) -> PyResult<()> {
        guard(|| self.core().ensure_held().map_err(to_py))
    }

    /// The earliest part's client deadline as a UTC-aware datetime: the whole is valid until
    /// then (it moves forward as the parts renew).
    #[getter]
    fn valid_until<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| utc_datetime(py, self.core().valid_until()))
    }

    /// The earliest part's expiry on the backend (this client's estimate), as a UTC-aware
    /// datetime; None on backends without a ttl.
    #[getter]
    fn expires_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        guard(|| {
            self.core()
                .expires_at()
                .map(|at| utc_datetime(py, at))
                .transpose()
        })
    }

    /// Sets a new ttl from now on every part: `ttl` seconds (int, float or timedelta), or the
    /// current ttl when None. Raises the first part's error (NotHeld after release, Lost after
    /// a loss); the other parts are extended all the same.
    #[pyo3(signature = (ttl=None))]
    fn extend(&self, py: Python<'_>, ttl: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        guard(|| {
            let ttl = optional_duration(ttl.as_ref(), "ttl")?;
            let lease = self.core().clone();
            wait(
                py,
                async move { lease.extend(ttl).await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `extend`.
    #[pyo3(signature = (ttl=None))]
    fn extend_async<'py>(
        &self,
        py: Python<'py>,
        ttl: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let ttl = optional_duration(ttl.as_ref(), "ttl")?;
            let lease = self.core().clone();
            awaitable(py, async move { lease.extend(ttl).await.map_err(to_py) })
        })
    }

    /// Releases every part, last taken first, whatever happens to the others. Raises Lost if
    /// any part was lost first (work done since may have run without that lock), else NotHeld
    /// if any part was already released. Ctrl-C does not cut a release short: it finishes in
    /// the background.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            let lease = self.core().clone();
            wait(
                py,
                async move { lease.release().await },
                OnInterrupt::FinishInBackground,
            )
        })
    }

    /// Awaitable `release`; cancelling the await does not cut the release short.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let lease = self.core().clone();
            awaitable(py, async move {
                in_background(async move { lease.release().await })
                    .await
                    .map_err(to_py)
            })
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
        let _ = (exc_value, traceback);
        guard(|| {
            exit_blocking(
                py,
                self.core().clone(),
                exc_type.is_some_and(|t| !t.is_none()),
            )
        })
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let me: Py<PyMultiLease> = slf.unbind();
            awaitable(py, async move { Ok(me) })
        })
    }

    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        exc_value: Option<Bound<'py, PyAny>>,
        traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (exc_value, traceback);
        guard(|| {
            exit_async(
                py,
                self.core().clone(),
                exc_type.is_some_and(|t| !t.is_none()),
            )
        })
    }

    fn __repr__(&self) -> String {
        let lease = self.core();
        let state = if lease.is_lost() {
            "lost"
        } else if lease.is_held() {
            "held"
        } else {
            "released"
        };
        let tokens: Vec<String> = lease
            .parts()
            .iter()
            .map(|part| format!("{:?}: {}", part.name(), part.token()))
            .collect();
        format!(
            "<fencelock.MultiLease tokens={{{}}} {state}>",
            tokens.join(", ")
        )
    }
}

/// `locker.lock_many(names, ...)`: acquires every name when entered (`with` or `async with`)
/// and releases them when left, as `locker.lock(name, ...)` does one name. One object may be
/// shared by threads and tasks (each entry is its own acquisition); entering it again inside
/// its own block in the same thread or task re-enters with `reentrant=True` and raises
/// `fencelock.Deadlock` without it.
#[pyclass(name = "MultiLock", module = "fencelock", frozen)]
pub struct PyMultiLock {
    locker: Arc<ProcessLocker>,
    /// As given; the core checks and orders them on every entry.
    names: Vec<String>,
    options: LockOptions,
    scopes: Scopes<MultiLease>,
}

impl Drop for PyMultiLock {
    fn drop(&mut self) {
        drop_scopes(&self.scopes, self.locker.forked());
    }
}

impl PyMultiLock {
    /// The object `locker.lock_many(names, **options)` returns.
    pub(crate) fn new(
        locker: &Arc<ProcessLocker>,
        names: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyMultiLock> {
        let names = lock_names(names)?;
        let options = acquire_options(options, LOCK_OPTIONS, "lock_many")?;
        locker.core()?;
        Ok(PyMultiLock {
            locker: Arc::clone(locker),
            names,
            options,
            scopes: new_scopes(),
        })
    }

    /// The Locker (CLOSED in a forked child), the caller's scope, and its claim.
    fn enter(&self, py: Python<'_>) -> PyResult<(Locker, Scope, Claim<MultiLease>)> {
        let locker = self.locker.core()?.clone();
        let scope = current_scope(py)?;
        Ok((locker, scope, claim(&self.scopes, scope)))
    }
}

#[pymethods]
impl PyMultiLock {
    /// The names, as given.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<PyMultiLease> {
        guard(|| {
            let (locker, scope, claim) = self.enter(py)?;
            let (names, options) = (self.names.clone(), self.options.clone());
            refuse_waiting_inside_event_loop(py)?;
            let lease = wait(
                py,
                async move {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    locker.acquire_many_in(scope, &names, &options).await
                },
                OnInterrupt::Cancel,
            )?;
            claim.fulfil(lease.clone());
            PyMultiLease::new(py, lease)
        })
    }

    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        exc_value: Option<Bound<'_, PyAny>>,
        traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc_value, traceback);
        guard(|| match take(&self.scopes, current_scope(py)?)? {
            None => Ok(false),
            Some(lease) => exit_blocking(py, lease, exc_type.is_some_and(|t| !t.is_none())),
        })
    }

    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let (locker, scope, claim) = self.enter(py)?;
            let (names, options) = (self.names.clone(), self.options.clone());
            let acquiring = awaitable(py, async move {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let lease = locker
                    .acquire_many_in(scope, &names, &options)
                    .await
                    .map_err(to_py)?;
                crate::exit::attach_or_exiting(|py| {
                    let entered = Py::new(py, PyMultiLease::new(py, lease.clone())?)?;
                    Py::new(py, Entering::new(claim, lease, entered.into_any()))
                })
            })?;
            received(py, acquiring)
        })
    }

    #[pyo3(signature = (exc_type, exc_value, traceback))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        exc_value: Option<Bound<'py, PyAny>>,
        traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (exc_value, traceback);
        guard(|| {
            let propagating = exc_type.is_some_and(|t| !t.is_none());
            match take(&self.scopes, current_scope(py)?)? {
                None => awaitable(py, async { Ok(false) }),
                Some(lease) => exit_async(py, lease, propagating),
            }
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<fencelock.MultiLock names={:?} ttl={:?} wait={:?}>",
            self.names, self.options.ttl, self.options.wait
        )
    }
}
