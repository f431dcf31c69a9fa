//! The blocks of `lock()` and `lock_many()` objects: the scope (task or thread) each is entered
//! in, the lease each holds, and the hand-over of an `async with` block's lease to its task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fencelock::Scope;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The caller's execution scope for re-entry: its asyncio task, else its thread
/// (`fencelock._scope.current_scope`, where the reasons are written down).
pub(crate) fn current_scope(py: Python<'_>) -> PyResult<Scope> {
    static CURRENT_SCOPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let function = CURRENT_SCOPE.get_or_try_init(py, || {
        py.import("fencelock._scope")?
            .getattr("current_scope")
            .map(Bound::unbind)
    })?;
    let number: u64 = function.call0(py)?.extract(py)?;
    Ok(Scope::new(number))
}

/// The leases of one `lock()` (or `lock_many()`) object's open `with` blocks, per scope,
/// innermost last (nested blocks of one object need a stack: with `reentrant=True` they nest).
/// `None` while that block is still acquiring.
pub(crate) type Scopes<L> = Arc<Mutex<HashMap<Scope, Vec<Option<L>>>>>;

pub(crate) fn new_scopes<L>() -> Scopes<L> {
    Arc::new(Mutex::new(HashMap::new()))
}

pub(crate) fn scopes_lock<L>(
    scopes: &Scopes<L>,
) -> std::sync::MutexGuard<'_, HashMap<Scope, Vec<Option<L>>>> {
    scopes.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens a block in `scope`: its lease comes with [`Claim::fulfil`].
pub(crate) fn claim<L>(scopes: &Scopes<L>, scope: Scope) -> Claim<L> {
    scopes_lock(scopes).entry(scope).or_default().push(None);
    Claim {
        scopes: scopes.clone(),
        scope,
        done: false,
    }
}

/// Closes the innermost block of `scope`: its lease, if its acquire completed. A block left from
/// another task or thread than the one that entered it (an async generator whose steps run in
/// separate tasks, an `AsyncExitStack` closed elsewhere) finds nothing in its own scope: then
/// the object's only open block is closed. Never nothing for a block that holds a lease: when
/// several blocks are open elsewhere, which one is meant cannot be told, and that is an error.
pub(crate) fn take<L>(scopes: &Scopes<L>, scope: Scope) -> PyResult<Option<L>> {
    let mut scopes = scopes_lock(scopes);
    let scope = if scopes.contains_key(&scope) {
        scope
    } else {
        let mut open = scopes
            .iter()
            .filter(|(_, stack)| stack.iter().any(Option::is_some))
            .map(|(scope, _)| *scope);
        match (open.next(), open.next()) {
            (None, _) => return Ok(None),
            (Some(only), None) => only,
            (Some(_), Some(_)) => {
                return Err(PyRuntimeError::new_err(
                    "this lock's block is left in another task or thread than the one that \
                     entered it, and several of its blocks are open elsewhere: which one to \
                     release cannot be told; leave a block in the task or thread that entered it",
                ));
            }
        }
    };
    let Some(stack) = scopes.get_mut(&scope) else {
        return Ok(None);
    };
    let lease = stack.pop().flatten();
    if stack.is_empty() {
        scopes.remove(&scope);
    }
    Ok(lease)
}

/// In a forked child, the parent's leases of open blocks are forgotten, never dropped.
pub(crate) fn drop_scopes<L>(scopes: &Scopes<L>, forked: bool) {
    let scopes = std::mem::take(&mut *scopes_lock(scopes));
    if !scopes.is_empty() && forked {
        std::mem::forget(scopes);
    }
}

/// A `with` block being entered: removed again if its acquire never completes (an error, a
/// Ctrl-C, a cancelled task), so the block's exit finds nothing of it.
pub(crate) struct Claim<L> {
    scopes: Scopes<L>,
    scope: Scope,
    done: bool,
}

impl<L> Claim<L> {
    pub(crate) fn fulfil(mut self, lease: L) {
        let mut scopes = scopes_lock(&self.scopes);
        if let Some(slot) = scopes
            .get_mut(&self.scope)
            .and_then(|stack| stack.last_mut())
        {
            *slot = Some(lease);
        }
        self.done = true;
    }
}

impl<L> Drop for Claim<L> {
    fn drop(&mut self) {
        if !self.done {
            let mut scopes = scopes_lock(&self.scopes);
            if let Some(stack) = scopes.get_mut(&self.scope) {
                stack.pop();
                if stack.is_empty() {
                    scopes.remove(&self.scope);
                }
            }
        }
    }
}

/// An `async with` block's acquisition on its way to the block's task. The acquire completes on
/// the runtime, but asyncio hands its result to the task later, on the event loop, and drops it
/// when the task was cancelled meanwhile (`awaitable.rs` checks the future before it sets
/// the result). So the lease goes into its Lock's table only when the task receives it: `receive`,
/// called by `fencelock._scope.entered` in the same step as the await returns. Dropped without
/// being received, this drops the block's claim and the lease, which is then released in the
/// background: a lease the caller can no longer receive is not kept.
#[pyclass(module = "fencelock._native", name = "_Entering", frozen)]
pub(crate) struct Entering {
    record: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    entered: Py<PyAny>,
}

impl Entering {
    /// `lease` to record under `claim` once received, and `entered`, what the block binds.
    pub(crate) fn new<L: Send + 'static>(claim: Claim<L>, lease: L, entered: Py<PyAny>) -> Self {
        Entering {
            record: Mutex::new(Some(Box::new(move || claim.fulfil(lease)))),
            entered,
        }
    }
}

#[pymethods]
impl Entering {
    /// Records the block's lease in its Lock's table; what `async with ... as x` binds.
    fn receive(&self, py: Python<'_>) -> Py<PyAny> {
        let record = self.record.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(record) = record {
            record();
        }
        self.entered.clone_ref(py)
    }
}

/// `__aenter__`'s awaitable: `acquiring` (which yields an [`Entering`]) received by the task
/// (`fencelock._scope.entered`).
pub(crate) fn received<'py>(
    py: Python<'py>,
    acquiring: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static ENTERED: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let entered = ENTERED.get_or_try_init(py, || {
        py.import("fencelock._scope")?
            .getattr("entered")
            .map(Bound::unbind)
    })?;
    entered.bind(py).call1((acquiring,))
}
