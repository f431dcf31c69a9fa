//! The one place where core errors and panics become JS errors.
//!
//! A rejected Promise or a thrown error from this module carries the message
//! `"<CODE>: <message>"` (the core error's own display form); `index.js` turns it into a
//! `LockError` with `code` set, so the mapping from codes to JS lives in one small function
//! there. A cancelled acquire rejects with `ABORTED: …`, which `index.js` turns into an
//! `AbortError` (cancellation is not an error code, docs/design.md §6.2).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

pub(crate) const ABORTED: &str = "ABORTED";

/// A core error as a napi error.
pub(crate) fn to_js(err: fencelock::Error) -> napi::Error {
    napi::Error::from_reason(err.to_string())
}

pub(crate) fn invalid(message: impl Into<String>) -> napi::Error {
    to_js(fencelock::Error::invalid(message))
}

pub(crate) fn aborted() -> napi::Error {
    napi::Error::from_reason(format!("{ABORTED}: the operation was aborted"))
}

/// A caught panic: code INTERNAL.
pub(crate) fn panic_to_js(payload: Box<dyn Any + Send>) -> napi::Error {
    to_js(fencelock::Error::from_panic(payload.as_ref()))
}

/// Runs the body of an exported function, turning a panic into an INTERNAL error. Every
/// `#[napi]` function and method goes through this.
pub(crate) fn guard<T>(body: impl FnOnce() -> napi::Result<T>) -> napi::Result<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(panic_to_js(payload)))
}
