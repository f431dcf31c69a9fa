//! Test-only exports, compiled in only with the `test-hooks` feature: the test suites' builds
//! (node/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. Two panic on purpose, so the tests can show that a
//! panic surfaces as code INTERNAL and never crosses into Node; one floods the log queue; two
//! fail with a core error of the test's choosing, so the tests can show the code crosses apart
//! from the message; one hands over the core's contract (`fencelock::contract`). No user import
//! reaches them: the tests load them through `test/hooks.mjs`, which is not part of the package.

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{self, Result};
use crate::runtime;

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

/// The core error `code` (its spelling, e.g. "TIMEOUT") with `message`, as this module reports
/// any core error.
fn core_error(code: &str, message: String) -> error::Error {
    match fencelock::ErrorCode::ALL
        .into_iter()
        .find(|c| c.as_str() == code)
    {
        Some(code) => error::to_js(fencelock::Error::new(code, message)),
        None => error::invalid(format!("no error code {code:?}")),
    }
}

/// Throws the core error `code` with `message`.
#[napi(js_name = "_testCoreError")]
pub fn test_core_error(code: String, message: String) -> Result<()> {
    error::guard(|| Err(core_error(&code, message)))
}

/// A Promise that rejects, on the runtime, with the core error `code` and `message`.
#[napi(js_name = "_testCoreErrorAsync")]
pub fn test_core_error_async(env: Env, code: String, message: String) -> Result<AsyncBlock<()>> {
    error::guard(|| runtime::promise(&env, async move { Err(core_error(&code, message)) }))
}

/// One option of the core's table (`fencelock::contract::OPTIONS`).
#[napi(object)]
pub struct NativeContractOption {
    /// snake_case, as the core spells it.
    pub name: String,
    /// "duration", "flag" or "text".
    pub kind: String,
    pub default: String,
    pub operations: Vec<String>,
    pub set_by_binding: bool,
}

/// The core's contract (`fencelock::contract`): what `test/contract.test.mjs` compares the
/// package with.
#[napi(object)]
pub struct NativeContract {
    pub error_codes: Vec<String>,
    pub event_kinds: Vec<String>,
    pub operations: Vec<String>,
    pub options: Vec<NativeContractOption>,
}

fn strings<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    names.into_iter().map(str::to_string).collect()
}

/// The core's lists of error codes, event kinds, operations and options.
#[napi(js_name = "_testContract")]
pub fn test_contract() -> Result<NativeContract> {
    use fencelock::contract::{self, OPTIONS, Operation};
    error::guard(|| {
        Ok(NativeContract {
            error_codes: strings(contract::error_code_names()),
            event_kinds: strings(contract::event_kind_names()),
            operations: strings(Operation::ALL.iter().map(|op| op.as_str())),
            options: OPTIONS
                .iter()
                .map(|spec| NativeContractOption {
                    name: spec.name.to_string(),
                    kind: spec.kind.as_str().to_string(),
                    default: spec.default.to_string(),
                    operations: strings(spec.operations.iter().map(|op| op.as_str())),
                    set_by_binding: spec.set_by_binding,
                })
                .collect(),
        })
    })
}
