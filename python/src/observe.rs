//! Lifecycle events and log records as Python sees them: `EventSubscription` and `LockEvent`
//! (from `locker.events()` / `locker.on_event(...)`), and `_LogSubscription`, which
//! `fencelock._observe` drains into `logging.getLogger("fencelock")`.
//!
//! The core pushes events and records into queues; Python threads take them out here, waiting
//! with the GIL released. No tokio worker and no core thread ever takes the GIL for them, so a
//! Python thread holding the GIL while it waits on the runtime cannot deadlock with logging.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{EventSubscription, LockEvent, LogLevel, LogRecord, LogSubscription};
use pyo3::prelude::*;

use crate::error::guard;
use crate::options::duration;

/// Waits in slices with the GIL released, checking for signals between them, so Ctrl-C
/// interrupts a wait for the next event.
const SLICE: Duration = Duration::from_millis(200);

fn wait_for<T: Send>(
    py: Python<'_>,
    timeout: Option<Duration>,
    mut next: impl FnMut(Duration) -> Option<T> + Send,
    ended: impl Fn() -> bool,
) -> PyResult<Option<T>> {
    // A timeout too long for the clock (years) waits as if unbounded.
    let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
    let wake_every = crate::exit::wake_every(SLICE);
    loop {
        let slice = match deadline {
            None => wake_every,
            Some(d) => d
                .saturating_duration_since(std::time::Instant::now())
                .min(wake_every),
        };
        if let Some(item) = crate::exit::detach(py, || next(slice)) {
            return Ok(Some(item));
        }
        if ended() || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(None);
        }
        py.check_signals()?;
    }
}

fn epoch_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One thing that happened to one lease.
#[pyclass(name = "LockEvent", module = "fencelock", frozen)]
pub struct PyLockEvent {
    event: LockEvent,
}

#[pymethods]
impl PyLockEvent {
    /// "acquired", "renewed", "renewal_retried", "suspended", "resumed", "lost", "released" or
    /// "deployment_mismatch" (a fence's warning, docs/design.md §3.7).
    #[getter]
    fn kind(&self) -> &'static str {
        self.event.kind.as_str()
    }

    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.event.name
    }

    /// The lease's fencing token.
    #[getter]
    fn token(&self) -> u64 {
        self.event.token
    }

    /// The backend: "redis", "zookeeper", "postgres", ...
    #[getter]
    fn backend(&self) -> &'static str {
        self.event.backend.as_str()
    }

    /// When it happened, in seconds since the epoch (as `time.time()`).
    #[getter]
    fn timestamp(&self) -> f64 {
        epoch_seconds(self.event.at)
    }

    /// Why: the loss reason, the renewal error, ...; None when there is nothing to say.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.event.reason.as_deref()
    }

    fn __repr__(&self) -> String {
        format!(
            "<fencelock.LockEvent {} name={:?} token={}>",
            self.kind(),
            self.event.name,
            self.event.token
        )
    }
}

/// The lifecycle events of a Locker's leases, in order for each lease: iterate it (blocking),
/// or call `next(timeout)`. Made by `locker.events()`; `close()` (or closing the Locker) ends it.
#[pyclass(name = "EventSubscription", module = "fencelock", frozen)]
pub struct PyEventSubscription {
    inner: EventSubscription,
}

impl PyEventSubscription {
    pub(crate) fn new(inner: EventSubscription) -> Self {
        PyEventSubscription { inner }
    }
}

#[pymethods]
impl PyEventSubscription {
    /// The next event, waiting up to `timeout` seconds (None: until there is one or the
    /// subscription ends). Returns None on timeout or once ended and drained.
    #[pyo3(signature = (timeout=None))]
    fn next(
        &self,
        py: Python<'_>,
        timeout: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyLockEvent>> {
        guard(|| {
            let timeout = timeout.map(|t| duration(&t, "timeout")).transpose()?;
            let event = wait_for(
                py,
                timeout,
                |slice| self.inner.recv_blocking(Some(slice)),
                || self.inner.is_closed(),
            )?;
            Ok(event.map(|event| PyLockEvent { event }))
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyLockEvent>> {
        self.next(py, None)
    }

    /// How many events were dropped because 10,000 waited unread.
    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    /// Whether it ended (closed, or its Locker closed).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Unsubscribes; events already queued can still be read.
    fn close(&self) {
        self.inner.close();
    }
}

fn core_level(python_level: i64) -> LogLevel {
    match python_level {
        i64::MIN..=10 => LogLevel::Debug,
        11..=20 => LogLevel::Info,
        21..=30 => LogLevel::Warn,
        _ => LogLevel::Error,
    }
}

fn python_level(level: LogLevel) -> i64 {
    match level {
        LogLevel::Error => 40,
        LogLevel::Warn => 30,
        LogLevel::Info => 20,
        LogLevel::Debug | LogLevel::Trace => 10,
    }
}

/// A record as the bridge reads it: `(levelno, message, lock, created)`.
type RecordTuple = (i64, String, Option<String>, f64, Option<Py<PyAny>>);

/// fencelock's log records at `level` (a `logging` level number) and above, for the bridge in
/// `fencelock._observe` only.
#[pyclass(name = "_LogSubscription", module = "fencelock._native", frozen)]
pub struct PyLogSubscription {
    inner: std::sync::Mutex<LogSubscription>,
}

#[pymethods]
impl PyLogSubscription {
    #[new]
    fn new(level: i64) -> Self {
        PyLogSubscription {
            inner: std::sync::Mutex::new(fencelock::logs::subscribe(core_level(level))),
        }
    }

    /// The next record as `(levelno, message, lock or None, created, context or None)`, waiting
    /// up to `timeout` seconds with the GIL released; None on timeout. `context` is the
    /// `contextvars.Context` of the call the record was produced under, to handle it in.
    fn next(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<RecordTuple>> {
        guard(|| {
            // NaN (which `clamp` keeps) waits not at all; from_secs_f64 would panic on it.
            let seconds = if timeout.is_nan() {
                0.0
            } else {
                timeout.clamp(0.0, 3600.0)
            };
            let timeout = Duration::from_secs_f64(seconds);
            let inner = &self.inner;
            let record: Option<LogRecord> = crate::exit::detach(py, || {
                let sub = inner.lock().unwrap_or_else(|e| e.into_inner());
                sub.recv_blocking(Some(timeout))
            });
            Ok(record.map(|r| {
                (
                    python_level(r.level),
                    r.message,
                    r.lock,
                    epoch_seconds(r.at),
                    r.caller
                        .as_ref()
                        .and_then(|c| c.downcast_ref::<crate::spans::PyCallerContext>())
                        .map(|c| c.0.clone_ref(py)),
                )
            }))
        })
    }

    /// Follows the `fencelock` logger's effective level.
    fn set_level(&self, level: i64) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_level(core_level(level));
    }

    fn close(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).close();
    }
}

/// Starts the bridge from the core's log records to `logging.getLogger("fencelock")` (once per
/// process; again in a child after fork).
pub(crate) fn ensure_log_bridge(py: Python<'_>) -> PyResult<()> {
    py.import("fencelock._observe")?
        .call_method0("_ensure_log_bridge")?;
    Ok(())
}
