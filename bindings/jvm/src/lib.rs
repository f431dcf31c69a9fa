//! The native library of the JVM package `dev.fencelock`: the Kotlin/Java face of the
//! `fencelock` core, exported with uniffi.
//!
//! The source files mirror the core's modules and the other bindings': `locker.rs` (Locker,
//! `connect`, the acquire of every mode, lock info), `mode.rs` (lock modes and kinds: mutex,
//! semaphore, read-write lock), `lease.rs` (Lease and its lost signal), `multi.rs` (several
//! names as one lock: the multi-name acquire and its lease), `election.rs` (campaign,
//! leader), `fence.rs`, `handoff.rs` (how an async acquire's lease reaches Kotlin without being lost to a
//! cancellation), `observe.rs` (lifecycle events and log records), `error.rs` (the one
//! mapping of core errors and panics), `options.rs` (JVM values to core options), `runtime.rs`
//! (the one tokio runtime, and how its futures reach Kotlin) and `contract.rs` (the core's
//! contract for the tests, docs/design.md §9.3). The generated Kotlin
//! (`dev.fencelock.ffi`) is internal: users see the hand-written layer in
//! `src/main/kotlin/dev/fencelock/`.
//!
//! No panic crosses into the JVM: every synchronous export runs inside `error::guard`, and
//! every future inside `runtime::run`, which catches unwinding; both surface as code INTERNAL.

uniffi::setup_scaffolding!();

mod contract;
mod election;
mod error;
mod fence;
mod handoff;
mod lease;
mod locker;
mod metrics;
mod mode;
mod multi;
mod observe;
mod options;
mod runtime;
mod spans;
#[cfg(feature = "test-hooks")]
mod test_hooks;

pub use contract::{NativeContract, NativeContractOption, contract_error, core_contract};
pub use election::NativeLeader;
pub use error::{NativeError, NativeErrorCode};
pub use fence::{NativeFence, NativeSqlValue, NativeStatement, open_fence};
pub use lease::{NativeLease, NativeLossReason, NativeLostListener};
pub use locker::{
    NativeHolder, NativeLeaseInfo, NativeLockInfo, NativeLockList, NativeLocker, NativeWaiter,
    connect,
};
pub use metrics::{NativeInstrument, NativeMeasurement, NativeMetricsSink, metric_instruments};
pub use mode::{NativeLockKind, NativeLockMode};
pub use multi::{
    NativeAcquireManyStart, NativeMultiLease, NativeMultiPart, NativePendingAcquireMany,
};
pub use observe::{
    NativeEventSubscription, NativeLockEvent, NativeLockEventKind, NativeLogLevel, NativeLogRecord,
    NativeLogSubscription, subscribe_logs,
};
pub use options::{NativeConnectOptions, NativeLockOptions};

/// The version of the native library (the workspace version).
#[uniffi::export]
pub fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
