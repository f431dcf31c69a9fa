//! `fencelock.Lease`: proof of holding one lock.

use std::mem::ManuallyDrop;
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock::{Error, ErrorCode, Lease, LockMode};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::awaitable::awaitable;
use crate::error::{guard, to_py};
use crate::options::optional_duration;
use crate::runtime::{OnInterrupt, block, wait};
use crate::signal::PyLostSignal;

/// Proof of holding one lock, with its fencing token.
///
/// A lease may be released from any thread: the lock is held by the lease, not by the thread
/// that acquired it. While held it renews itself every ttl/3 (unless auto_renew=False); if a
/// renewal finds the lock is no longer ours, or the client deadline passes first, the lease is
/// lost: `is_lost` turns true, `lost` is set, and using the lease raises `fencelock.Lost`.
///
/// As a context manager (`with lease:` / `async with lease:`) it releases on exit, like
/// `locker.lock(...)`.
#[pyclass(name = "Lease", module = "fencelock", frozen)]
pub struct PyLease {
    /// Dropped by hand in `Drop`: never in a forked child (see there).
    lease: ManuallyDrop<Lease>,
    pid: u32,
}

impl PyLease {
    pub(crate) fn new(lease: Lease) -> Self {
        PyLease {
            lease: ManuallyDrop::new(lease),
            pid: fencelock::runtime::process_id(),
        }
    }

    pub(crate) fn core(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for PyLease {
    fn drop(&mut self) {
        // A lease inherited across fork(): the child must not touch the parent's lock or its
        // connections. The core never renews or releases it here; it is not even dropped.
        if self.pid == fencelock::runtime::process_id() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.lease) };
        }
    }
}

static EPOCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A UTC-aware `datetime` for `at`.
pub(crate) fn utc_datetime<'py>(py: Python<'py>, at: SystemTime) -> PyResult<Bound<'py, PyAny>> {
    let epoch = EPOCH
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let datetime = py.import("datetime")?;
            let utc = datetime.getattr("timezone")?.getattr("utc")?;
            Ok(datetime
                .getattr("datetime")?
                .call1((1970, 1, 1, 0, 0, 0, 0, utc))?
                .unbind())
        })?
        .bind(py);
    let micros = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(before) => -(before.duration().as_micros() as i64),
    };
    let timedelta = TIMEDELTA.import(py, "datetime", "timedelta")?;
    let delta = timedelta.call((), Some(&[("microseconds", micros)].into_py_dict(py)?))?;
    epoch.add(delta)
}

use pyo3::types::IntoPyDict;

/// How leaving a scope ends: quietly after an explicit release; `Lost` (or another error) when
/// the lock was not held to the end, unless the block's own exception is already on its way out.
pub(crate) fn settle_exit(result: fencelock::Result<()>, propagating: bool) -> PyResult<bool> {
    match result {
        Ok(()) => Ok(false),
        Err(e) if e.code() == ErrorCode::NotHeld => Ok(false),
        Err(_) if propagating => Ok(false),
        Err(e) => Err(to_py(e)),
    }
}

/// Releases `lease` on leaving a `with` block.
pub(crate) fn exit_blocking(py: Python<'_>, lease: Lease, propagating: bool) -> PyResult<bool> {
    let result = block(
        py,
        async move { lease.release().await },
        OnInterrupt::FinishInBackground,
    )?;
    settle_exit(result, propagating)
}

/// Releases `lease` on leaving an `async with` block.
pub(crate) fn exit_async<'py>(
    py: Python<'py>,
    lease: Lease,
    propagating: bool,
) -> PyResult<Bound<'py, PyAny>> {
    awaitable(py, async move {
        settle_exit(release_in_background(lease).await, propagating)
    })
}

/// Releases, finishing the release on the runtime even if the awaiting task is cancelled, so a
/// cancelled `async with` exit leaves nothing behind.
async fn release_in_background(lease: Lease) -> fencelock::Result<()> {
    in_background(async move { lease.release().await }).await
}

/// Runs `release` as a task of its own on the runtime and answers what it answers: dropping
/// the caller's future (a cancelled await) does not cut it short. The task keeps the caller's
/// context (its span's parent, its log records' context).
pub(crate) async fn in_background<F>(release: F) -> fencelock::Result<()>
where
    F: std::future::Future<Output = fencelock::Result<()>> + Send + 'static,
{
    let rt = crate::runtime::runtime()?;
    let caller = fencelock::spans::caller_context();
    match rt
        .spawn(fencelock::spans::in_caller_context(caller, release))
        .await
    {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::internal("the release task was cancelled")),
    }
}

#[pymethods]
impl PyLease {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        self.core().name()
    }

    /// The fencing token: an int, strictly increasing per lock name, below 2**63. Only a mutex's
    /// or a write lease's token may guard a `Fence`: readers and a semaphore's permits hold the
    /// name at once.
    #[getter]
    fn token(&self) -> u64 {
        self.core().token()
    }

    /// How this lease holds its name: "exclusive" (a mutex's, from `lock()`, `acquire()` or an
    /// election), "permit" (one of a semaphore's), "read" or "write" (a read-write lock's).
    #[getter]
    fn mode(&self) -> &'static str {
        self.core().mode().as_str()
    }

    /// When the backend will expire the lease unless it is renewed (this client's estimate), as a
    /// UTC-aware datetime; None on backends without a ttl.
    #[getter]
    fn expires_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        guard(|| {
            self.core()
                .expires_at()
                .map(|at| utc_datetime(py, at))
                .transpose()
        })
    }

    /// The client deadline as a UTC-aware datetime: after it this client counts the lease lost
    /// unless a renewal succeeds first. It moves forward with each renewal; on backends with a
    /// ttl it comes before `expires_at`, so work that checks it stops before the lock can pass on.
    #[getter]
    fn valid_until<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| utc_datetime(py, self.core().valid_until()))
    }

    /// Whether the lease is lost; computed from the client deadline on every read.
    #[getter]
    fn is_lost(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().is_lost()))
    }

    /// Whether the lease is still held: neither released nor lost (False in a forked child).
    #[getter]
    fn is_held(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().is_held()))
    }

    /// Whether the last renewal failed (renewals are retried until the client deadline).
    #[getter]
    fn renewal_failing(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().renewal_failing()))
    }

    /// Whether the lease's connection to its backend is down (ZooKeeper's "suspended") or its
    /// last renewal failed: stop writing until it clears (it clears by itself once a renewal
    /// or the connection is back; the lease is lost at its deadline otherwise).
    #[getter]
    fn is_suspended(&self) -> PyResult<bool> {
        guard(|| Ok(self.core().is_suspended()))
    }

    /// The signal set when this lease is lost: `lost.is_set()`, `lost.wait(timeout)`,
    /// `await lease.lost`.
    #[getter]
    pub(crate) fn lost(&self) -> PyResult<PyLostSignal> {
        guard(|| Ok(PyLostSignal::new(self.core().lost_signal())))
    }

    /// Returns if the lease is held. Raises `fencelock.Lost` if it was lost, `fencelock.NotHeld`
    /// after release, `fencelock.Closed` in a process forked from the one that acquired it.
    /// Call it between steps of long work.
    pub(crate) fn raise_if_lost(&self) -> PyResult<()> {
        guard(|| self.core().ensure_held().map_err(to_py))
    }

    /// Sets a new ttl from now: `ttl` seconds (int, float or timedelta), or the current ttl when
    /// None. Raises NotHeld after release, Lost after a loss.
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

    /// Releases the lock. Raises NotHeld if it was already released, Lost if the lease was lost
    /// first (work done since may have run without the lock). Ctrl-C does not cut a release
    /// short: it finishes in the background.
    pub(crate) fn release(&self, py: Python<'_>) -> PyResult<()> {
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
    pub(crate) fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let lease = self.core().clone();
            awaitable(py, async move {
                release_in_background(lease).await.map_err(to_py)
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
            let me: Py<PyLease> = slf.unbind();
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
        let mode = match lease.mode() {
            LockMode::Exclusive => String::new(),
            mode => format!(" mode={}", mode.as_str()),
        };
        format!(
            "<fencelock.Lease name={:?} token={}{mode} {state}>",
            lease.name(),
            lease.token()
        )
    }
}
