//! The one place where core errors and panics become JS errors.
//!
//! The code crosses as the JS error's `code` property and the core's message as its message:
//! napi's `Error<S>` with [`Code`] as its status makes `napi_create_error` set `code`.
//! `lib/error.js` builds a `LockError` from that property, so no message is ever parsed for
//! its code. A cancelled acquire has code `ABORTED`, which `lib/error.js` turns into an
//! `AbortError` (cancellation is not an error code, docs/design.md §6.2).
//!
//! napi-rs settles a Promise with its own `Status` only, so `runtime::promise` hands the
//! failure of a future to the JS thread and builds the error there with [`rejection`].

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use napi::bindgen_prelude::*;

/// The `code` property of an error thrown or rejected by this module (`pub`: exported
/// functions return it; the module itself is private).
pub enum Code {
    Core(fencelock::ErrorCode),
    Aborted,
    /// napi's own failures keep napi's spelling (`PendingException` must stay recognisable to
    /// napi, which then lets the pending JS exception through); `lib/error.js` reports any code
    /// that is not fencelock's as INTERNAL.
    Napi(Status),
}

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        match self {
            Code::Core(code) => code.as_str(),
            Code::Aborted => "ABORTED",
            Code::Napi(status) => status.as_ref(),
        }
    }
}

pub type Error = napi::Error<Code>;
pub type Result<T> = std::result::Result<T, Error>;

/// A core error as a napi error; the driver's error, if any, rides as its `cause`, whose
/// message is a JSON object `{driver, code, message}` that `lib/error.js` turns into a
/// `DriverError` (napi sets a cause's `code` from its napi status only).
pub(crate) fn to_js(err: fencelock::Error) -> Error {
    let mut error = Error::new(Code::Core(err.code()), err.message());
    if let Some(cause) = err.cause() {
        let carried = serde_json::json!({
            "driver": cause.driver(),
            "code": cause.code(),
            "message": cause.message(),
        });
        error.set_cause(napi::Error::new(
            Status::GenericFailure,
            carried.to_string(),
        ));
    }
    error
}

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    to_js(fencelock::Error::invalid(message))
}

pub(crate) fn aborted() -> Error {
    Error::new(Code::Aborted, "the operation was aborted")
}

/// A failure of napi itself (a threadsafe function or a Promise that could not be made).
pub(crate) fn from_napi(err: napi::Error) -> Error {
    Error::new(Code::Napi(err.status), err.reason)
}

/// A caught panic: code INTERNAL.
pub(crate) fn panic_to_js(payload: Box<dyn Any + Send>) -> Error {
    to_js(fencelock::Error::from_panic(payload.as_ref()))
}

/// Runs the body of an exported function, turning a panic into an INTERNAL error. Every
/// `#[napi]` function and method goes through this.
pub(crate) fn guard<T>(body: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(panic_to_js(payload)))
}

/// `err` as the JS error a Promise rejects with, made on the JS thread: napi rejects with the
/// very object it retains.
pub(crate) fn rejection(env: Env, err: Error) -> napi::Error {
    napi::Error::from_unknown_without_coercion(JsError::from(err).into_unknown(env))
}
