//! The Redis fence: `fenced_set(key, value, token)` checks the token and writes the value in
//! one script, so no newer holder can write in between.

#[path = "redis_scripts.rs"]
mod scripts;

use async_trait::async_trait;
use redis::aio::ConnectionManager;

use self::scripts::{FENCE_CHECK, FENCED_SET};
use super::origins::Origins;
use super::{FenceBackend, FenceToken, Statement};
use crate::backend::redis::connect::{client, manager_config};
use crate::backend::redis::error::map_error;
use crate::backend::redis::keys::{DEFAULT_PREFIX, validate_prefix};
use crate::error::{Error, Result};
use crate::name::encode;
use crate::options::LockerOptions;
use crate::url::LockerUrl;

pub(crate) struct RedisFence {
    conn: ConnectionManager,
    prefix: String,
}

impl RedisFence {
    pub(crate) async fn open(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        url.refuse_unknown_options("Redis fence", &["prefix", "ca", "cert", "key", "tls"])?;
        let prefix = url
            .query
            .get("prefix")
            .cloned()
            .unwrap_or_else(|| "fencelock-fence".to_string());
        validate_prefix(&prefix)?;
        let host = url
            .hosts
            .first()
            .ok_or_else(|| Error::invalid("a Redis URL needs a host"))?;
        let conn = client(url, host)?
            .get_connection_manager_with_config(manager_config(options.operation_timeout))
            .await
            .map_err(|e| map_error(&format!("connecting to {}", url.redacted()), e))?;
        Ok(RedisFence { conn, prefix })
    }

    fn record_key(&self, resource: &str) -> String {
        format!("{}:{{{}}}", self.prefix, encode(resource))
    }

    /// A data key is never one of fencelock's own: a fenced write over the fence's record would
    /// erase the token history it checks against, and one over a lock key would break the lock.
    fn check_data_key(&self, key: &str) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid("a fenced_set key must not be empty"));
        }
        for own in [self.prefix.as_str(), DEFAULT_PREFIX] {
            if key.starts_with(own) && key[own.len()..].starts_with(':') {
                return Err(Error::invalid(format!(
                    "the key {key:?} is in fencelock's own key space ({own}:…); write your data \
                     under a prefix of your own"
                )));
            }
        }
        Ok(())
    }
}

fn lock_key(token: &FenceToken) -> String {
    token.lock.as_ref().map(|l| l.key()).unwrap_or_default()
}

/// Redis's scripts compare tokens exactly as decimal strings, and tokens are below 2^63 (the
/// type allows more: one from elsewhere is refused rather than compared).
fn check_exact(token: &FenceToken) -> Result<()> {
    if token.token > i64::MAX as u64 {
        return Err(Error::invalid(format!(
            "token {} is 2^63 or more: fencelock's tokens are below 2^63",
            token.token
        )));
    }
    Ok(())
}

/// The answer of the fence scripts: the verdict, and the record's origins and highest token
/// as they were before.
struct Answer {
    verdict: i64,
    origins: String,
    highest: Option<u64>,
}

impl redis::FromRedisValue for Answer {
    fn from_redis_value(v: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        let (verdict, origins, highest): (i64, String, String) = redis::from_redis_value(v)?;
        Ok(Answer {
            verdict,
            origins,
            highest: highest.parse().ok(),
        })
    }
}

fn verdict(resource: &str, token: &FenceToken, answer: Answer) -> Result<()> {
    if answer.verdict >= 0 {
        let judged =
            Origins::parse(Some(&answer.origins)).judge(token.origin, token.token, answer.highest);
        super::warn_of_origin(resource, token, judged.warning);
    }
    match answer.verdict {
        1 => Ok(()),
        0 => Err(Error::stale_token(format!(
            "fence {resource:?} has accepted a newer token than {}",
            token.token
        ))),
        _ => Err(Error::invalid(format!(
            "this fence guards another lock; a token of lock {:?} is not ordered with its tokens",
            token.lock.as_ref().map(|l| l.name.as_str()).unwrap_or("")
        ))),
    }
}

#[async_trait]
impl FenceBackend for RedisFence {
    async fn fenced_execute(
        &self,
        _resource: &str,
        _token: &FenceToken,
        _statements: &[Statement],
    ) -> Result<Vec<u64>> {
        Err(Error::invalid(
            "a Redis fence writes with fenced_set(token, key, value); fenced_execute is for SQL fences",
        ))
    }

    async fn fenced_set(
        &self,
        resource: &str,
        token: &FenceToken,
        key: &str,
        value: &[u8],
    ) -> Result<()> {
        self.check_data_key(key)?;
        check_exact(token)?;
        let answer: Answer = FENCED_SET
            .key(self.record_key(resource))
            .key(key)
            .arg(token.token)
            .arg(lock_key(token))
            .arg(value)
            .arg(
                token
                    .origin
                    .map(|o| format!("{o:016x}"))
                    .unwrap_or_default(),
            )
            .arg(token.lock_aliases())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| {
                let err = map_error("fenced set", e);
                if err.message().contains("CROSSSLOT") {
                    Error::invalid(format!(
                        "on a Redis Cluster the key must carry the fence's hash tag {{{}}}",
                        encode(resource)
                    ))
                } else {
                    err
                }
            })?;
        verdict(resource, token, answer)
    }

    async fn check(&self, resource: &str, token: &FenceToken) -> Result<()> {
        check_exact(token)?;
        let answer: Answer = FENCE_CHECK
            .key(self.record_key(resource))
            .arg(token.token)
            .arg(lock_key(token))
            .arg(token.lock_aliases())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error("fence check", e))?;
        verdict(resource, token, answer)
    }

    async fn highest(&self, resource: &str) -> Result<Option<u64>> {
        let mut conn = self.conn.clone();
        let token: Option<u64> = redis::cmd("HGET")
            .arg(self.record_key(resource))
            .arg("token")
            .query_async(&mut conn)
            .await
            .map_err(|e| map_error("fence read", e))?;
        Ok(token)
    }

    async fn close(&self) {}
}
