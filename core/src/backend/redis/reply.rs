//! Reading Redis replies: integers and strings in whichever form the server sends them, and the
//! acquire scripts' answers as an [`Attempt`] or the typed error of a refusal. The Redlock backend reads its masters' replies
//! with the same helpers.

use std::time::Duration;

use redis::Value;

use super::semaphore_rwlock_scripts::{
    KIND_CONFLICT, NEWER_LAYOUT, PERMITS_CONFLICT, SHARED_LAYOUT_VERSION,
};
use crate::backend::{AcquireRequest, Attempt};
use crate::error::{Error, Result};
use crate::mode::{LockKind, kind_conflict, permits_conflict};

pub(in crate::backend) fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(in crate::backend) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(in crate::backend) fn parse_attempt(v: &Value) -> Result<Attempt> {
    let bad = || Error::internal(format!("unexpected reply to the acquire script: {v:?}"));
    let Value::Array(items) = v else {
        return Err(bad());
    };
    match (items.first().and_then(as_i64), items.get(1)) {
        (Some(1), Some(token)) => {
            let token = as_i64(token).filter(|t| *t > 0).ok_or_else(bad)?;
            Ok(Attempt::Acquired {
                token: token as u64,
                origin: items
                    .get(2)
                    .and_then(as_string)
                    .and_then(|o| u64::from_str_radix(&o, 16).ok()),
            })
        }
        (Some(0), Some(pttl)) => {
            let pttl = as_i64(pttl).ok_or_else(bad)?;
            Ok(Attempt::Held {
                expires_in: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            })
        }
        // Only a resent request whose owner id already released can get this; no caller of
        // a live acquisition does (owner ids are never reused). Retryable, like a lost reply.
        (Some(super::mutex_scripts::RELEASED_BEFORE), None) => Err(Error::unavailable(
            "the acquire ran after this acquisition's own release (a resent request): refused",
        )),
        _ => Err(bad()),
    }
}

/// An acquire script's answer (the mutex's or a shared one) as an [`Attempt`], or the typed
/// error of its refusal: the name is in use as another kind, a semaphore is in use with
/// another N, or the stored layout is newer than this fencelock reads.
pub(in crate::backend) fn parse_acquire_reply(
    reply: &Value,
    req: &AcquireRequest<'_>,
) -> Result<Attempt> {
    let name = req.name.as_str();
    let Value::Array(items) = reply else {
        return parse_attempt(reply);
    };
    let detail = items.get(1);
    let bad = || Error::internal(format!("unexpected reply to the acquire script: {reply:?}"));
    match items.first().and_then(as_i64) {
        Some(KIND_CONFLICT) => {
            let found = detail
                .and_then(as_string)
                .and_then(|kind| LockKind::parse(&kind))
                .ok_or_else(bad)?;
            Err(kind_conflict(name, req.mode.kind(), found))
        }
        Some(PERMITS_CONFLICT) => {
            let stored = detail
                .and_then(as_i64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(bad)?;
            Err(permits_conflict(name, req.mode.permits(), stored))
        }
        Some(NEWER_LAYOUT) => Err(Error::backend(format!(
            "lock {name:?} is stored in layout version {}, made by a newer fencelock; this one \
             reads version {SHARED_LAYOUT_VERSION}: upgrade fencelock",
            detail.and_then(as_string).unwrap_or_default()
        ))),
        _ => parse_attempt(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::ids::OwnerId;
    use crate::mode::LockMode;
    use crate::name::LockName;

    #[test]
    fn acquire_replies_parse() {
        let taken = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"1764000000000001".to_vec()),
        ]);
        assert_eq!(
            parse_attempt(&taken).unwrap(),
            Attempt::Acquired {
                token: 1764000000000001,
                origin: None,
            }
        );
        let held = Value::Array(vec![Value::Int(0), Value::Int(2500)]);
        assert_eq!(
            parse_attempt(&held).unwrap(),
            Attempt::Held {
                expires_in: Some(Duration::from_millis(2500))
            }
        );
        let forever = Value::Array(vec![Value::Int(0), Value::Int(-1)]);
        assert_eq!(
            parse_attempt(&forever).unwrap(),
            Attempt::Held { expires_in: None }
        );
        assert_eq!(
            parse_attempt(&Value::Nil).unwrap_err().code(),
            crate::error::ErrorCode::Internal
        );
    }

    fn reply(code: i64, detail: Value) -> Value {
        Value::Array(vec![Value::Int(code), detail])
    }

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn answer(mode: LockMode, reply: &Value) -> Result<Attempt> {
        let name = LockName::new("jobs").unwrap();
        let req = AcquireRequest {
            name: &name,
            mode,
            owner: OwnerId::random().unwrap(),
            ttl: Duration::from_secs(1),
            holder: "{}",
        };
        parse_acquire_reply(reply, &req)
    }

    #[test]
    fn refusals_become_typed_errors_naming_both_sides() {
        let err = answer(
            LockMode::Exclusive,
            &reply(KIND_CONFLICT, text("semaphore")),
        );
        let err = err.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        for word in ["\"jobs\"", "semaphore", "mutex"] {
            assert!(err.message().contains(word), "{err}");
        }
        let err = answer(LockMode::Read, &reply(KIND_CONFLICT, text("mutex"))).unwrap_err();
        assert!(err.message().contains("read-write lock"), "{err}");
        assert!(err.message().contains("mutex"), "{err}");

        let permits = LockMode::Permit { permits: 3 };
        let err = answer(permits, &reply(PERMITS_CONFLICT, Value::Int(2))).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.message().contains("has 2 permits") && err.message().contains("not 3"));

        let err = answer(LockMode::Write, &reply(NEWER_LAYOUT, text("2"))).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Backend);
        assert!(err.message().contains("layout version 2"), "{err}");

        let unknown = answer(LockMode::Write, &reply(KIND_CONFLICT, text("queue")));
        assert_eq!(unknown.unwrap_err().code(), ErrorCode::Internal);
    }

    #[test]
    fn grants_and_held_answers_read_as_the_mutex_s() {
        let taken = Value::Array(vec![Value::Int(1), text("1764000000000001"), text("00ff")]);
        assert_eq!(
            answer(LockMode::Read, &taken).unwrap(),
            Attempt::Acquired {
                token: 1764000000000001,
                origin: Some(0xff)
            }
        );
        assert_eq!(
            answer(LockMode::Write, &reply(0, Value::Int(250))).unwrap(),
            Attempt::Held {
                expires_in: Some(Duration::from_millis(250))
            }
        );
    }
}
