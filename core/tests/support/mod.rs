//! Shared by the integration tests that need real servers (started by tests/servers.sh).
#![allow(dead_code)]

pub mod probe;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// A server URL from `FENCELOCK_TEST_<NAME>_URL`, defaulting to the ports of tests/SERVERS.md.
pub fn url(name: &str, default: &str) -> String {
    std::env::var(format!("FENCELOCK_TEST_{name}_URL")).unwrap_or_else(|_| default.to_string())
}

pub fn redis_url() -> String {
    url("REDIS", "redis://127.0.0.1:6379")
}

/// A lock name no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

/// Runs `tests/servers.sh ARGS…` and panics if it fails.
pub fn servers(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/servers.sh");
    let status = Command::new("bash")
        .arg(script)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "tests/servers.sh {args:?} failed");
}

/// A plain redis-rs connection for setting up and inspecting state by hand.
pub async fn raw_redis(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A counter of a server's calls of one command (INFO commandstats).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The URL of one backend (the conformance suite's `Target::url` and the metrics tests):
/// sqlite (a file per test process), redis, zookeeper (a 2 s session, so losses come quickly),
/// postgres, mariadb.
pub fn backend_url(backend: &str) -> String {
    match backend {
        "sqlite" => {
            let dir = std::env::temp_dir().join(format!("fencelock-tests-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}", dir.join("locks.db").display())
        }
        "redis" => redis_url(),
        "zookeeper" => format!(
            "{}?session_timeout_ms=2000&tick_ms=500",
            url("ZK", "zk://127.0.0.1:2181")
        ),
        "postgres" => url(
            "POSTGRES",
            "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test",
        ),
        "mariadb" => url(
            "MARIADB",
            "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test",
        ),
        other => panic!("unknown backend {other}"),
    }
}

/// The Redlock masters (tests/servers.sh start redlock).
pub fn redlock_url() -> String {
    url(
        "REDLOCK",
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005?max_ttl=30s&max_skew=100ms",
    )
}

/// The Redis Cluster (tests/servers.sh start cluster).
pub fn cluster_url() -> String {
    url(
        "REDIS_CLUSTER",
        "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103",
    )
}
