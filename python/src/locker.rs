//! `fencelock.Locker`, the context manager of `locker.lock(...)`, `semaphore(...)`,
//! `read_lock(...)`, `write_lock(...)` and `leadership(...)`, `LockInfo`, and `connect`; the
//! re-entry scopes of those context managers, which `lock_many(...)`'s (`multi.rs`) shares.

use std::sync::Arc;
use std::time::Duration;

use fencelock::{
    HolderDescription, LeaseInfo, Lock, LockInfo, LockKind, LockList, LockMode, LockOptions,
    Locker, Scope,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::awaitable::awaitable;
use crate::election::{PyLeader, PyLeadership};
use crate::error::{guard, invalid, to_py};
use crate::holder::holder_dict;
use crate::lease::{PyLease, exit_async, exit_blocking};
use crate::multi::{PyMultiLease, PyMultiLock, lock_names};
use crate::observe::{PyEventSubscription, ensure_log_bridge};
use crate::options::{
    LEADERSHIP_OPTIONS, LOCK_OPTIONS, LOCKER_OPTIONS, Options, TRY_LOCK_OPTIONS, acquire_options,
    locker_options, text,
};
use crate::process_locker::ProcessLocker;
use crate::runtime::{OnInterrupt, refuse_waiting_inside_event_loop, wait};
use crate::scope::{
    Claim, Entering, Scopes, claim, current_scope, drop_scopes, new_scopes, received, take,
};

/// A client bound to one backend, made by `fencelock.connect(url)`.
///
/// Shared freely between threads and asyncio tasks: they share its connections and contend
/// for locks like separate processes would. `close()` (or leaving `with connect(...) as locker:`)
/// releases every lease it still holds. Each method that waits has an `_async` twin returning an
/// awaitable; `lock()` works with both `with` and `async with`.
#[pyclass(name = "Locker", module = "fencelock", frozen)]
pub struct PyLocker {
    inner: Arc<ProcessLocker>,
}

impl PyLocker {
    pub(crate) fn new(locker: Locker) -> Self {
        PyLocker {
            inner: ProcessLocker::new(locker),
        }
    }

    pub(crate) fn forked(&self) -> bool {
        self.inner.forked()
    }

    /// Closes on the runtime (finishing even if the awaiting task is cancelled), then answers `done`.
    fn close_awaitable<'py, T>(&self, py: Python<'py>, done: T) -> PyResult<Bound<'py, PyAny>>
    where
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        if self.forked() {
            return awaitable(py, async move { Ok(done) });
        }
        let locker = self.core()?.clone();
        awaitable(py, async move {
            let rt = crate::runtime::runtime().map_err(to_py)?;
            // A task of its own, so a cancelled await does not cut the close short; with the
            // caller's context, for the spans and log records of what it releases.
            let caller = fencelock::spans::caller_context();
            let close = async move { locker.close().await };
            let _ = rt
                .spawn(fencelock::spans::in_caller_context(caller, close))
                .await;
            Ok(done)
        })
    }

    /// The core Locker, or CLOSED in a forked child.
    pub(crate) fn core(&self) -> PyResult<&Locker> {
        self.inner.core()
    }
}

#[pymethods]
impl PyLocker {
    /// A lock on `name`, to use with `with` or `async with`; nothing is sent until it is entered.
    /// The block gets the Lease; leaving it releases the lock. Leaving after the lease was lost
    /// raises `fencelock.Lost` (unless another exception is already propagating); leaving after
    /// an explicit `lease.release()` is quiet.
    ///
    /// Options: ttl (lease length in seconds or a timedelta, default 30), wait (how long to
    /// block; None = forever, 0 = try once), auto_renew (renew every ttl/3, default True),
    /// max_hold (stop renewing after this long), holder (text stored with the lock), reentrant
    /// (re-enter in the same thread or task), pipelined_release (release returns once the
    /// command is sent; its reply is checked in the background and a lock found no longer ours
    /// sets `lost`).
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn lock(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| PyLock::new(slf, &name, options, "lock", false, LockMode::Exclusive))
    }

    /// The lock `name` as a decorator: `@locker.locked("nightly", ttl=60, wait=0)` runs each
    /// call of the function, or of the coroutine function, while holding it (acquired as the
    /// call starts, released as it returns or raises); inside, `fencelock.current_lease()` is
    /// the call's Lease. The same object as `lock(name, **options)`, whose Lock is a decorator
    /// too; the options are checked here, once.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn locked(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| PyLock::new(slf, &name, options, "locked", false, LockMode::Exclusive))
    }

    /// One of `permits` permits of the semaphore `name`, to use with `with` or `async with`: at
    /// most `permits` blocks hold it at once, across every process and language; the block gets
    /// its own Lease (`mode` "permit", a token of its own) and leaving it frees the permit.
    /// Every participant must use the same `permits` (1 to 10000) while the semaphore is held or
    /// waited on (another number raises `fencelock.InvalidArgument` on entering); once it is idle
    /// a new number replaces the old. A permit's token cannot guard a `Fence`: its holders run
    /// at once. Options, waiting, errors, re-entry and the lost signal are as for `lock()`.
    /// Redlock does not offer semaphores: `fencelock.InvalidArgument`.
    #[pyo3(
        signature = (name, permits, **options),
        text_signature = "($self, name, permits, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn semaphore(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        permits: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| {
            let mode = LockMode::permit(crate::options::permits(&permits)?).map_err(to_py)?;
            PyLock::new(slf, &name, options, "semaphore", false, mode)
        })
    }

    /// The read lock of the read-write lock `name`, to use with `with` or `async with`: any
    /// number of readers hold it at once while no writer does; once a writer waits, new readers
    /// queue behind it. The block gets a Lease with `mode` "read", whose token cannot guard a
    /// `Fence`. Options, waiting, errors, re-entry and the lost signal are as for `lock()`; a
    /// thread or task holding the write lock may re-enter it as a reader with `reentrant=True`.
    /// Every backend offers read-write locks, Redlock included (docs/redlock.md).
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn read_lock(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| PyLock::new(slf, &name, options, "read_lock", false, LockMode::Read))
    }

    /// The write lock of the read-write lock `name`, to use with `with` or `async with`: one
    /// writer, while no reader holds it. The block gets a Lease with `mode` "write", whose token
    /// is larger than every earlier read or write token of the name, so it guards a `Fence` as
    /// a mutex's does. A thread or task holding the read lock that enters the write lock gets
    /// `fencelock.Deadlock` (it would wait for itself). Otherwise as `read_lock()`.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn write_lock(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| PyLock::new(slf, &name, options, "write_lock", false, LockMode::Write))
    }

    /// Leadership of the election `name`, to use with `with` or `async with`: entering
    /// campaigns (waits to acquire the election's lock, up to `wait`, forever by default) and
    /// yields a `fencelock.Leadership` whose `term` is larger than every earlier leader's; leaving
    /// resigns. Leaving after leadership was lost raises `fencelock.Lost`. Options as for `lock()`,
    /// except `reentrant` (a leader never campaigns again); with `pipelined_release`, resigning
    /// returns once the release is sent.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, pipelined_release=False)"
    )]
    fn leadership(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLock> {
        guard(|| PyLock::new(slf, &name, options, "leadership", true, LockMode::Exclusive))
    }

    /// Campaigns for `name`, calls `fn(leadership)` once leading, resigns when it returns and
    /// returns what it returned. `fn` should watch `leadership.lost` (or call
    /// `leadership.raise_if_lost()` between steps) and stop once it is set; if leadership was
    /// lost meanwhile, `fencelock.Lost` is raised after `fn` returns. Options as for `leadership()`.
    #[pyo3(
        signature = (name, func, **options),
        text_signature = "($self, name, func, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, pipelined_release=False)"
    )]
    fn run_as_leader(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        name: Bound<'_, PyAny>,
        func: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        if !func.is_callable() {
            return Err(invalid(format!(
                "run_as_leader() needs a callable taking the Leadership, not {}",
                func.get_type().name()?
            )));
        }
        let election = Bound::new(
            py,
            guard(|| {
                PyLock::new(
                    slf,
                    &name,
                    options,
                    "run_as_leader",
                    true,
                    LockMode::Exclusive,
                )
            })?,
        )?;
        let leadership = election.call_method0("__enter__")?;
        match func.call1((leadership,)) {
            Ok(result) => {
                election.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
                Ok(result.unbind())
            }
            Err(error) => {
                // The function's own exception wins over any from resigning.
                let _ = election.call_method1(
                    "__exit__",
                    (error.get_type(py), error.value(py), error.traceback(py)),
                );
                Err(error)
            }
        }
    }

    /// Who leads the election `name` now (a `fencelock.Leader` with `term` and `holder`), or
    /// None; read without campaigning.
    fn leader(&self, py: Python<'_>, name: Bound<'_, PyAny>) -> PyResult<Option<PyLeader>> {
        guard(|| {
            let name = text(&name, "election name")?;
            let locker = self.core()?.clone();
            let leader = wait(
                py,
                async move { locker.leader(&name).await },
                OnInterrupt::Cancel,
            )?;
            Ok(leader.map(PyLeader::from))
        })
    }

    /// Awaitable `leader`.
    fn leader_async<'py>(
        &self,
        py: Python<'py>,
        name: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let name = text(&name, "election name")?;
            let locker = self.core()?.clone();
            awaitable(py, async move {
                locker
                    .leader(&name)
                    .await
                    .map(|l| l.map(PyLeader::from))
                    .map_err(to_py)
            })
        })
    }

    /// Acquires `name` and returns its Lease, waiting up to `wait` seconds (forever by default).
    /// Raises `fencelock.Timeout` when the wait ends first. The GIL is released while waiting, and
    /// Ctrl-C interrupts the wait, leaving nothing behind. Options as for `lock()`.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn acquire(
        &self,
        py: Python<'_>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyLease> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let options = acquire_options(options, LOCK_OPTIONS, "acquire")?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            refuse_waiting_inside_event_loop(py)?;
            let lease = wait(
                py,
                async move { locker.acquire_in(scope, &name, &options).await },
                OnInterrupt::Cancel,
            )?;
            Ok(PyLease::new(lease))
        })
    }

    /// Tries once: the Lease, or None when somebody else holds the lock.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn try_acquire(
        &self,
        py: Python<'_>,
        name: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<PyLease>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let options = try_options(options)?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            let lease = wait(
                py,
                async move { locker.try_acquire_in(scope, &name, &options).await },
                OnInterrupt::Cancel,
            )?;
            Ok(lease.map(PyLease::new))
        })
    }

    /// Awaitable `acquire`: `lease = await locker.acquire_async(name, ...)`. Cancelling the await
    /// stops waiting and leaves nothing behind.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        name: Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let options = acquire_options(options, LOCK_OPTIONS, "acquire_async")?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            awaitable(py, async move {
                locker
                    .acquire_in(scope, &name, &options)
                    .await
                    .map(PyLease::new)
                    .map_err(to_py)
            })
        })
    }

    /// Awaitable `try_acquire`.
    #[pyo3(
        signature = (name, **options),
        text_signature = "($self, name, *, ttl=30, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn try_acquire_async<'py>(
        &self,
        py: Python<'py>,
        name: Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let options = try_options(options)?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            awaitable(py, async move {
                locker
                    .try_acquire_in(scope, &name, &options)
                    .await
                    .map(|l| l.map(PyLease::new))
                    .map_err(to_py)
            })
        })
    }

    /// A lock on every name in `names` (an iterable of str) at once, to use with `with` or
    /// `async with`: entering takes all of them or none, in one canonical order (sorted by name)
    /// whatever order they are given in, so two blocks taking overlapping sets never deadlock;
    /// the block gets a `fencelock.MultiLease`, and leaving releases every name. `wait` bounds
    /// the whole; the other options apply to each name. No names, more than 64, a name given
    /// twice or a bad name raise `fencelock.InvalidArgument` on entering, before anything is
    /// taken. Options, errors, re-entry and leaving after a loss are as for `lock()`.
    #[pyo3(
        signature = (names, **options),
        text_signature = "($self, names, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn lock_many(
        slf: &Bound<'_, Self>,
        names: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyMultiLock> {
        guard(|| PyMultiLock::new(&slf.get().inner, &names, options))
    }

    /// Acquires every name in `names` (an iterable of str) and returns their
    /// `fencelock.MultiLease`: all of them or none, taken in one canonical order (sorted by
    /// name), waiting up to `wait` seconds for the whole (forever by default). Raises
    /// `fencelock.Timeout` naming the name that stayed busy, after giving back the names
    /// already taken; `fencelock.InvalidArgument` for no names, more than 64, a name given twice
    /// or a bad name, before anything is taken. Ctrl-C interrupts the wait, leaving nothing
    /// behind. Options as for `lock()`, each applying to every name.
    #[pyo3(
        signature = (names, **options),
        text_signature = "($self, names, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn acquire_many(
        &self,
        py: Python<'_>,
        names: Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyMultiLease> {
        guard(|| {
            let names = lock_names(&names)?;
            let options = acquire_options(options, LOCK_OPTIONS, "acquire_many")?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            refuse_waiting_inside_event_loop(py)?;
            let lease = wait(
                py,
                async move {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    locker.acquire_many_in(scope, &names, &options).await
                },
                OnInterrupt::Cancel,
            )?;
            PyMultiLease::new(py, lease)
        })
    }

    /// Awaitable `acquire_many`: `lease = await locker.acquire_many_async(names, ...)`.
    /// Cancelling the await stops waiting and leaves nothing behind.
    #[pyo3(
        signature = (names, **options),
        text_signature = "($self, names, *, ttl=30, wait=None, auto_renew=True, max_hold=None, holder=None, reentrant=False, pipelined_release=False)"
    )]
    fn acquire_many_async<'py>(
        &self,
        py: Python<'py>,
        names: Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let names = lock_names(&names)?;
            let options = acquire_options(options, LOCK_OPTIONS, "acquire_many_async")?;
            let locker = self.core()?.clone();
            let scope = current_scope(py)?;
            awaitable(py, async move {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let lease = locker
                    .acquire_many_in(scope, &names, &options)
                    .await
                    .map_err(to_py)?;
                crate::exit::attach_or_exiting(|py| PyMultiLease::new(py, lease))
            })
        })
    }

    /// Who holds `name`, read without acquiring it.
    fn inspect(&self, py: Python<'_>, name: Bound<'_, PyAny>) -> PyResult<PyLockInfo> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let locker = self.core()?.clone();
            let info = wait(
                py,
                async move { locker.inspect(&name).await },
                OnInterrupt::Cancel,
            )?;
            Ok(PyLockInfo::from(info))
        })
    }

    /// Awaitable `inspect`.
    fn inspect_async<'py>(
        &self,
        py: Python<'py>,
        name: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let locker = self.core()?.clone();
            awaitable(py, async move {
                locker
                    .inspect(&name)
                    .await
                    .map(PyLockInfo::from)
                    .map_err(to_py)
            })
        })
    }

    /// The locks held now whose names start with `prefix` (plain text, no wildcards; "" for
    /// every lock), read without acquiring, sorted by name: at most 1000, with
    /// `truncated` set when more matched.
    #[pyo3(signature = (prefix=None))]
    fn list(&self, py: Python<'_>, prefix: Option<Bound<'_, PyAny>>) -> PyResult<PyLockList> {
        guard(|| {
            let prefix = prefix
                .map(|p| text(&p, "prefix"))
                .transpose()?
                .unwrap_or_default();
            let locker = self.core()?.clone();
            let listed = wait(
                py,
                async move { locker.list(&prefix).await },
                OnInterrupt::Cancel,
            )?;
            Ok(PyLockList::from(listed))
        })
    }

    /// Awaitable `list`.
    #[pyo3(signature = (prefix=None))]
    fn list_async<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let prefix = prefix
                .map(|p| text(&p, "prefix"))
                .transpose()?
                .unwrap_or_default();
            let locker = self.core()?.clone();
            awaitable(py, async move {
                locker
                    .list(&prefix)
                    .await
                    .map(PyLockList::from)
                    .map_err(to_py)
            })
        })
    }

    /// Frees `name` whoever holds it. DANGEROUS: for an operator clearing a holder that is
    /// dead or stuck. The holder is told it lost the lock at its next renewal (on ZooKeeper at
    /// once); until then two holders may run, and only fenced writes stay safe. Raises
    /// `fencelock.NotHeld` when nobody held it.
    fn force_release(&self, py: Python<'_>, name: Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let locker = self.core()?.clone();
            wait(
                py,
                async move { locker.force_release(&name).await },
                OnInterrupt::Cancel,
            )
        })
    }

    /// Awaitable `force_release`.
    fn force_release_async<'py>(
        &self,
        py: Python<'py>,
        name: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let name = text(&name, "lock name")?;
            let locker = self.core()?.clone();
            awaitable(py, async move {
                locker.force_release(&name).await.map_err(to_py)
            })
        })
    }

    /// A subscription to the lifecycle events of this Locker's leases from now on, to read
    /// from a thread of your own: `for event in locker.events(): ...`.
    fn events(&self) -> PyResult<PyEventSubscription> {
        guard(|| Ok(PyEventSubscription::new(self.core()?.subscribe())))
    }

    /// Calls `callback(event)` on a background thread for each lifecycle event of this
    /// Locker's leases ("acquired", "renewed", "renewal_retried", "suspended", "resumed",
    /// "lost", "released", and a fence's "deployment_mismatch"), in order for each lease; with `kinds`, only for those. Returns the
    /// subscription: `close()` it to stop. Exceptions in the callback are logged to the
    /// `fencelock` logger.
    #[pyo3(signature = (callback, kinds=None))]
    fn on_event<'py>(
        &self,
        py: Python<'py>,
        callback: Bound<'py, PyAny>,
        kinds: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            if !callback.is_callable() {
                return Err(crate::error::invalid("on_event needs a callable"));
            }
            let subscription = Bound::new(py, PyEventSubscription::new(self.core()?.subscribe()))?;
            py.import("fencelock._observe")?
                .call_method1("_listen", (subscription.clone(), callback, kinds))?;
            Ok(subscription.into_any())
        })
    }

    /// Releases every lease this Locker still holds and closes its connections; later calls
    /// raise `fencelock.Closed`. Closing twice is harmless. In a process forked from the one that
    /// connected, it does nothing (the parent's locks are the parent's).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        guard(|| {
            if self.forked() {
                return Ok(());
            }
            let locker = self.core()?.clone();
            wait(
                py,
                async move {
                    locker.close().await;
                    Ok(())
                },
                OnInterrupt::FinishInBackground,
            )
        })
    }

    /// Awaitable `close`.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| self.close_awaitable(py, ()))
    }

    /// Whether `close()` was called (True in a forked child, where this Locker cannot be used).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The URL, with any password redacted.
    #[getter]
    fn url(&self) -> String {
        self.inner.url()
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

    fn __aenter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let me: Py<PyLocker> = slf.unbind();
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
        let _ = (exc_type, exc_value, traceback);
        guard(|| self.close_awaitable(py, false))
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " closed" } else { "" };
        format!("<fencelock.Locker {}{state}>", self.url())
    }
}

fn try_options(options: Option<&Bound<'_, PyDict>>) -> PyResult<LockOptions> {
    if let Some(dict) = options
        && dict.contains("wait")?
    {
        return Err(invalid(
            "try_acquire() tries once and takes no wait=; use acquire(name, wait=...) to wait",
        ));
    }
    acquire_options(options, TRY_LOCK_OPTIONS, "try_acquire")
}

/// `locker.lock(name, ...)` (or `semaphore`, `read_lock`, `write_lock`): acquires when entered
/// (`with` or `async with`) and releases when left. One object may be shared by threads and
/// tasks (each entry is its own acquisition). Entering the lock again inside its own block in
/// the same thread or task re-enters it with `reentrant=True` (same lease, same token) and
/// raises `fencelock.Deadlock` without it, since that would wait forever.
#[pyclass(name = "Lock", module = "fencelock", frozen)]
pub struct PyLock {
    locker: Arc<ProcessLocker>,
    /// The name in its mode (an election's is its mutex): every kind enters through it.
    lock: Lock,
    options: LockOptions,
    scopes: Scopes<fencelock::Lease>,
    /// Made by `locker.leadership(...)`: entering yields a Leadership instead of the Lease.
    leadership: bool,
}

impl Drop for PyLock {
    fn drop(&mut self) {
        drop_scopes(&self.scopes, self.locker.forked());
    }
}

impl PyLock {
    /// The object `locker.<call>(name, **options)` returns: the core's lock of `name` in `mode`
    /// (a mutex, a semaphore's permit, a read or a write lock), which checks the name and what
    /// the backend offers.
    fn new(
        locker: &Bound<'_, PyLocker>,
        name: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
        call: &str,
        leadership: bool,
        mode: LockMode,
    ) -> PyResult<PyLock> {
        let name = text(
            name,
            if leadership {
                "election name"
            } else {
                "lock name"
            },
        )?;
        let known = if leadership {
            LEADERSHIP_OPTIONS
        } else {
            LOCK_OPTIONS
        };
        let options = acquire_options(options, known, call)?;
        let lock = locker.get().core()?.lock(&name, mode).map_err(to_py)?;
        Ok(PyLock {
            locker: locker.get().inner.clone(),
            lock,
            options,
            scopes: new_scopes(),
            leadership,
        })
    }

    /// What the `with` block gets: the Lease, or for an election the Leadership around it.
    fn entered(py: Python<'_>, lease: fencelock::Lease, leadership: bool) -> PyResult<Py<PyAny>> {
        let lease = Py::new(py, PyLease::new(lease))?;
        if leadership {
            Ok(Py::new(py, PyLeadership::new(lease))?.into_any())
        } else {
            Ok(lease.into_any())
        }
    }

    /// The lock to acquire (CLOSED in a forked child), the caller's scope, and its claim.
    fn enter(&self, py: Python<'_>) -> PyResult<(Lock, Scope, Claim<fencelock::Lease>)> {
        self.locker.core()?;
        let scope = current_scope(py)?;
        Ok((self.lock.clone(), scope, claim(&self.scopes, scope)))
    }
}

#[pymethods]
impl PyLock {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let (lock, scope, claim) = self.enter(py)?;
            let options = self.options.clone();
            refuse_waiting_inside_event_loop(py)?;
            let lease = wait(
                py,
                async move { lock.acquire_in(scope, &options).await },
                OnInterrupt::Cancel,
            )?;
            claim.fulfil(lease.clone());
            Self::entered(py, lease, self.leadership)
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
            let (lock, scope, claim) = self.enter(py)?;
            let options = self.options.clone();
            let leadership = self.leadership;
            let acquiring = awaitable(py, async move {
                let lease = lock.acquire_in(scope, &options).await.map_err(to_py)?;
                crate::exit::attach_or_exiting(|py| {
                    let entered = Self::entered(py, lease.clone(), leadership)?;
                    Py::new(py, Entering::new(claim, lease, entered))
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

    /// Used as a decorator (`@locker.lock(name, ...)`, `@locker.semaphore(...)`, ...): each call
    /// of `func` runs while holding the lock, in `with` (a function) or `async with` (a
    /// coroutine function); `fencelock.current_lease()` is the call's Lease.
    fn __call__(slf: Bound<'_, Self>, func: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let wrap = slf.py().import("fencelock._decorate")?.getattr("wrap")?;
            Ok(wrap.call1((slf, func))?.unbind())
        })
    }

    fn __repr__(&self) -> String {
        let mode = match self.lock.mode() {
            LockMode::Exclusive => String::new(),
            mode => format!(" mode={:?}", mode.to_string()),
        };
        format!(
            "<fencelock.Lock name={:?}{mode} ttl={:?} wait={:?}>",
            self.lock.name(),
            self.options.ttl,
            self.options.wait
        )
    }
}

/// What a backend knows about one lock, read by `locker.inspect(name)`.
#[pyclass(name = "LockInfo", module = "fencelock", frozen)]
pub struct PyLockInfo {
    name: String,
    held: bool,
    token: Option<u64>,
    holder: Option<HolderDescription>,
    time_left: Option<Duration>,
    waiters: Vec<(String, Option<HolderDescription>)>,
    kind: LockKind,
    permits: Option<u32>,
    leases: Vec<LeaseInfo>,
}

impl From<LockInfo> for PyLockInfo {
    fn from(info: LockInfo) -> Self {
        PyLockInfo {
            holder: info.holder_description(),
            name: info.name,
            held: info.held,
            token: info.token,
            time_left: info.time_left,
            waiters: info
                .waiters
                .into_iter()
                .map(|w| (w.node, w.holder.as_deref().map(HolderDescription::parse)))
                .collect(),
            kind: info.kind,
            permits: info.permits,
            leases: info.leases,
        }
    }
}

/// The held locks whose names start with a prefix, by name (`locker.list(prefix)`): a
/// sequence of `LockInfo`, plus `truncated` when more than 1000 matched.
#[pyclass(name = "LockList", module = "fencelock", frozen, sequence)]
pub struct PyLockList {
    locks: Vec<LockInfo>,
    truncated: bool,
}

impl From<LockList> for PyLockList {
    fn from(list: LockList) -> Self {
        PyLockList {
            locks: list.locks,
            truncated: list.truncated,
        }
    }
}

#[pymethods]
impl PyLockList {
    /// More than 1000 locks matched: only the first ones by name are here.
    #[getter]
    fn truncated(&self) -> bool {
        self.truncated
    }

    fn __len__(&self) -> usize {
        self.locks.len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let infos = self
            .locks
            .iter()
            .map(|info| Bound::new(py, PyLockInfo::from(info.clone())))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(pyo3::types::PyList::new(py, infos)?
            .into_any()
            .try_iter()?
            .into_any())
    }

    fn __getitem__(&self, index: isize) -> PyResult<PyLockInfo> {
        let len = self.locks.len() as isize;
        let at = if index < 0 { index + len } else { index };
        if at < 0 || at >= len {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "LockList index out of range",
            ));
        }
        Ok(PyLockInfo::from(self.locks[at as usize].clone()))
    }

    fn __repr__(&self) -> String {
        let names: Vec<String> = self.locks.iter().map(|l| format!("{:?}", l.name)).collect();
        format!(
            "<fencelock.LockList [{}]{}>",
            names.join(", "),
            if self.truncated { " truncated" } else { "" }
        )
    }
}

#[pymethods]
impl PyLockInfo {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether somebody holds the lock now.
    #[getter]
    fn held(&self) -> bool {
        self.held
    }

    /// The last token minted for this name, in any mode (a mutex holder's, while held); None if
    /// never taken.
    #[getter]
    fn token(&self) -> Option<u64> {
        self.token
    }

    /// A mutex holder's description while held: a dict with some of host, pid, language, text
    /// (a semaphore's or read-write lock's holders are in `leases`).
    #[getter]
    fn holder<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.holder
            .as_ref()
            .map(|holder| holder_dict(py, holder))
            .transpose()
    }

    /// Seconds left on the backend's clock while a mutex is held; None when free or unknown.
    #[getter]
    fn time_left(&self) -> Option<f64> {
        self.time_left.map(|d| d.as_secs_f64())
    }

    /// What the name is used as: "mutex" (also for a name nobody uses), "semaphore" or
    /// "read-write lock".
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind.as_str()
    }

    /// A semaphore's number of permits, as its holders and waiters use it; None for the other
    /// kinds.
    #[getter]
    fn permits(&self) -> Option<u32> {
        self.permits
    }

    /// Every holder of a semaphore or read-write lock (empty for a mutex, whose one holder is in
    /// `holder`, `token` and `time_left`): dicts with `mode` ("permit", "read" or "write"),
    /// `token`, `holder` (a dict as `holder`) and `time_left` (seconds), each None when unknown.
    #[getter]
    fn leases<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.leases
            .iter()
            .map(|lease| {
                let dict = PyDict::new(py);
                dict.set_item("mode", lease.mode.as_str())?;
                dict.set_item("token", lease.token)?;
                let holder = lease.holder_description();
                dict.set_item("holder", holder.map(|h| holder_dict(py, &h)).transpose()?)?;
                dict.set_item("time_left", lease.time_left.map(|d| d.as_secs_f64()))?;
                Ok(dict)
            })
            .collect()
    }

    /// The waiters behind the holders, first in line first, where the backend keeps them
    /// (ZooKeeper's queue; a waiting semaphore permit or writer on the other backends; empty for
    /// a mutex's waiters there, which do not register): dicts with `node` and, when known,
    /// `holder`.
    #[getter]
    fn waiters<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.waiters
            .iter()
            .map(|(node, holder)| {
                let dict = PyDict::new(py);
                dict.set_item("node", node)?;
                if let Some(holder) = holder {
                    dict.set_item("holder", holder_dict(py, holder)?)?;
                }
                Ok(dict)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        if self.kind != LockKind::Mutex {
            let permits = self
                .permits
                .map(|p| format!(" permits={p}"))
                .unwrap_or_default();
            return format!(
                "<fencelock.LockInfo name={:?} {}{permits} leases={}>",
                self.name,
                self.kind,
                self.leases.len()
            );
        }
        match (self.held, self.token) {
            (true, Some(token)) => format!(
                "<fencelock.LockInfo name={:?} held token={token}>",
                self.name
            ),
            (_, Some(token)) => format!(
                "<fencelock.LockInfo name={:?} free last_token={token}>",
                self.name
            ),
            _ => format!("<fencelock.LockInfo name={:?} free>", self.name),
        }
    }
}

/// Connects to the backend that `url` selects and returns a Locker.
///
/// The scheme picks the backend: `sqlite:///abs/path.db` (a local file, no server), and
/// redis://, rediss://, redis+cluster://, redlock://, zk://, postgres://, mysql:// as this build
/// of fencelock includes them (one that is not raises InvalidArgument saying so). Options:
/// poll_interval (the fallback poll while waiting, default 0.05 s), operation_timeout (how long
/// one backend operation may take, default 10 s), metrics (True records the Locker's metrics
/// into OpenTelemetry's Python API, which must be installed) and tracing (True makes spans of its
/// acquires, releases, extends and renewals through OpenTelemetry's Python API, children of the
/// caller's current span). Passwords never appear in errors or reprs.
///
/// Use it as `with fencelock.connect(url) as locker:` to release everything on exit.
#[pyfunction]
#[pyo3(signature = (url, **options), text_signature = "(url, *, poll_interval=None, operation_timeout=None, metrics=False, tracing=False)")]
pub(crate) fn connect(
    py: Python<'_>,
    url: Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<PyLocker> {
    guard(|| {
        let url = text(&url, "url")?;
        let options = locker_options(py, &Options::check(options, LOCKER_OPTIONS, "connect")?)?;
        ensure_log_bridge(py)?;
        let locker = wait(
            py,
            async move { Locker::connect_with(&url, options).await },
            OnInterrupt::Cancel,
        )?;
        Ok(PyLocker::new(locker))
    })
}

/// Awaitable `connect`: `locker = await fencelock.connect_async(url)`. The Locker is the same
/// class; use its `_async` methods and `async with` in asyncio code.
#[pyfunction]
#[pyo3(signature = (url, **options), text_signature = "(url, *, poll_interval=None, operation_timeout=None, metrics=False, tracing=False)")]
pub(crate) fn connect_async<'py>(
    py: Python<'py>,
    url: Bound<'py, PyAny>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        let url = text(&url, "url")?;
        let options = locker_options(
            py,
            &Options::check(options, LOCKER_OPTIONS, "connect_async")?,
        )?;
        ensure_log_bridge(py)?;
        awaitable(py, async move {
            Locker::connect_with(&url, options)
                .await
                .map(PyLocker::new)
                .map_err(to_py)
        })
    })
}
