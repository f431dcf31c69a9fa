//! Awaitable calls: the core future runs on this process's runtime, and its answer is handed to
//! the caller's asyncio event loop, which is never blocked.
//!
//! The answer is handed over on a thread of the runtime's blocking pool, never on a worker
//! (waiting there for the GIL would stall every other task), through the exit gate
//! (`exit::attach`): once the interpreter is exiting, an answer is dropped instead. Cancelling
//! the asyncio future drops the core future at its next await, on the runtime.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCFunction, PyTuple};

use crate::error::{guard, panic_to_py, to_py};
use crate::runtime::runtime;

/// Turns `fut` into an asyncio future on the running event loop (RuntimeError outside one). A
/// panic inside becomes `fencelock.InternalError`; cancelling the asyncio future drops `fut`.
pub(crate) fn awaitable<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let rt = runtime().map_err(to_py)?;
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()?;
    let future = event_loop.call_method0("create_future")?;
    let fut = fencelock::spans::in_caller_context(crate::spans::caller_context(py), fut);
    let answer_to = (event_loop.unbind(), future.clone().unbind());
    let task = rt.spawn(async move {
        let outcome = match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(result) => result,
            Err(payload) => Err(panic_to_py(payload)),
        };
        drop(tokio::task::spawn_blocking(move || {
            hand_over(answer_to, outcome);
        }));
    });
    let abort = task.abort_handle();
    let on_done = PyCFunction::new_closure(py, None, None, move |args, _| {
        guard(|| {
            if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
                abort.abort();
            }
            Ok(())
        })
    })?;
    future.call_method1("add_done_callback", (on_done,))?;
    Ok(future)
}

/// Hands `outcome` to the event loop, which sets it on `future` unless it was cancelled
/// meanwhile. Nothing is handed over once the interpreter is exiting, nor to a loop that was
/// closed: nobody is left to await it.
fn hand_over<T>((event_loop, future): (Py<PyAny>, Py<PyAny>), outcome: PyResult<T>)
where
    T: for<'a> IntoPyObject<'a>,
{
    let _ = crate::exit::attach(|py| -> PyResult<()> {
        let future = future.bind(py);
        if future.call_method0("cancelled")?.is_truthy()? {
            return Ok(());
        }
        let (set, value) = match outcome.and_then(|value| value.into_py_any(py)) {
            Ok(value) => (future.getattr("set_result")?, value),
            Err(err) => (
                future.getattr("set_exception")?,
                err.into_value(py).into_any(),
            ),
        };
        event_loop.bind(py).call_method1(
            "call_soon_threadsafe",
            (set_unless_cancelled(py)?, future, set, value),
        )?;
        Ok(())
    });
}

/// `(future, set, value)`: `set(value)` unless `future` was cancelled; run on the loop's thread.
fn set_unless_cancelled(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static SETTER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    SETTER
        .get_or_try_init(py, || {
            PyCFunction::new_closure(py, None, None, |args: &Bound<'_, PyTuple>, _| {
                guard(|| {
                    let (future, set, value): (
                        Bound<'_, PyAny>,
                        Bound<'_, PyAny>,
                        Bound<'_, PyAny>,
                    ) = args.extract()?;
                    if !future.call_method0("cancelled")?.is_truthy()? {
                        set.call1((value,))?;
                    }
                    Ok(())
                })
            })
            .map(|f| f.into_any().unbind())
        })
        .map(|f| f.bind(py))
}
