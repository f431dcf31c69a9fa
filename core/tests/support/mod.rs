//! Shared by the integration tests that need real servers (started by tests/servers.sh).
#![allow(dead_code)]

pub mod event_loop;
pub mod probe;
pub mod redlock;
pub mod sql;

use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
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

/// `n` loopback ports for servers a test starts itself (fresh Redis masters, a replica), from a
/// block no shared server of tests/servers.sh uses (`FENCELOCK_TEST_OWN_PORT_BASE`, default
/// 7400) and below the kernel's ephemeral range. A port bound to 0 and released, then used by a
/// server started later or restarted, could be taken meanwhile by another test's listener or an
/// outgoing connection's source port: the fault scenarios run beside each other.
pub fn own_ports(n: usize) -> Vec<u16> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base: u16 = std::env::var("FENCELOCK_TEST_OWN_PORT_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7400);
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(offset < 100, "more than 100 ports asked of own_ports");
        let port = base + offset;
        // Skips a port something else on this machine listens on.
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    ports
}

/// The name libtest gives a test of module `module_path` (the caller's `module_path!()`), for
/// running that one test again in a child process with `--exact`: `test_path(module_path!(),
/// "worker")` in `faults::redis` is `redis::worker`.
pub fn test_path(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_binary, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// The connect string of a `zk://` URL (`host:port,host:port`), without chroot or options.
pub fn zk_connect_string(url: &str) -> String {
    let rest = url.trim_start_matches("zk://");
    rest.split(['/', '?']).next().unwrap_or(rest).to_string()
}

/// The `host:port` of each server a `zk://` URL names, in its order.
pub fn zk_hosts(url: &str) -> Vec<String> {
    zk_connect_string(url)
        .split(',')
        .map(str::to_string)
        .collect()
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
    // Not redis-rs's default of 500 ms per answer: a busy 2-core CI machine exceeds it, and a
    // test's own reads are not what it measures.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(30)))
        .set_response_timeout(Some(std::time::Duration::from_secs(30)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
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
