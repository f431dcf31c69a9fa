//! `fencelock.Leadership` and `fencelock.Leader`: the core's leader election (a campaign is an
//! acquire of the election's lock; the term is the lease's token) in Python's terms.

use fencelock::{HolderDescription, Leader};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::guard;
use crate::holder::holder_dict;
use crate::lease::PyLease;
use crate::signal::PyLostSignal;

/// Leadership of an election, from `with locker.leadership(name) as leadership:` (or
/// `async with`, or `locker.run_as_leader`). It lasts while the election's lease is held: the
/// lease renews itself, and leadership ends on `resign()`, when the block is left, when the
/// Locker closes, or the moment the lease is lost (`lost` is set then: stop acting as leader).
///
/// `term` is the lease's fencing token: every new leader's term is larger, whoever wins and in
/// whatever language, so a fence given `leadership.lease` (or the term) rejects a deposed
/// leader's writes.
#[pyclass(name = "Leadership", module = "fencelock", frozen)]
pub struct PyLeadership {
    lease: Py<PyLease>,
}

impl PyLeadership {
    pub(crate) fn new(lease: Py<PyLease>) -> Self {
        PyLeadership { lease }
    }
}

#[pymethods]
impl PyLeadership {
    /// The election's name.
    #[getter]
    fn name(&self) -> String {
        self.lease.get().core().name().to_string()
    }

    /// This leader's term: larger than every earlier leader's.
    #[getter]
    fn term(&self) -> u64 {
        self.lease.get().core().token()
    }

    /// Still the leader: neither resigned nor lost.
    #[getter]
    fn is_leader(&self) -> PyResult<bool> {
        guard(|| Ok(self.lease.get().core().is_held()))
    }

    /// The lease behind the leadership, for fences (its token is the term).
    #[getter]
    fn lease(&self, py: Python<'_>) -> Py<PyLease> {
        self.lease.clone_ref(py)
    }

    /// Set the moment leadership is lost: `lost.is_set()`, `lost.wait(timeout)`, `await lost`.
    #[getter]
    fn lost(&self) -> PyResult<PyLostSignal> {
        self.lease.get().lost()
    }

    /// Returns while leading; raises `fencelock.Lost` once leadership was lost, `NotHeld` after
    /// `resign()`.
    fn raise_if_lost(&self) -> PyResult<()> {
        self.lease.get().raise_if_lost()
    }

    /// Steps down so another candidate can lead. Raises `fencelock.Lost` if leadership was lost
    /// first, `NotHeld` if already resigned.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        self.lease.get().release(py)
    }

    /// Awaitable `resign`.
    fn resign_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.lease.get().release_async(py)
    }

    fn __repr__(&self) -> String {
        let lease = self.lease.get().core();
        let state = if lease.is_held() { "leading" } else { "ended" };
        format!(
            "<fencelock.Leadership name={:?} term={} {state}>",
            lease.name(),
            lease.token()
        )
    }
}

/// Who leads an election now, from `locker.leader(name)` (None when nobody does).
#[pyclass(name = "Leader", module = "fencelock", frozen)]
pub struct PyLeader {
    term: u64,
    holder: Option<HolderDescription>,
}

impl From<Leader> for PyLeader {
    fn from(leader: Leader) -> Self {
        PyLeader {
            term: leader.term,
            holder: leader.holder,
        }
    }
}

#[pymethods]
impl PyLeader {
    /// The leader's term (its lease's fencing token).
    #[getter]
    fn term(&self) -> u64 {
        self.term
    }

    /// The leader's description: a dict with some of host, pid, language, text.
    #[getter]
    fn holder<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.holder
            .as_ref()
            .map(|holder| holder_dict(py, holder))
            .transpose()
    }

    fn __repr__(&self) -> String {
        format!("<fencelock.Leader term={}>", self.term)
    }
}
