//! From zookeeper-client errors to fencelock's: the one place ZooKeeper errors are mapped, and
//! the one loop that tries an operation again when the connection dropped under it.

use std::future::Future;

use crate::error::{DriverCause, Error, Result};
use crate::url::redact_secrets;

pub(super) type ZkError = zookeeper_client::Error;

/// How often an operation that failed with ConnectionLoss (outcome unknown, or not sent) is
/// tried again inside one backend call; the client queues requests until it reconnects, and
/// the core bounds the whole call by its operation timeout.
const CONNECTION_RETRIES: usize = 5;

/// The end of the message of an operation whose every attempt met a dropped connection.
pub(super) const CONNECTION_KEPT_DROPPING: &str = "the connection kept dropping";

/// The same, for an operation that also looks again when the queue changed under it.
pub(super) const QUEUE_KEPT_CHANGING: &str =
    "the lock queue kept changing or the connection kept dropping";

pub(super) fn is_connection_loss(e: &ZkError) -> bool {
    matches!(e, ZkError::ConnectionLoss)
}

pub(super) fn is_session_gone(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::SessionExpired | ZkError::ClientClosed | ZkError::AuthFailed
    )
}

/// Converts a zookeeper-client error: UNAVAILABLE (retryable) when the outcome is unknown or
/// the ensemble cannot be reached, AUTH when credentials or ACLs refuse, secrets stripped, the
/// driver's error kept as the cause.
pub(super) fn map_error(context: &str, err: zookeeper_client::Error) -> Error {
    let text = redact_secrets(&err.to_string());
    let cause = DriverCause::new("zookeeper", DriverCause::variant_name(&err), text.clone());
    classify(format!("{context}: {text}"), err).with_cause(cause)
}

fn classify(message: String, err: zookeeper_client::Error) -> Error {
    use zookeeper_client::Error as Z;
    match err {
        Z::ConnectionLoss
        | Z::Timeout
        | Z::NoHosts
        | Z::SessionMoved
        | Z::NotReadOnly
        | Z::Throttled => Error::unavailable(message),
        // The session's ephemeral nodes are gone; the backend makes a new session.
        Z::SessionExpired => Error::unavailable(message),
        Z::NoAuth | Z::AuthFailed => Error::auth(message),
        Z::InvalidAcl => Error::auth(format!(
            "{message} (the ACL names an identity this session lacks)"
        )),
        Z::ClientClosed => Error::closed(message),
        Z::BadArguments(_) => Error::invalid(message),
        // I/O and transport failures (the connection reset, TLS, SASL) come as custom errors.
        Z::Custom(_) => Error::unavailable(message),
        _ => Error::backend(message),
    }
}

/// Why one attempt of an operation run by [`retry`] gave no answer.
pub(super) enum Retry {
    /// Try again: the connection dropped (the outcome is unknown, or the request was not
    /// sent), or what the attempt read changed meanwhile.
    Again,
    /// Stop with this error.
    Fail(Error),
}

impl Retry {
    /// A ZooKeeper error the attempt has no answer of its own for: ConnectionLoss is tried
    /// again, anything else fails the operation, mapped with `context`.
    pub(super) fn zk(context: &str, e: ZkError) -> Self {
        if is_connection_loss(&e) {
            Retry::Again
        } else {
            Retry::Fail(map_error(context, e))
        }
    }
}

impl From<Error> for Retry {
    fn from(e: Error) -> Self {
        Retry::Fail(e)
    }
}

/// Runs `attempt` (given the attempt's number, from 0) until it answers or fails, trying again
/// while it says [`Retry::Again`], at most [`CONNECTION_RETRIES`] times; then the operation is
/// UNAVAILABLE: `"{what}: {why}"`.
pub(super) async fn retry<T, F, Fut>(what: &str, why: &str, mut attempt: F) -> Result<T>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = std::result::Result<T, Retry>>,
{
    for n in 0..CONNECTION_RETRIES {
        match attempt(n).await {
            Ok(answer) => return Ok(answer),
            Err(Retry::Again) => continue,
            Err(Retry::Fail(e)) => return Err(e),
        }
    }
    Err(Error::unavailable(format!("{what}: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_codes() {
        use zookeeper_client::Error as Z;
        assert!(map_error("x", Z::ConnectionLoss).is_retryable());
        assert_eq!(
            map_error("x", Z::ConnectionLoss).code(),
            crate::error::ErrorCode::Unavailable
        );
        assert_eq!(
            map_error("x", Z::NoAuth).code(),
            crate::error::ErrorCode::Auth
        );
        assert_eq!(
            map_error("x", Z::AuthFailed).code(),
            crate::error::ErrorCode::Auth
        );
        assert_eq!(
            map_error("x", Z::ClientClosed).code(),
            crate::error::ErrorCode::Closed
        );
        assert_eq!(
            map_error("x", Z::QuotaExceeded).code(),
            crate::error::ErrorCode::Backend
        );
        assert!(map_error("x", Z::SessionExpired).is_retryable());
    }

    #[tokio::test]
    async fn retry_tries_again_on_connection_loss_only_and_gives_up_unavailable() {
        use zookeeper_client::Error as Z;
        let mut tried = Vec::new();
        let gave_up = retry("doing x", CONNECTION_KEPT_DROPPING, |n| {
            tried.push(n);
            async { Err::<(), _>(Retry::zk("x", Z::ConnectionLoss)) }
        })
        .await
        .unwrap_err();
        assert_eq!(tried, (0..CONNECTION_RETRIES).collect::<Vec<_>>());
        assert_eq!(gave_up.code(), crate::error::ErrorCode::Unavailable);
        assert!(
            gave_up
                .to_string()
                .contains("doing x: the connection kept dropping"),
            "{gave_up}"
        );

        let answered = retry("doing x", CONNECTION_KEPT_DROPPING, |n| async move {
            if n < 2 { Err(Retry::Again) } else { Ok(n) }
        });
        assert_eq!(answered.await.unwrap(), 2);

        let mut tried = 0;
        let failed = retry("doing x", CONNECTION_KEPT_DROPPING, |_| {
            tried += 1;
            async { Err::<(), _>(Retry::zk("doing x", Z::NoAuth)) }
        });
        assert_eq!(
            failed.await.unwrap_err().code(),
            crate::error::ErrorCode::Auth
        );
        assert_eq!(tried, 1);
    }
}
