//! fencelock's Redis backend against the raw floor, in one run on the same server:
//!
//! - uncontended cycle: acquire + release, against a plain client doing `SET NX PX` and a
//!   compare-and-delete script (no fencing, no renewal);
//! - handoff: the time from a release to the waiter holding the lock, against a raw waiter
//!   that spins on `SET NX` without sleeping (the lowest latency a poller can reach);
//! - wake-up with 8 and 64 waiters on one lock: fencelock's pub/sub (the waiters of one Locker
//!   queue locally and one of them contends) against a per-lock list popped with BLPOP (one
//!   waiter woken, one connection per waiter).
//!
//! Usage: `cargo run --release -p fencelock-bench --bin redis_floor [REDIS_URL]`
//! (default redis://127.0.0.1:7001, a master without replicas: docs/design.md §10's default
//! durability for this backend, and the same server for every contender).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{LockOptions, Locker};
use fencelock_bench::{Run, Stats, row};
use redis::AsyncCommands;

const CYCLES: usize = 3000;
const HANDOFFS: usize = 500;

fn stats(samples: Vec<Duration>, elapsed: Duration) -> Stats {
    let mut run = Run::default();
    run.add((samples, elapsed));
    run.stats()
}

const RAW_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn raw_try(conn: &mut redis::aio::MultiplexedConnection, key: &str, owner: &str) -> bool {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await
        .unwrap();
    set.is_some()
}

async fn raw_release(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &redis::Script,
    key: &str,
    owner: &str,
) {
    let _: i64 = script.key(key).arg(owner).invoke_async(conn).await.unwrap();
}

async fn uncontended_raw(url: &str) -> Stats {
    let mut conn = raw_conn(url).await;
    let script = redis::Script::new(RAW_RELEASE);
    let key = "bench:raw:uncontended";
    let mut samples = Vec::with_capacity(CYCLES);
    let started = Instant::now();
    for i in 0..CYCLES {
        let t = Instant::now();
        let owner = format!("owner-{i}");
        assert!(raw_try(&mut conn, key, &owner).await);
        raw_release(&mut conn, &script, key, &owner).await;
        samples.push(t.elapsed());
    }
    stats(samples, started.elapsed())
}

async fn uncontended_fencelock(url: &str) -> Stats {
    let locker = Locker::connect(url).await.unwrap();
    let options = LockOptions::default();
    let mut samples = Vec::with_capacity(CYCLES);
    let started = Instant::now();
    for _ in 0..CYCLES {
        let t = Instant::now();
        let lease = locker.acquire("bench-uncontended", &options).await.unwrap();
        lease.release().await.unwrap();
        samples.push(t.elapsed());
    }
    stats(samples, started.elapsed())
}

/// Two contenders hand the lock back and forth; each handoff is timed from the release call
/// to the other side holding the lock.
async fn handoff_fencelock(url: &str) -> Stats {
    let a = Locker::connect(url).await.unwrap();
    let b = Locker::connect(url).await.unwrap();
    let released_at = Arc::new(Mutex::new(Instant::now()));
    let samples = Arc::new(Mutex::new(Vec::with_capacity(HANDOFFS)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for locker in [a, b] {
        let (released_at, samples) = (released_at.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..HANDOFFS / 2 {
                let lease = locker
                    .acquire("bench-handoff", &LockOptions::default())
                    .await
                    .unwrap();
                let since = released_at.lock().unwrap().elapsed();
                samples.lock().unwrap().push(since);
                // Hold briefly so the other side is waiting when we release.
                tokio::time::sleep(Duration::from_micros(500)).await;
                *released_at.lock().unwrap() = Instant::now();
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut samples = std::mem::take(&mut *samples.lock().unwrap());
    samples.remove(0); // the very first acquire had no release before it
    stats(samples, started.elapsed())
}

async fn handoff_raw_spin(url: &str) -> Stats {
    let released_at = Arc::new(Mutex::new(Instant::now()));
    let samples = Arc::new(Mutex::new(Vec::with_capacity(HANDOFFS)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for side in 0..2 {
        let (released_at, samples, url) = (released_at.clone(), samples.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = raw_conn(&url).await;
            let script = redis::Script::new(RAW_RELEASE);
            for i in 0..HANDOFFS / 2 {
                let owner = format!("{side}-{i}");
                while !raw_try(&mut conn, "bench:raw:handoff", &owner).await {}
                samples
                    .lock()
                    .unwrap()
                    .push(released_at.lock().unwrap().elapsed());
                tokio::time::sleep(Duration::from_micros(500)).await;
                *released_at.lock().unwrap() = Instant::now();
                raw_release(&mut conn, &script, "bench:raw:handoff", &owner).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut samples = std::mem::take(&mut *samples.lock().unwrap());
    samples.remove(0);
    stats(samples, started.elapsed())
}

/// `waiters` contenders on one lock through fencelock (pub/sub wake-up, one shared Locker, so
/// its waiters queue locally and one of them contends at a time).
async fn herd_pubsub(url: &str, waiters: usize, total: usize) -> Stats {
    let locker = Locker::connect(url).await.unwrap();
    herd(waiters, total, move |_| {
        let locker = locker.clone();
        async move {
            let lease = locker
                .acquire("bench-herd", &LockOptions::default())
                .await
                .unwrap();
            Box::new(move || {
                tokio::spawn(async move { lease.release().await.unwrap() });
            }) as Box<dyn FnOnce() + Send>
        }
    })
    .await
}

/// The same through a per-lock list: a release pushes one element, BLPOP wakes one waiter.
async fn herd_blpop(url: &str, waiters: usize, total: usize) -> Stats {
    let url = url.to_string();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut setup = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = setup
        .del(&["bench:blpop:lock", "bench:blpop:wake"])
        .await
        .unwrap();
    let release = Arc::new(redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]); redis.call('DEL', KEYS[2]); redis.call('LPUSH', KEYS[2], 1); return 1 end return 0",
    ));
    herd(waiters, total, move |i| {
        let (client, release) = (client.clone(), release.clone());
        async move {
            // BLPOP blocks its connection: one dedicated connection per waiter.
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let owner = format!("w{i}-{:?}", Instant::now());
            loop {
                if raw_try(&mut conn, "bench:blpop:lock", &owner).await {
                    break;
                }
                let _: Option<(String, String)> = redis::cmd("BLPOP")
                    .arg("bench:blpop:wake")
                    .arg(0.05)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            Box::new(move || {
                tokio::spawn(async move {
                    let _: i64 = release
                        .key("bench:blpop:lock")
                        .key("bench:blpop:wake")
                        .arg(owner)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                });
            }) as Box<dyn FnOnce() + Send>
        }
    })
    .await
}

/// Runs `waiters` tasks that each loop: take the lock, record the time since the last
/// release, release. Stops after `total` handoffs.
async fn herd<F, Fut>(waiters: usize, total: usize, take: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Box<dyn FnOnce() + Send>> + Send,
{
    let released_at = Arc::new(Mutex::new(None::<Instant>));
    let samples = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let (released_at, samples, take) = (released_at.clone(), samples.clone(), take.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if samples.lock().unwrap().len() >= total {
                    return;
                }
                let release = take(i).await;
                if let Some(at) = *released_at.lock().unwrap() {
                    samples.lock().unwrap().push(at.elapsed());
                }
                *released_at.lock().unwrap() = Some(Instant::now());
                release();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    stats(samples, started.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:7001".to_string());
    println!("Redis at {url}; {CYCLES} uncontended cycles, {HANDOFFS} handoffs\n");
    println!("| workload | ops/s | p50 ms | p99 ms | vs floor |\n|---|---|---|---|---|");
    let raw = uncontended_raw(&url).await;
    let ours = uncontended_fencelock(&url).await;
    row(
        "uncontended cycle, raw floor (SET NX PX + compare-and-delete)",
        &raw,
        None,
    );
    row(
        "uncontended cycle, fencelock (fenced, renewing)",
        &ours,
        Some(&raw),
    );
    let raw = handoff_raw_spin(&url).await;
    let ours = handoff_fencelock(&url).await;
    row("handoff, raw floor (waiter spins on SET NX)", &raw, None);
    row("handoff, fencelock (pub/sub wake-up)", &ours, Some(&raw));
    for waiters in [8, 64] {
        let total = 400;
        let blpop = herd_blpop(&url, waiters, total).await;
        let pubsub = herd_pubsub(&url, waiters, total).await;
        row(
            &format!("{waiters} waiters, per-lock BLPOP list (one woken)"),
            &blpop,
            None,
        );
        row(
            &format!(
                "{waiters} waiters, fencelock pub/sub (local FIFO queue, one contender per Locker)"
            ),
            &pubsub,
            Some(&blpop),
        );
    }
}
