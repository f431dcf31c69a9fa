//! fencelock's Redlock backend over five local masters, in one run with its floors:
//!
//! - uncontended cycle (acquire + release) through fencelock's single-instance Redis backend on
//!   the first master: the yardstick (Redlock's goal: no slower than 2x, three rounds
//!   of the slowest majority reply against two round trips);
//! - the raw 5-master floor: `SET NX PX` on all five in parallel, then a compare-and-delete on
//!   all five in parallel (two parallel rounds, no fencing, no health checks);
//! - fencelock's Redlock cycle: phase 1 (with `INFO server` pipelined for the restart and skew
//!   checks), phase 2, release.
//!
//! Usage: `cargo run --release -p fencelock-bench --bin redlock_floor [REDLOCK_URL]`
//! (default the five test masters, redlock://127.0.0.1:7001,…,127.0.0.1:7005).

use std::time::{Duration, Instant};

use fencelock::{LockOptions, Locker};
use fencelock_bench::{Run, Stats, header, row};

const CYCLES: usize = 2000;

const RAW_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn stats(samples: Vec<Duration>, elapsed: Duration) -> Stats {
    let mut run = Run::default();
    run.add((samples, elapsed));
    run.stats()
}

async fn fencelock_cycles(url: &str, name: &str) -> Stats {
    let locker = Locker::connect(url).await.unwrap();
    let options = LockOptions::default().with_ttl(Duration::from_secs(10));
    for _ in 0..50 {
        locker
            .acquire(name, &options)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let mut samples = Vec::with_capacity(CYCLES);
    let started = Instant::now();
    for _ in 0..CYCLES {
        let t = Instant::now();
        let lease = locker.acquire(name, &options).await.unwrap();
        lease.release().await.unwrap();
        samples.push(t.elapsed());
    }
    stats(samples, started.elapsed())
}

async fn raw_cycles(masters: &[String], with_info: bool) -> Stats {
    let mut conns = Vec::new();
    for m in masters {
        conns.push(
            redis::Client::open(m.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
    }
    let script = redis::Script::new(RAW_RELEASE);
    let key = "bench:redlock:raw";
    let quorum = masters.len() / 2 + 1;
    let mut samples = Vec::with_capacity(CYCLES);
    let started = Instant::now();
    for i in 0..CYCLES {
        let t = Instant::now();
        let owner = format!("owner-{i}");
        let sets = conns.iter().map(|c| {
            let mut c = c.clone();
            let owner = owner.clone();
            async move {
                let mut pipe = redis::pipe();
                if with_info {
                    pipe.cmd("INFO").arg("server").ignore();
                }
                pipe.cmd("SET")
                    .arg(key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000);
                let (r,): (Option<String>,) = pipe.query_async(&mut c).await.unwrap();
                r.is_some()
            }
        });
        let granted = join_all(sets.collect())
            .await
            .into_iter()
            .filter(|g| *g)
            .count();
        assert!(granted >= quorum);
        let dels = conns.iter().map(|c| {
            let mut c = c.clone();
            let (owner, script) = (owner.clone(), &script);
            async move {
                let _: i64 = script
                    .key(key)
                    .arg(owner)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
            }
        });
        join_all(dels.collect()).await;
        samples.push(t.elapsed());
    }
    stats(samples, started.elapsed())
}

/// Polls every future to completion, concurrently, in place.
async fn join_all<T, F: std::future::Future<Output = T>>(futures: Vec<F>) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in futures.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|v| v.unwrap()).collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005"
            .to_string()
    });
    let hosts = url
        .trim_start_matches("redlock://")
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_string();
    let masters: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
    println!(
        "Redlock over {} masters ({url}); {CYCLES} uncontended cycles each",
        masters.len()
    );
    header("Uncontended cycle (acquire + release)");
    let single = fencelock_cycles(&masters[0], "bench-redlock-single").await;
    let raw = raw_cycles(&masters, false).await;
    let raw_info = raw_cycles(&masters, true).await;
    let redlock = fencelock_cycles(&url, "bench-redlock").await;
    row(
        "fencelock, one Redis instance (the yardstick)",
        &single,
        None,
    );
    row(
        "raw 5-master floor: SET NX PX x5 || then compare-and-delete x5 ||",
        &raw,
        Some(&single),
    );
    row(
        "raw 5-master floor with INFO server pipelined before each SET",
        &raw_info,
        Some(&single),
    );
    row(
        "fencelock Redlock: phase 1 (+INFO) || phase 2 || release ||",
        &redlock,
        Some(&single),
    );
    println!(
        "\nRedlock against the raw 5-master floor: {:.2}x",
        redlock.per_second / raw.per_second
    );
}
