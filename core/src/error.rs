//! One error type for every backend and every language.
//!
//! The codes are part of the public contract: every binding exposes them under the same
//! spelling, so they are never renamed once released (docs/design.md §6). Each backend converts
//! its driver's errors in one function of its own (`backend/redis/connect.rs`,
//! `backend/zookeeper/settings.rs`, `backend/sql/mod.rs`), passing their text through
//! [`crate::url::redact_secrets`] so no credential reaches a message.

use std::fmt;

/// The stable code of an [`Error`]. The string form (`code().as_str()`) is what Python,
/// Node and the JVM expose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Not acquired before the `wait` deadline.
    Timeout,
    /// The lease was lost (expired, session expired, taken over), or used after that.
    Lost,
    /// Release or extend after an explicit release.
    NotHeld,
    /// The backend is unreachable, or no quorum.
    Unavailable,
    /// Bad name, ttl, wait, URL or option.
    InvalidArgument,
    /// Authentication or authorization refused.
    Auth,
    /// A fence rejected an older token.
    StaleToken,
    /// Any other backend error.
    Backend,
    /// A non-reentrant acquire of a name the same scope already holds.
    Deadlock,
    /// The Locker was closed, or the lease was inherited across `fork()`.
    Closed,
    /// A bug in fencelock, including a caught panic.
    Internal,
}

impl ErrorCode {
    /// Every code, in documentation order.
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::Timeout,
        ErrorCode::Lost,
        ErrorCode::NotHeld,
        ErrorCode::Unavailable,
        ErrorCode::InvalidArgument,
        ErrorCode::Auth,
        ErrorCode::StaleToken,
        ErrorCode::Backend,
        ErrorCode::Deadlock,
        ErrorCode::Closed,
        ErrorCode::Internal,
    ];

    /// The stable spelling shared by every language, e.g. `"NOT_HELD"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Lost => "LOST",
            ErrorCode::NotHeld => "NOT_HELD",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::Auth => "AUTH",
            ErrorCode::StaleToken => "STALE_TOKEN",
            ErrorCode::Backend => "BACKEND",
            ErrorCode::Deadlock => "DEADLOCK",
            ErrorCode::Closed => "CLOSED",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fencelock error: a stable [`ErrorCode`] and a short message meant for people.
///
/// Messages never contain credentials: URLs are always shown redacted, and backend
/// messages pass through [`crate::url::redact_secrets`] before they are stored here.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
    retryable: bool,
    /// When the backend knows it cannot answer sooner (Redlock masters abstaining after a
    /// restart): an acquire whose wait allows it waits this long instead of failing.
    retry_after: Option<std::time::Duration>,
    /// The driver's own error this one was made from, if any (boxed: most errors have none).
    cause: Option<Box<DriverCause>>,
}

/// The error a database or coordination driver reported, kept beside the fencelock error made
/// from it so that each language can chain it (`__cause__` in Python, `cause` in Node,
/// [`std::error::Error::source`] in Rust). Its message has its secrets stripped like every
/// message of an [`Error`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverCause {
    driver: &'static str,
    code: String,
    message: String,
}

impl DriverCause {
    pub(crate) fn new(driver: &'static str, code: impl Into<String>, message: String) -> Self {
        DriverCause {
            driver,
            code: code.into(),
            message,
        }
    }

    /// The name of the enum variant `value` is (`NoAuth`, `Io`), from its `Debug` form without
    /// the payload some variants carry: the code of a driver error that has no code of its own.
    pub(crate) fn variant_name(value: &impl fmt::Debug) -> String {
        let debug = format!("{value:?}");
        debug
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Which driver: `redis`, `zookeeper`, `postgres`, `mysql` or `sqlite`.
    pub fn driver(&self) -> &'static str {
        self.driver
    }

    /// The driver's own name for the error, as its users know it: a Redis error code
    /// (`WRONGPASS`) or redis-rs's kind (`Io`), a ZooKeeper error (`NoAuth`), a PostgreSQL
    /// SQLSTATE (`28P01`), a MySQL/MariaDB error number (`1045`), a SQLite result code (`5`), or
    /// sqlx's kind of failure (`Io`, `Tls`) when the database sent none.
    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DriverCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error {}: {}", self.driver, self.code, self.message)
    }
}

impl std::error::Error for DriverCause {}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            retryable: false,
            retry_after: None,
            cause: None,
        }
    }

    /// The driver's error this one was made from, if any.
    pub fn cause(&self) -> Option<&DriverCause> {
        self.cause.as_deref()
    }

    pub(crate) fn with_cause(mut self, cause: DriverCause) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// This error with `other`'s driver cause: for an error reworded from another.
    pub(crate) fn with_cause_of(mut self, other: &Error) -> Self {
        self.cause = other.cause.clone();
        self
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same operation may succeed (a dropped connection, a busy
    /// database). Renewals retry these until the client deadline.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    pub fn is_timeout(&self) -> bool {
        self.code == ErrorCode::Timeout
    }

    pub fn is_lost(&self) -> bool {
        self.code == ErrorCode::Lost
    }

    pub(crate) fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// How long until the backend can answer, when it knows (see the field).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    pub(crate) fn with_retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Timeout, message)
    }
    pub fn lost(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Lost, message)
    }
    pub fn not_held(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::NotHeld, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Unavailable, message).retryable()
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::InvalidArgument, message)
    }
    pub fn auth(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Auth, message)
    }
    pub fn stale_token(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::StaleToken, message)
    }
    pub fn backend(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Backend, message)
    }
    pub fn deadlock(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Deadlock, message)
    }
    pub fn closed(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Closed, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::Internal, message)
    }

    /// A panic caught at a language boundary (bindings catch every unwind): INTERNAL, with the
    /// panic's message, asking for a report.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic without a message".to_string()
        };
        Error::internal(format!(
            "a bug in fencelock: a Rust panic was caught ({message}); please report it"
        ))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code)
            .field("message", &self.message)
            .field("cause", &self.cause)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_stable_distinct_spellings() {
        let spelled: std::collections::HashSet<_> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(spelled.len(), ErrorCode::ALL.len());
        assert_eq!(ErrorCode::NotHeld.as_str(), "NOT_HELD");
        assert_eq!(ErrorCode::InvalidArgument.as_str(), "INVALID_ARGUMENT");
        assert_eq!(ErrorCode::StaleToken.as_str(), "STALE_TOKEN");
    }

    #[test]
    fn display_leads_with_the_code() {
        let e = Error::lost("lease expired");
        assert_eq!(e.to_string(), "LOST: lease expired");
        assert!(e.is_lost());
        assert!(!e.is_retryable());
        assert!(Error::unavailable("x").is_retryable());
    }
}
