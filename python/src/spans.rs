//! `connect(url, tracing=True)` and `Fence.open(..., tracing=True)`: the core's spans made
//! through OpenTelemetry's Python API (`opentelemetry.trace.get_tracer("fencelock")`), so they
//! reach whatever provider and exporter the application set up, and the caller's context that
//! every call carries into the core for its spans and its log records.
//!
//! A call captures its caller's `contextvars` on the calling thread ([`caller_context`]): the
//! parent of its span is the OpenTelemetry context current there, and the log records it
//! produces are handled in it (`fencelock._observe`), so filters and formatters that read
//! context variables see the request's. The spans themselves are made on a thread of their own,
//! a batch per GIL acquisition, with the operation's own start and end times, so lock
//! operations never wait for the GIL.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock::LogLevel;
use fencelock::spans::{
    AcquireLinks, AttributeValue, CallerContext, SpanKind, SpanRecord, SpanSink,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::error::{invalid, to_py};

/// Set once a Locker or Fence of this process traces: from then on every call captures its
/// caller's context (before, only when log records may use it).
static TRACING: AtomicBool = AtomicBool::new(false);

/// The `contextvars.Context` a call was made in.
pub(crate) struct PyCallerContext(pub(crate) Py<PyAny>);

/// The calling thread's `contextvars`, copied, when a span or a log record may use them: at
/// no more cost than two flag checks when neither does.
pub(crate) fn caller_context(py: Python<'_>) -> Option<CallerContext> {
    if !TRACING.load(Ordering::Relaxed) && !fencelock::logs::enabled(LogLevel::Error) {
        return None;
    }
    static COPY_CONTEXT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let copy = COPY_CONTEXT
        .get_or_try_init(py, || {
            py.import("contextvars")?
                .getattr("copy_context")
                .map(Bound::unbind)
        })
        .ok()?;
    let context = copy.call0(py).ok()?;
    Some(CallerContext::new(PyCallerContext(context)))
}

/// What the sink calls in OpenTelemetry's API, looked up once at connect.
struct Api {
    tracer: Py<PyAny>,
    link: Py<PyAny>,
    client: Py<PyAny>,
    status: Py<PyAny>,
    error: Py<PyAny>,
    get_current: Py<PyAny>,
    empty_context: Py<PyAny>,
}

/// A sink that makes the host's spans, looked up now (with the GIL).
pub(crate) fn host_sink(py: Python<'_>) -> PyResult<Arc<dyn SpanSink>> {
    let trace = py.import("opentelemetry.trace").map_err(|_| {
        invalid(
            "tracing=True makes spans through OpenTelemetry's Python API, which is not \
             installed: pip install opentelemetry-api (and an SDK with an exporter to see them)",
        )
    })?;
    let context = py.import("opentelemetry.context")?;
    let api = Api {
        tracer: trace.call_method1("get_tracer", ("fencelock",))?.unbind(),
        link: trace.getattr("Link")?.unbind(),
        client: trace.getattr("SpanKind")?.getattr("CLIENT")?.unbind(),
        status: trace.getattr("Status")?.unbind(),
        error: trace.getattr("StatusCode")?.getattr("ERROR")?.unbind(),
        get_current: context.getattr("get_current")?.unbind(),
        empty_context: context.getattr("Context")?.unbind(),
    };
    TRACING.store(true, Ordering::Relaxed);
    let mut acquires = AcquireLinks::<Py<PyAny>>::new();
    fencelock::spans::on_own_thread("fencelock-spans", move |batch: &[SpanRecord]| {
        // One GIL acquisition for everything that queued up meanwhile; none once the
        // interpreter exits, when the batch is dropped.
        let _ = crate::exit::attach(|py| {
            for record in batch {
                // A span the host refuses is lost alone; the next ones still go.
                drop(make_span(py, &api, &mut acquires, record));
            }
        });
    })
    .map_err(to_py)
}

fn nanoseconds(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

fn make_span(
    py: Python<'_>,
    api: &Api,
    acquires: &mut AcquireLinks<Py<PyAny>>,
    record: &SpanRecord,
) -> PyResult<()> {
    let caller = record
        .caller
        .as_ref()
        .and_then(|c| c.downcast_ref::<PyCallerContext>());
    // A renewal is a root span: no call made it.
    let parent = match (record.kind, caller) {
        (SpanKind::Renewal, _) | (_, None) => api.empty_context.call0(py)?,
        (_, Some(caller)) => caller.0.call_method1(py, "run", (&api.get_current,))?,
    };
    let attributes = PyDict::new(py);
    for (key, value) in record.attributes() {
        match value {
            AttributeValue::Text(text) => attributes.set_item(key, text)?,
            AttributeValue::Owned(text) => attributes.set_item(key, text)?,
            AttributeValue::Int(number) => attributes.set_item(key, number)?,
        }
    }
    let links = PyList::empty(py);
    if record.kind == SpanKind::Renewal
        && let Some(acquire) = acquires.acquire_of(record.lease)
    {
        links.append(api.link.call1(py, (acquire.clone_ref(py),))?)?;
    }
    let options = PyDict::new(py);
    options.set_item("context", parent)?;
    options.set_item("kind", &api.client)?;
    options.set_item("attributes", attributes)?;
    options.set_item("links", links)?;
    options.set_item("start_time", nanoseconds(record.start))?;
    let span =
        api.tracer
            .bind(py)
            .call_method("start_span", (record.kind.name(),), Some(&options))?;
    if let Some(code) = record.error_code {
        span.call_method1("set_status", (api.status.call1(py, (&api.error, code))?,))?;
    }
    let context = span.call_method0("get_span_context")?.unbind();
    acquires.note(record, || context);
    let end = PyDict::new(py);
    end.set_item("end_time", nanoseconds(record.end))?;
    span.call_method("end", (), Some(&end))?;
    Ok(())
}
