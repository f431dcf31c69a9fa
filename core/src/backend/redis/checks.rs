//! The checks made of a Redis server: at connect, that its `maxmemory-policy` cannot evict lock
//! keys; at connect and again while the Locker lives, how many replicas the master reports
//! ([`super::replica`]). A NOPERM answer to either is a warning unless `strict_checks=true`.

use redis::Value;

use super::conn::Conn;
use super::connect::RedisSettings;
use super::error::map_error;
use super::reply::as_string;
use crate::error::{Error, Result};

pub(in crate::backend) async fn check_eviction_policy(
    conn: &mut Conn,
    settings: &RedisSettings,
    url: &str,
) -> Result<()> {
    let reply: redis::RedisResult<Value> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply {
        Ok(value) => {
            // RESP3 answers a map, RESP2 a flat array: the value follows the name either way.
            // A Cluster answers per node; every node must be safe.
            let mut policies = Vec::new();
            collect_policies(&value, &mut policies);
            let unsafe_policy = policies.into_iter().find(|p| p != "noeviction");
            if let Some(policy) = unsafe_policy.filter(|_| !settings.allow_eviction) {
                return Err(Error::invalid(format!(
                    "Redis at {url} uses maxmemory-policy {policy}, which can evict lock keys and break \
                     mutual exclusion; set it to noeviction, or pass allow_eviction=true to accept the risk"
                )));
            }
            Ok(())
        }
        Err(e) => connect_check_failed("CONFIG GET maxmemory-policy", e, settings),
    }
}

fn collect_policies(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Map(pairs) => {
            for (k, v) in pairs {
                if as_string(k).as_deref() == Some("maxmemory-policy") {
                    out.extend(as_string(v));
                } else {
                    collect_policies(v, out);
                }
            }
        }
        Value::Array(items) => {
            let mut it = items.iter();
            while let Some(item) = it.next() {
                if as_string(item).as_deref() == Some("maxmemory-policy") {
                    out.extend(it.next().and_then(as_string));
                } else {
                    collect_policies(item, out);
                }
            }
        }
        _ => {}
    }
}

pub(super) async fn count_replicas(
    conn: &mut Conn,
    settings: &RedisSettings,
    url: &str,
) -> Result<u32> {
    let reply: redis::RedisResult<Value> = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await;
    match reply {
        Ok(info) => Ok(as_string(&info)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)),
        Err(e) => {
            connect_check_failed(&format!("INFO replication on {url}"), e, settings)?;
            Ok(0)
        }
    }
}

/// A NOPERM answer to a connect-time check is a warning unless strict checks were asked for.
fn connect_check_failed(what: &str, e: redis::RedisError, settings: &RedisSettings) -> Result<()> {
    let err = map_error(what, e);
    if err.code() == crate::error::ErrorCode::Auth && !settings.strict_checks {
        flog!(
            warn,
            "{err}; the check is skipped (strict_checks=true makes this an error)"
        );
        return Ok(());
    }
    Err(err)
}
