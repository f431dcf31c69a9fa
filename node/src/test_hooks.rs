//! Test-only exports, compiled in only with the `test-hooks` feature: the test suites' builds
//! (node/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. Two panic on purpose, so the tests can show that a
//! panic surfaces as code INTERNAL and never crosses into Node; one floods the log queue. `index.js` exports them only when
//! the native module has them.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{error, runtime};

/// Panics inside Rust.
#[napi(js_name = "_testPanic")]
pub fn test_panic() -> Result<()> {
    error::guard(|| panic!("test panic requested by _testPanic()"))
}

/// A Promise whose future panics on the runtime, to show the same for async calls.
#[napi(js_name = "_testPanicAsync")]
pub fn test_panic_async(env: Env) -> Result<AsyncBlock<()>> {
    error::guard(|| {
        runtime::promise(&env, async {
            if std::hint::black_box(true) {
                panic!("test panic requested by _testPanicAsync()");
            }
            Ok(())
        })
    })
}

/// Emits `count` warn-level log records on the calling (JS) thread, which therefore takes none
/// of them until it returns: to show that a logger whose event loop is busy drops the oldest
/// records, counted, and never queues them without bound.
#[napi(js_name = "_testFloodLogs")]
pub fn test_flood_logs(count: u32) -> Result<()> {
    error::guard(|| {
        for i in 0..count {
            fencelock::logs::emit(
                fencelock::LogLevel::Warn,
                None,
                format_args!("test flood record {i}"),
            );
        }
        Ok(())
    })
}
