//! `fencelock._native`: the Python face of the `fencelock` core.
//!
//! The source files mirror the core's modules: `locker.rs` (Locker, the `with` objects of
//! `lock()`, `semaphore()`, `read_lock()`, `write_lock()` and `leadership()`, `connect`),
//! `lease.rs`, `multi.rs` (`lock_many()`'s `with` object and the MultiLease), `signal.rs` (the
//! lost signal), `fence.rs`, `error.rs` (the one mapping of error codes to Python exceptions),
//! `options.rs` (Python arguments to core options) and `runtime.rs` (the process's tokio
//! runtime, and how Python waits on it); `contract.rs` hands the core's contract
//! (docs/design.md §9.3) to the tests. The pure-Python package (`python/fencelock/`) defines
//! the exception classes and re-exports all of this.
//!
//! No panic crosses into Python: every exported function runs inside `error::guard`, and every
//! awaitable inside a `catch_unwind`, so a panic surfaces as `fencelock.InternalError`.

use pyo3::prelude::*;

mod awaitable;
mod contract;
mod election;
mod error;
mod exit;
mod fence;
mod holder;
mod lease;
mod locker;
mod metrics;
mod multi;
mod observe;
mod options;
mod process_locker;
mod runtime;
mod scope;
mod signal;
mod spans;
#[cfg(feature = "test-hooks")]
mod test_hooks;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<locker::PyLocker>()?;
    m.add_class::<locker::PyLock>()?;
    m.add_class::<locker::PyLockInfo>()?;
    m.add_class::<locker::PyLockList>()?;
    m.add_class::<scope::Entering>()?;
    m.add_class::<observe::PyLockEvent>()?;
    m.add_class::<observe::PyEventSubscription>()?;
    m.add_class::<observe::PyLogSubscription>()?;
    m.add_class::<lease::PyLease>()?;
    m.add_class::<multi::PyMultiLease>()?;
    m.add_class::<multi::PyMultiLock>()?;
    m.add_class::<signal::PyLostSignal>()?;
    m.add_class::<fence::PyFence>()?;
    m.add_class::<election::PyLeadership>()?;
    m.add_class::<election::PyLeader>()?;
    m.add_function(wrap_pyfunction!(locker::connect, m)?)?;
    m.add_function(wrap_pyfunction!(locker::connect_async, m)?)?;
    contract::register(m)?;
    exit::register(m)?;
    #[cfg(feature = "test-hooks")]
    test_hooks::register(m)?;
    Ok(())
}
