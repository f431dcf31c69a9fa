//! Shared by the Redlock tests: the five masters' URL, a skip-or-fail check that they answer,
//! and the contention worker.
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::Duration;

use fencelock::{Fence, LockOptions, Locker};

use crate::support::raw_redis;

pub use crate::support::redlock_url;

/// The test URL without its query.
pub fn base_url() -> String {
    redlock_url().split('?').next().unwrap().to_string()
}

/// `redis://host:port` of each master, in order.
pub fn masters() -> Vec<String> {
    let url = redlock_url();
    let hosts = url
        .trim_start_matches("redlock://")
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_string();
    hosts
        .split(',')
        .map(|h| format!("redis://{}", h.rsplit('@').next().unwrap()))
        .collect()
}

/// `url` with `query` added.
pub fn with(url: &str, query: &str) -> String {
    if url.contains('?') {
        format!("{url}&{query}")
    } else {
        format!("{url}?{query}")
    }
}

/// Whether every master answers; when one does not, the test is skipped, or fails when
/// FENCELOCK_REQUIRE_SERVERS=1 (CI).
pub fn servers_up() -> bool {
    for m in masters() {
        let addr = m.trim_start_matches("redis://");
        let ok = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
        if !ok {
            assert!(
                std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "redlock master {m} does not answer (bash tests/servers.sh start redlock)"
            );
            eprintln!(
                "skipped: redlock master {m} does not answer (bash tests/servers.sh start redlock)"
            );
            return false;
        }
    }
    true
}

pub fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

/// The worker half of the multi-process contention tests: when re-executed with
/// FENCELOCK_WORKER=`url|name|counter key|tasks|rounds`, runs `tasks` contenders of `rounds`
/// critical sections each. Each section reads a counter kept on the first master, writes it
/// + 1 through a fence (a stale write fails the worker), and records `(value read, token)`.
pub async fn worker() {
    let Ok(spec) = std::env::var("FENCELOCK_WORKER") else {
        return;
    };
    let mut parts = spec.split('|');
    let (url, name, key, tasks, rounds) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap().parse::<usize>().unwrap(),
        parts.next().unwrap().parse::<usize>().unwrap(),
    );
    let store = masters()[0].clone();
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&store, &name).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locker, fence, name, key, store) = (
            locker.clone(),
            fence.clone(),
            name.clone(),
            key.clone(),
            store.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut raw = raw_redis(&store).await;
            let mut seen = Vec::new();
            for _ in 0..rounds {
                let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
                let n: Option<u64> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let n = n.unwrap_or(0);
                fence
                    .fenced_set(&lease, &key, (n + 1).to_string().as_bytes())
                    .await
                    .unwrap();
                seen.push((n, lease.token()));
                lease.release().await.unwrap();
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let text: Vec<String> = all.iter().map(|(n, t)| format!("{n}:{t}")).collect();
    println!("SEEN {}", text.join(","));
}

/// Starts `processes` re-executions of this test binary running `worker_test` (which calls
/// [`worker`]).
pub fn spawn_workers(worker_test: &str, spec: &str, processes: usize) -> Vec<std::process::Child> {
    let exe = std::env::current_exe().unwrap();
    (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", worker_test, "--nocapture", "--test-threads", "1"])
                .env("FENCELOCK_WORKER", spec)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Waits for the workers and checks the run: every section's value read is distinct and
/// covers 0..total (no lost update: mutual exclusion held), and ordered by the value read,
/// the tokens strictly increase (the order the leases were granted in).
pub fn check_workers(workers: Vec<std::process::Child>, total: usize) {
    let mut seen: Vec<(u64, u64)> = Vec::new();
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.find("SEEN ").map(|at| l[at + 5..].trim().to_string()))
            .expect("worker printed nothing");
        for pair in line.split(',') {
            let (n, t) = pair.split_once(':').unwrap();
            seen.push((n.parse().unwrap(), t.parse().unwrap()));
        }
    }
    assert_eq!(seen.len(), total);
    seen.sort();
    for (i, (n, _)) in seen.iter().enumerate() {
        assert_eq!(
            *n, i as u64,
            "lost or doubled update at {i}: mutual exclusion failed"
        );
    }
    for w in seen.windows(2) {
        assert!(
            w[0].1 < w[1].1,
            "tokens went backwards in grant order: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

pub async fn counter(key: &str) -> u64 {
    let mut raw = raw_redis(&masters()[0]).await;
    let n: Option<u64> = redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    n.unwrap_or(0)
}
