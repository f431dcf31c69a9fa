//! The one place where core errors and panics become JVM exceptions.
//!
//! uniffi turns [`NativeError`] into the generated `NativeException`; the hand-written Kotlin
//! layer (`Errors.kt`) turns that into `FencelockException`'s subclass for its code, so the
//! mapping from codes to classes lives in one small function there.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use fencelock::ErrorCode;

/// The stable codes of docs/design.md §6.1, as the JVM sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeErrorCode {
    Timeout,
    Lost,
    NotHeld,
    Unavailable,
    InvalidArgument,
    Auth,
    StaleToken,
    Backend,
    Deadlock,
    Closed,
    Internal,
}

impl From<ErrorCode> for NativeErrorCode {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::Timeout => NativeErrorCode::Timeout,
            ErrorCode::Lost => NativeErrorCode::Lost,
            ErrorCode::NotHeld => NativeErrorCode::NotHeld,
            ErrorCode::Unavailable => NativeErrorCode::Unavailable,
            ErrorCode::InvalidArgument => NativeErrorCode::InvalidArgument,
            ErrorCode::Auth => NativeErrorCode::Auth,
            ErrorCode::StaleToken => NativeErrorCode::StaleToken,
            ErrorCode::Backend => NativeErrorCode::Backend,
            ErrorCode::Deadlock => NativeErrorCode::Deadlock,
            ErrorCode::Closed => NativeErrorCode::Closed,
            // ErrorCode is non_exhaustive: a code added to the core without a JVM mapping is
            // a fencelock bug, reported as such rather than guessed at.
            ErrorCode::Internal | _ => NativeErrorCode::Internal,
        }
    }
}

impl From<NativeErrorCode> for ErrorCode {
    // Exhaustive: a JVM code without a core code does not compile.
    fn from(code: NativeErrorCode) -> Self {
        match code {
            NativeErrorCode::Timeout => ErrorCode::Timeout,
            NativeErrorCode::Lost => ErrorCode::Lost,
            NativeErrorCode::NotHeld => ErrorCode::NotHeld,
            NativeErrorCode::Unavailable => ErrorCode::Unavailable,
            NativeErrorCode::InvalidArgument => ErrorCode::InvalidArgument,
            NativeErrorCode::Auth => ErrorCode::Auth,
            NativeErrorCode::StaleToken => ErrorCode::StaleToken,
            NativeErrorCode::Backend => ErrorCode::Backend,
            NativeErrorCode::Deadlock => ErrorCode::Deadlock,
            NativeErrorCode::Closed => ErrorCode::Closed,
            NativeErrorCode::Internal => ErrorCode::Internal,
        }
    }
}

/// A core error: its code, its stable spelling and its message.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum NativeError {
    #[error("{spelling}: {detail}")]
    Failure {
        code: NativeErrorCode,
        /// The code as every language spells it (`"NOT_HELD"`).
        spelling: String,
        detail: String,
    },
}

impl From<fencelock::Error> for NativeError {
    fn from(err: fencelock::Error) -> Self {
        NativeError::Failure {
            code: err.code().into(),
            spelling: err.code().as_str().to_string(),
            detail: err.message().to_string(),
        }
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> NativeError {
    fencelock::Error::invalid(message).into()
}

/// A caught panic: code INTERNAL.
pub(crate) fn from_panic(payload: Box<dyn Any + Send>) -> NativeError {
    fencelock::Error::from_panic(payload.as_ref()).into()
}

/// Runs the body of a synchronous export, turning a panic into an INTERNAL error.
pub(crate) fn guard<T>(body: impl FnOnce() -> Result<T, NativeError>) -> Result<T, NativeError> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(from_panic(payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JVM's code list repeats the core's (uniffi needs its own enum): every core code
    /// must map to its own JVM code and back. The reverse direction (a JVM code the core lacks)
    /// does not compile, and the JUnit ContractTest compares the lists by name.
    #[test]
    fn jvm_codes_are_the_core_codes() {
        for code in ErrorCode::ALL {
            let ours = NativeErrorCode::from(code);
            assert_eq!(
                ErrorCode::from(ours),
                code,
                "core code {} has no JVM code: add it to NativeErrorCode and Errors.kt",
                code.as_str()
            );
            let spelled = format!("{ours:?}");
            let expected: String = code
                .as_str()
                .split('_')
                .map(|w| w[..1].to_string() + &w[1..].to_ascii_lowercase())
                .collect();
            assert_eq!(spelled, expected);
        }
    }
}
