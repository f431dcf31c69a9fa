//! `lease.lost`: the core's lost signal, with an Event-like face (`is_set()`, `wait()`) and
//! `await lease.lost`.

use std::time::Instant;

use fencelock::{LossReason, LostSignal};
use pyo3::prelude::*;

use crate::awaitable::awaitable;
use crate::error::guard;
use crate::options::optional_duration;
use crate::runtime::SLICE;

/// The short, stable spelling of a loss reason.
pub(crate) fn reason_code(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::TakenOver => "taken_over",
        LossReason::SessionExpired => "session_expired",
    }
}

/// Set once, when its lease is lost (expired, taken over, session ended); never cleared.
///
/// Like `threading.Event`: `is_set()`, and `wait(timeout=None) -> bool`, which releases the GIL
/// and can be interrupted with Ctrl-C. In asyncio, `await lease.lost` completes when it is set
/// (wrap it in a task or `asyncio.wait_for` to stop waiting). The signal is set by fencelock's own
/// threads, so it fires even while every Python thread is busy.
#[pyclass(name = "LostSignal", module = "fencelock", frozen)]
pub struct PyLostSignal {
    signal: LostSignal,
}

impl PyLostSignal {
    pub(crate) fn new(signal: LostSignal) -> Self {
        PyLostSignal { signal }
    }
}

#[pymethods]
impl PyLostSignal {
    /// Whether the lease has been lost.
    fn is_set(&self) -> PyResult<bool> {
        guard(|| Ok(self.signal.is_set()))
    }

    /// Why the lease was lost: "expired", "taken_over" or "session_expired"; None while held.
    #[getter]
    fn reason(&self) -> PyResult<Option<&'static str>> {
        guard(|| Ok(self.signal.reason().map(reason_code)))
    }

    /// Blocks until the lease is lost or `timeout` seconds (int, float or timedelta) pass;
    /// returns whether it is lost. None waits forever. The GIL is released while waiting.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<Bound<'_, PyAny>>) -> PyResult<bool> {
        guard(|| {
            let timeout = optional_duration(timeout.as_ref(), "timeout")?;
            // A timeout too long to add to the clock waits forever.
            let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            let wake_every = crate::exit::wake_every(SLICE);
            loop {
                let slice = match deadline {
                    Some(deadline) => deadline
                        .saturating_duration_since(Instant::now())
                        .min(wake_every),
                    None => wake_every,
                };
                let signal = self.signal.clone();
                if crate::exit::detach(py, move || signal.wait_blocking(Some(slice))) {
                    return Ok(true);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(false);
                }
                py.check_signals()?;
            }
        })
    }

    /// `await lease.lost` completes (with True) when the lease is lost.
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let signal = self.signal.clone();
            let future = awaitable(py, async move {
                signal.wait().await;
                Ok(true)
            })?;
            future.call_method0("__await__")
        })
    }

    fn __repr__(&self) -> String {
        match self.signal.reason() {
            Some(reason) => format!("<fencelock.LostSignal set: {}>", reason_code(reason)),
            None => "<fencelock.LostSignal not set>".to_string(),
        }
    }
}
