//! From redis-rs errors to fencelock's: the one place Redis errors are mapped (for Redis,
//! Redis Cluster, Redlock's masters and the Redis fence).

use crate::error::{DriverCause, Error};
use crate::url::redact_secrets;

/// Converts a redis-rs error: retryable when the connection failed, AUTH when credentials or
/// permissions were refused, secrets stripped from every message, the driver's error kept as
/// the cause.
pub fn map_error(context: &str, err: redis::RedisError) -> Error {
    let text = redact_secrets(&err.to_string());
    let code = err.code().unwrap_or("").to_string();
    let cause = DriverCause::new("redis", driver_code(&err), text.clone());
    classify(context, &err, &code, &text).with_cause(cause)
}

/// The error's server code (`WRONGPASS`), or else redis-rs's name for its kind (`Io`).
fn driver_code(err: &redis::RedisError) -> String {
    match err.code() {
        Some(code) => code.to_string(),
        None => DriverCause::variant_name(&err.kind()),
    }
}

fn classify(context: &str, err: &redis::RedisError, code: &str, text: &str) -> Error {
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code, "NOPERM" | "WRONGPASS" | "NOAUTH")
    {
        return Error::auth(format!("{context}: {text}"));
    }
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
    {
        return Error::unavailable(format!("{context}: {text}"));
    }
    if matches!(
        code,
        "LOADING"
            | "BUSY"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
            | "MASTERDOWN"
            | "READONLY"
            | "MOVED"
            | "ASK"
    ) {
        return Error::unavailable(format!("{context}: {text}"));
    }
    if text.contains("DB index is out of range") {
        return Error::invalid(format!(
            "{context}: the database index is out of range for this server"
        ));
    }
    Error::backend(format!("{context}: {text}"))
}
