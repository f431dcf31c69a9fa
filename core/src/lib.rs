//! fencelock: distributed locks with fencing tokens.
//!
//! One implementation of the lock algorithms, used from Rust, Python, Node.js, the JVM and
//! the `fencelock` command. A [`Locker`] is made from a URL that selects the backend; each
//! acquisition returns a [`Lease`] carrying a fencing token that strictly increases per lock
//! name, which a [`Fence`] on the protected resource checks so that a holder that paused past
//! its lease's expiry is rejected.
//!
//! This crate knows nothing of FFI: bindings convert arguments, call it, and map its
//! [`Error`] codes.

#[macro_use]
pub mod logs;
pub mod backend;
pub mod blocking;
pub mod clock;
pub mod contract;
pub mod election;
pub mod error;
pub mod events;
pub mod fence;
pub mod holder;
pub mod ids;
pub mod inbox;
pub mod lease;
pub mod locker;
pub mod metrics;
pub mod name;
pub mod options;
pub mod reentry;
pub mod runtime;
pub mod signal;
pub mod sql_value;
pub mod url;
mod watchdog;

/// Sizes of the core's own bookkeeping and other internals, for the tests; not part of the API.
#[doc(hidden)]
pub mod internals {
    /// How many deadlines the process's watchdog holds.
    pub fn watchdog_entries() -> usize {
        crate::watchdog::entries()
    }

    /// The source of a Redis lock script (`acquire`, `renew`, `release`, `force_release`), as
    /// the server runs it: for the tests that replay one by hand, as a client library's retry
    /// after a lost reply would.
    pub fn redis_script_source(name: &str) -> Option<String> {
        crate::backend::redis::scripts::source(name)
    }

    /// How many Redis lock scripts this process sent a second time: always 0 unless built with
    /// the test-only `fault-injection-duplicate-scripts` feature.
    pub fn duplicated_redis_scripts() -> u64 {
        crate::backend::redis::duplicated_scripts()
    }
}

pub use backend::{LIST_LIMIT, LockInfo, LockList, Waiter};
pub use clock::BootInstant;
pub use election::{Leader, Leadership};
pub use error::{Error, ErrorCode, Result};
pub use events::{EventSubscription, LockEvent, LockEventKind};
pub use fence::{Fence, FenceToken, LockIdentity, Statement};
pub use holder::HolderDescription;
pub use lease::Lease;
pub use locker::Locker;
pub use logs::{LogLevel, LogRecord, LogSubscription};
pub use name::LockName;
pub use options::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};
pub use reentry::Scope;
pub use signal::{LossReason, LostSignal};
pub use sql_value::SqlValue;
pub use url::{BackendKind, LockerUrl};
