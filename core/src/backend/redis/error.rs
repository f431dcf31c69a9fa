//! From redis-rs errors to fencelock's: the one place Redis errors are mapped (for Redis,
//! Redis Cluster, Redlock's masters and the Redis fence).

use crate::error::Error;
use crate::url::redact_secrets;

/// Converts a redis-rs error: retryable when the connection failed, AUTH when credentials or
/// permissions were refused, secrets stripped from every message.
pub fn map_error(context: &str, err: redis::RedisError) -> Error {
    let text = redact_secrets(&err.to_string());
    let code = err.code().unwrap_or("").to_string();
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code.as_str(), "NOPERM" | "WRONGPASS" | "NOAUTH")
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
        code.as_str(),
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
