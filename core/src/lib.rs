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
//!
//! Each backend is a cargo feature, all on by default: `redis` (Redis, Redis Cluster and
//! Redlock), `zookeeper`, `sqlite`, `postgres` and `mysql`. A build without one still parses its
//! URLs, and connecting to one fails with `INVALID_ARGUMENT` naming the feature.

// Without every backend, parts of the shared code go unused (the fence's origin records without
// Redis or SQL, the error mapping of a database left out, ...): unused code is found by the lint
// of the build with every feature (tests/lint.sh), not in these builds.
#![cfg_attr(
    not(all(
        feature = "redis",
        feature = "zookeeper",
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql"
    )),
    allow(unused)
)]

// The modules users name (eight, docs/design.md §9.1): the blocking form of the API, the
// cross-language contract, the event-loop executor's entry (§8.6), logs, metrics, options, the
// runtime a host without one runs the core on, and spans. Everything else is
// reached through the re-exports below, so internals can move without breaking anyone.
#[macro_use]
pub mod logs;
mod backend;
pub mod blocking;
mod caller;
mod clock;
pub mod contract;
mod delivery;
mod deployment;
mod due;
mod duration;
mod election;
mod error;
pub mod event_loop;
mod events;
mod fence;
mod holder;
mod ids;
mod inbox;
mod lease;
mod locker;
pub mod metrics;
mod mode;
mod name;
pub mod options;
pub mod runtime;
mod signal;
pub mod spans;
mod sql_value;
mod sync;
mod url;
mod watchdog;

/// Sizes of the core's own bookkeeping and other internals, for the tests; not part of the API.
#[doc(hidden)]
pub mod internals {
    /// The encoding of a lock name in Redis keys and ZooKeeper paths (`fencelock:{ENC}`), for
    /// the tests that look at a lock's keys by hand.
    pub use crate::name::encode as encode_name;

    /// How many deadlines the process's watchdog holds.
    pub fn watchdog_entries() -> usize {
        crate::watchdog::entries()
    }

    /// The source of a Redis lock script (`acquire`, `renew`, `release`, `force_release`), as
    /// the server runs it: for the tests that replay one by hand, as a client library's retry
    /// after a lost reply would.
    #[cfg(feature = "redis")]
    pub fn redis_script_source(name: &str) -> Option<String> {
        crate::backend::redis::mutex_scripts::source(name)
    }

    /// How many Redis lock scripts this process sent a second time: always 0 unless built with
    /// the test-only `fault-injection-duplicate-scripts` feature.
    #[cfg(feature = "redis")]
    pub fn duplicated_redis_scripts() -> u64 {
        crate::backend::redis::duplicated_scripts()
    }
}

pub use backend::{LIST_LIMIT, LeaseInfo, LockInfo, LockList, MAX_WAITERS_SHOWN, Waiter};
pub use clock::BootInstant;
pub use duration::parse_duration;
pub use election::{Leader, Leadership};
pub use error::{DriverCause, Error, ErrorCode, Result};
pub use events::{EventSubscription, LockEvent, LockEventKind};
pub use fence::{Fence, FenceToken, LockIdentity, Statement};
pub use holder::HolderDescription;
pub use inbox::INBOX_CAPACITY;
pub use lease::Lease;
pub use lease::multi::MultiLease;
pub use lease::reentry::Scope;
pub use locker::{Lock, Locker, MAX_NAMES_AT_ONCE};
pub use logs::{LogLevel, LogRecord, LogSubscription};
pub use mode::{LockKind, LockMode, MAX_PERMITS};
pub use name::LockName;
pub use options::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};
pub use signal::{LossReason, LostSignal};
pub use sql_value::SqlValue;
pub use url::{BackendKind, LockerUrl, redact_secrets};
