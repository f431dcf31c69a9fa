//! Reading Redis replies: integers and strings in whichever form the server sends them, and the
//! acquire script's answer as an [`Attempt`]. The Redlock backend reads its masters' replies
//! with the same helpers.

use std::time::Duration;

use redis::Value;

use crate::backend::Attempt;
use crate::error::{Error, Result};

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
        (Some(super::scripts::RELEASED_BEFORE), None) => Err(Error::unavailable(
            "the acquire ran after this acquisition's own release (a resent request): refused",
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
