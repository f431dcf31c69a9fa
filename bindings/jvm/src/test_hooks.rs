//! Test-only exports, compiled in only with the `test-hooks` feature: the test suites' builds
//! (bindings/jvm/run-tests.sh, and CI's `release/build.sh --profile ci`), never a release, which
//! `release/check-test-switches.py` verifies. They panic on purpose, so the tests can show that a
//! panic surfaces as code INTERNAL (`LockInternalException`) and never crosses into the JVM.

use crate::error::{self, NativeError};
use crate::runtime;

/// Panics inside Rust.
#[uniffi::export]
pub fn test_panic() -> Result<(), NativeError> {
    error::guard(|| {
        if std::hint::black_box(true) {
            panic!("test panic requested by testPanic()");
        }
        Ok(())
    })
}

/// A future that panics on the runtime, to show the same for suspend calls.
#[uniffi::export]
pub async fn test_panic_async() -> Result<(), NativeError> {
    runtime::run(
        async {
            if std::hint::black_box(true) {
                panic!("test panic requested by testPanicAsync()");
            }
            Ok(())
        },
        runtime::OnDrop::Cancel,
    )
    .await
}
