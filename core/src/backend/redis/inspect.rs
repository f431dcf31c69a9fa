//! Reading locks without holding them, and clearing them: inspect, list (a SCAN of one server,
//! or of every master of a Cluster) and an operator's force release. Redlock's masters use
//! [`force_release_key`] and [`scan_keys`] too.

use std::time::Duration;

use redis::Value;

use super::RedisBackend;
use super::conn::Conn;
use super::error::map_error;
use super::keys::{keys, name_of_lock_key, scan_pattern};
use super::reply::{as_i64, as_string};
use super::scripts::{FORCE_RELEASE, INSPECT};
use crate::backend::LockInfo;
use crate::error::{Error, Result};
use crate::name::LockName;

impl RedisBackend {
    pub(super) async fn inspect_lock(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let reply: Vec<Value> = INSPECT
            .key(&k.lock)
            .key(&k.fence)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| map_error("redis inspect", e))?;
        let pttl = reply.first().and_then(as_i64).unwrap_or(-2);
        let held = pttl != -2;
        let token = reply
            .get(1)
            .and_then(as_i64)
            .or_else(|| reply.get(3).and_then(as_i64))
            .map(|t| t as u64);
        Ok(LockInfo {
            name: name.to_string(),
            held,
            token,
            holder: if held {
                reply.get(2).and_then(as_string)
            } else {
                None
            },
            time_left: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            waiters: Vec::new(),
        })
    }

    pub(super) async fn list_locks(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let found = scan_keys(
            &self.conn,
            &scan_pattern(&self.settings.prefix, prefix),
            limit,
        )
        .await?;
        let mut locks = Vec::with_capacity(found.len());
        for key in found {
            if let Some(name) = name_of_lock_key(&self.settings.prefix, &key) {
                let info = self.inspect_lock(&name).await?;
                if info.held {
                    locks.push(info);
                }
            }
        }
        Ok(locks)
    }

    pub(super) async fn force_release_lock(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        force_release_key(
            &self.conn,
            &k.lock,
            &k.channel,
            self.conn.publish_command(),
            "redis force release",
        )
        .await
    }
}

/// An operator's release of one lock key, whoever holds it (shared with Redlock's masters):
/// true when there was a key to delete. `publish` is PUBLISH, or SPUBLISH on a Cluster.
pub(in crate::backend) async fn force_release_key(
    conn: &Conn,
    lock: &str,
    channel: &str,
    publish: &str,
    context: &str,
) -> Result<bool> {
    let n: i64 = FORCE_RELEASE
        .key(lock)
        .arg(channel)
        .arg(publish)
        .invoke_async(&mut conn.clone())
        .await
        .map_err(|e| map_error(context, e))?;
    Ok(n == 1)
}

/// How many keys one SCAN step looks at.
const SCAN_COUNT: u64 = 1000;

/// The keys matching `pattern` on one server, or on every master of a Cluster (a SCAN sees
/// only the node it is sent to), until `limit` are found. SCAN may return a key twice; the
/// caller deduplicates.
pub(in crate::backend) async fn scan_keys(
    conn: &Conn,
    pattern: &str,
    limit: usize,
) -> Result<Vec<String>> {
    let mut found = Vec::new();
    match conn {
        Conn::Single(single) => {
            scan_node(&mut found, pattern, limit, |cmd| {
                let mut c = single.clone();
                async move { cmd.query_async::<Value>(&mut c).await }
            })
            .await?
        }
        Conn::Cluster(cluster) => {
            for (host, port) in cluster_masters(&mut cluster.clone()).await? {
                if found.len() >= limit {
                    break;
                }
                scan_node(&mut found, pattern, limit, |cmd| {
                    let mut c = cluster.clone();
                    let node = redis::cluster_routing::RoutingInfo::SingleNode(
                        redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        },
                    );
                    async move { c.route_command(cmd, node).await }
                })
                .await?;
            }
        }
    }
    Ok(found)
}

async fn scan_node<F, Fut>(
    found: &mut Vec<String>,
    pattern: &str,
    limit: usize,
    send: F,
) -> Result<()>
where
    F: Fn(redis::Cmd) -> Fut,
    Fut: Future<Output = redis::RedisResult<Value>>,
{
    let mut cursor = "0".to_string();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let reply = send(cmd).await.map_err(|e| map_error("redis scan", e))?;
        let bad = || Error::internal(format!("unexpected reply to SCAN: {reply:?}"));
        let Value::Array(parts) = &reply else {
            return Err(bad());
        };
        let (Some(next), Some(Value::Array(keys))) =
            (parts.first().and_then(as_string), parts.get(1))
        else {
            return Err(bad());
        };
        found.extend(keys.iter().filter_map(as_string));
        if next == "0" || found.len() >= limit {
            return Ok(());
        }
        cursor = next;
    }
}

/// The masters of a Cluster, from `CLUSTER SLOTS` (each slot range names its master first).
async fn cluster_masters(
    conn: &mut redis::cluster_async::ClusterConnection,
) -> Result<Vec<(String, u16)>> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(|e| map_error("redis cluster slots", e))?;
    let mut masters: Vec<(String, u16)> = Vec::new();
    if let Value::Array(ranges) = &reply {
        for range in ranges {
            if let Value::Array(parts) = range
                && let Some(Value::Array(master)) = parts.get(2)
                && let (Some(host), Some(port)) = (
                    master.first().and_then(as_string),
                    master.get(1).and_then(as_i64),
                )
                && let Ok(port) = u16::try_from(port)
                && !masters.iter().any(|(h, p)| *h == host && *p == port)
            {
                masters.push((host, port));
            }
        }
    }
    if masters.is_empty() {
        return Err(Error::backend(format!(
            "CLUSTER SLOTS named no master: {reply:?}"
        )));
    }
    Ok(masters)
}
