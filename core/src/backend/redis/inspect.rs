//! Reading locks without holding them, and clearing them: inspect, list (a SCAN of one server,
//! or of every master of a Cluster) and an operator's force release, for every kind of a name
//! (the mutex's key and the shared hash of [`super::semaphore_rwlock_scripts`]). Redlock's masters use
//! [`scan_keys`] and [`lock_info`] too.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Value;

use super::RedisBackend;
use super::conn::Conn;
use super::error::map_error;
use super::keys::{keys, name_of_lock_key, name_of_shared_key, scan_pattern, shared_scan_pattern};
use super::reply::{as_i64, as_string};
use super::semaphore_rwlock::explain_acl;
use super::semaphore_rwlock_scripts::{FORCE_RELEASE_ANY, INSPECT_ANY};
use crate::backend::{LeaseInfo, LockInfo, MAX_WAITERS_SHOWN, Waiter};
use crate::error::{Error, Result};
use crate::mode::{LockKind, LockMode};
use crate::name::LockName;

impl RedisBackend {
    pub(super) async fn inspect_lock(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let reply: Vec<Value> = INSPECT_ANY
            .key(&k.shared)
            .key(&k.leases)
            .key(&k.waiters)
            .key(&k.writers)
            .key(&k.lock)
            .key(&k.fence)
            .arg(MAX_WAITERS_SHOWN)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| explain_acl(map_error("redis inspect", e)))?;
        lock_info(name, &reply)
    }

    pub(super) async fn list_locks(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        let key_prefix = &self.settings.prefix;
        let mut names = BTreeSet::new();
        for key in scan_keys(&self.conn, &scan_pattern(key_prefix, prefix), limit).await? {
            names.extend(name_of_lock_key(key_prefix, &key));
        }
        let pattern = shared_scan_pattern(key_prefix, prefix);
        for key in scan_keys(&self.conn, &pattern, limit).await? {
            names.extend(name_of_shared_key(key_prefix, &key));
        }
        let mut locks = Vec::with_capacity(names.len().min(limit));
        for name in names {
            if locks.len() >= limit {
                break;
            }
            let info = self.inspect_lock(&name).await?;
            if info.held {
                locks.push(info);
            }
        }
        Ok(locks)
    }

    /// Frees the name whatever its kind: the mutex and every lease of the other kinds.
    pub(super) async fn force_release_lock(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        let k = keys(&self.settings.prefix, name);
        let n: i64 = FORCE_RELEASE_ANY
            .key(&k.shared)
            .key(&k.leases)
            .key(&k.waiters)
            .key(&k.writers)
            .key(&k.lock)
            .arg(&k.channel)
            .arg(self.conn.publish_command())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| explain_acl(map_error("redis force release", e)))?;
        Ok(n == 1)
    }
}

/// The owner id of each lease of an [`INSPECT_ANY`] answer, in the order of [`lock_info`]'s
/// `leases` (Redlock counts a lease by its owner on a majority of masters; the ids are never
/// shown).
pub(in crate::backend) fn lease_owners(reply: &[Value]) -> Vec<Option<String>> {
    entries(reply.get(6))
        .map(|lease| lease.get(4).and_then(as_string))
        .collect()
}

/// The inspect script's answer ([`INSPECT_ANY`]) as a [`LockInfo`].
pub(in crate::backend) fn lock_info(name: &LockName, reply: &[Value]) -> Result<LockInfo> {
    let pttl = reply.first().and_then(as_i64).unwrap_or(-2);
    let counter = reply.get(3).and_then(as_i64).map(|t| t as u64);
    let mut info = LockInfo::free(name, counter);
    if pttl != -2 {
        info.held = true;
        info.token = reply.get(1).and_then(as_i64).map(|t| t as u64).or(counter);
        info.holder = reply.get(2).and_then(as_string);
        info.time_left = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
        return Ok(info);
    }
    let Some(kind) = reply.get(4).and_then(as_string) else {
        return Ok(info);
    };
    let bad = || Error::internal(format!("unexpected reply to the inspect script: {reply:?}"));
    info.kind = LockKind::parse(&kind).ok_or_else(bad)?;
    let permits = reply.get(5).and_then(as_i64).unwrap_or(0);
    let permits = u32::try_from(permits).map_err(|_| bad())?;
    if info.kind == LockKind::Semaphore {
        info.permits = Some(permits);
    }
    let mode = |spelling: &str| match spelling {
        "permit" => Some(LockMode::Permit { permits }),
        "read" => Some(LockMode::Read),
        "write" => Some(LockMode::Write),
        _ => None,
    };
    for lease in entries(reply.get(6)) {
        info.leases.push(LeaseInfo {
            mode: lease
                .first()
                .and_then(as_string)
                .and_then(|m| mode(&m))
                .ok_or_else(bad)?,
            token: lease.get(1).and_then(as_i64).map(|t| t as u64),
            time_left: lease.get(2).and_then(time_left),
            holder: lease.get(3).and_then(as_string),
        });
    }
    for waiter in entries(reply.get(7)) {
        let mode = waiter.first().and_then(as_string).unwrap_or_default();
        // The first 8 hex digits of the owner id tell waiters apart without handing out the
        // id a release compares.
        let owner = waiter.get(3).and_then(as_string).unwrap_or_default();
        info.waiters.push(Waiter {
            node: format!("{mode} waiter {}", owner.get(..8).unwrap_or_default()),
            holder: waiter.get(2).and_then(as_string),
        });
    }
    info.held = !info.leases.is_empty();
    Ok(info)
}

/// The entries (each an array) of one list in the inspect script's answer.
fn entries(list: Option<&Value>) -> impl Iterator<Item = &[Value]> {
    let items = match list {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    items.iter().filter_map(|entry| match entry {
        Value::Array(fields) => Some(fields.as_slice()),
        _ => None,
    })
}

fn time_left(ms: &Value) -> Option<Duration> {
    as_i64(ms)
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms as u64))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn reply(kind: Value, permits: Value, leases: Vec<Value>, waiters: Vec<Value>) -> Vec<Value> {
        vec![
            Value::Int(-2),
            Value::Nil,
            Value::Nil,
            text("1764000000000009"),
            kind,
            permits,
            Value::Array(leases),
            Value::Array(waiters),
        ]
    }

    #[test]
    fn a_semaphore_shows_its_permits_leases_and_waiters() {
        let name = LockName::new("reports").unwrap();
        let lease = Value::Array(vec![
            text("permit"),
            text("1764000000000008"),
            Value::Int(2500),
            text(r#"{"pid":1}"#),
        ]);
        let waiter = Value::Array(vec![
            text("permit"),
            Value::Int(900),
            text("{}"),
            text("0123456789abcdef0123456789abcdef"),
        ]);
        let info = lock_info(
            &name,
            &reply(text("semaphore"), text("3"), vec![lease], vec![waiter]),
        )
        .unwrap();
        assert!(info.held);
        assert_eq!((info.kind, info.permits), (LockKind::Semaphore, Some(3)));
        assert_eq!(info.token, Some(1764000000000009));
        assert_eq!((&info.holder, info.time_left), (&None, None));
        assert_eq!(
            info.leases,
            [LeaseInfo {
                mode: LockMode::Permit { permits: 3 },
                token: Some(1764000000000008),
                holder: Some(r#"{"pid":1}"#.to_string()),
                time_left: Some(Duration::from_millis(2500)),
            }]
        );
        assert_eq!(info.waiters[0].node, "permit waiter 01234567");
    }

    #[test]
    fn a_read_write_lock_with_waiters_only_is_not_held_and_a_free_name_is_a_mutex() {
        let name = LockName::new("config").unwrap();
        let waiter = Value::Array(vec![text("write"), Value::Int(900), text("{}"), text("ab")]);
        let info = lock_info(
            &name,
            &reply(text("read-write lock"), text("0"), vec![], vec![waiter]),
        )
        .unwrap();
        assert!(!info.held);
        assert_eq!((info.kind, info.permits), (LockKind::ReadWrite, None));
        assert_eq!(info.waiters.len(), 1);
        let free = lock_info(&name, &reply(Value::Nil, Value::Nil, vec![], vec![])).unwrap();
        assert_eq!(free, LockInfo::free(&name, Some(1764000000000009)));
        let odd = reply(text("queue"), text("0"), vec![], vec![]);
        assert!(lock_info(&name, &odd).is_err());
    }
}
