//! The native module of the npm package `fencelock`: the Node face of the `fencelock` core.
//!
//! The source files mirror the core's modules and the Python binding's: `locker.rs` (Locker,
//! `connect`, lock info), `lease.rs` (Lease and its lost signal), `multi.rs` (several names
//! held as one), `fence.rs`, `error.rs` (the one mapping of core errors and panics to JS
//! errors), `options.rs` (JS values to core options), `runtime.rs` (how futures become
//! Promises on the runtime, and cancellation) and `event_loop.rs` (Promises settled on the JS
//! thread's own loop). The public JS API is the thin
//! hand-written layer in `index.js`; what is exported here is internal to the package.
//!
//! No panic crosses into Node: every export runs inside `error::guard`, and every Promise's
//! future inside `runtime::promise`, which catches unwinding; both surface as code INTERNAL.
//!
//! Lockers are connected inside napi's tokio runtime, so their renewals and background releases
//! run there. The calls on the hot path (acquire, tryAcquire, extend, release) are polled on the
//! JS thread by `event_loop.rs`, which reads a Redis reply there and is woken from the runtime
//! for anything else; every other call runs on the runtime (`runtime::promise`).

#![deny(clippy::all)]
// napi-derive registers exports only outside cfg(test), so in the lib's test target (built by
// `cargo clippy --all-targets` only; it has no tests) every export looks unused.
#![cfg_attr(test, allow(dead_code))]

mod error;
mod event_loop;
mod fence;
mod lease;
mod locker;
mod metrics;
mod multi;
mod observe;
mod options;
mod runtime;
mod spans;
#[cfg(feature = "test-hooks")]
mod test_hooks;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::Result;

/// The version of the native module (the workspace version).
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Benchmark-only: a Promise that resolves on napi's runtime and does nothing else, so the cost
/// of one crossing (JS thread to a runtime thread and back) can be measured on its own.
#[napi(js_name = "_ping")]
pub fn ping(env: Env) -> Result<AsyncBlock<()>> {
    error::guard(|| runtime::promise(&env, async { Ok(()) }))
}
