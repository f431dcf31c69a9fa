//! Redis scenarios that disturb the shared test server (restarts, a paused replica, server
//! settings, command counts). They run one at a time: cargo runs test binaries one after the
//! other, and a lock inside this one serializes its tests.

// `serial()`'s guard is held across awaits on purpose: see there.
#![allow(clippy::await_holding_lock)]

mod support;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fencelock::{ErrorCode, Fence, LockOptions, Locker, LockerOptions};
use support::{command_calls, raw_redis, redis_url, servers, unique};

static SERIAL: Mutex<()> = Mutex::new(());

/// Held for a whole test, across its awaits (clippy's await_holding_lock is allowed above for
/// this): each test restarts or stops the one Redis server, and runs on a runtime of its own, so
/// no task of another test waits on this lock.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

async fn wait_until_answers(url: &str) {
    let started = Instant::now();
    loop {
        if let Ok(client) = redis::Client::open(url)
            && let Ok(mut c) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok()
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{url} did not come back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The worker half of the two-process contention test: runs when re-executed with
/// FENCELOCK_WORKER set, and does nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_worker() {
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
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&url, &name).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locker, fence, name, key, url) = (
            locker.clone(),
            fence.clone(),
            name.clone(),
            key.clone(),
            url.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut raw = raw_redis(&url).await;
            let mut tokens = Vec::new();
            for _ in 0..rounds {
                let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
                let n: Option<u64> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                // A stale write would be refused here and fail the worker.
                fence
                    .fenced_set(&lease, &key, (n.unwrap_or(0) + 1).to_string().as_bytes())
                    .await
                    .unwrap();
                tokens.push(lease.token());
                lease.release().await.unwrap();
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    println!(
        "TOKENS {}",
        all.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
}

#[test]
fn eight_contenders_in_two_processes_keep_a_fenced_counter_exact() {
    let _serial = serial();
    let url = redis_url();
    let name = unique("two-processes");
    let key = format!("fencelock-test:{}", unique("counter"));
    let spec = format!("{url}|{name}|{key}|4|200");
    let exe = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "contention_worker",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("FENCELOCK_WORKER", &spec)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut tokens = Vec::new();
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.find("TOKENS ").map(|at| l[at + 7..].trim()))
            .expect("worker printed no tokens");
        tokens.extend(line.split(',').map(|t| t.parse::<u64>().unwrap()));
    }
    assert_eq!(tokens.len(), 1600);
    let unique_tokens: std::collections::HashSet<_> = tokens.iter().collect();
    assert_eq!(unique_tokens.len(), 1600, "a token was handed out twice");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n: u64 = rt.block_on(async {
        let mut raw = raw_redis(&url).await;
        redis::cmd("GET")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap()
    });
    assert_eq!(n, 1600, "lost updates: mutual exclusion failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_across_a_restart_without_persistence() {
    let _serial = serial();
    let url = redis_url();
    let locker = Locker::connect(&url).await.unwrap();
    let name = unique("restart");
    let mut before = Vec::new();
    for _ in 0..20 {
        let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
        before.push(lease.token());
        lease.release().await.unwrap();
    }
    let held = locker.acquire(&name, &opts(3_000)).await.unwrap();
    tokio::task::spawn_blocking(|| servers(&["restart", "redis"]))
        .await
        .unwrap();
    wait_until_answers(&url).await;
    // The restarted server forgot every key, the counter included: the next tokens come from
    // its clock, and the lease that was held is found lost at its next renewal.
    let started = Instant::now();
    let after = loop {
        match locker
            .acquire(
                &name,
                &opts(10_000).with_wait(Some(Duration::from_secs(10))),
            )
            .await
        {
            Ok(lease) => break lease,
            Err(e)
                if e.code() == ErrorCode::Unavailable
                    && started.elapsed() < Duration::from_secs(30) =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no lock after the restart: {e}"),
        }
    };
    assert!(
        after.token() > held.token(),
        "token went backwards after a restart"
    );
    assert!(before.windows(2).all(|w| w[0] < w[1]));
    assert!(
        tokio::time::timeout(Duration::from_secs(10), held.lost_signal().wait())
            .await
            .is_ok()
    );
    after.release().await.unwrap();
}

/// The test replica's URL, a connection to it, and its process id (to pause it).
async fn test_replica() -> (String, redis::aio::MultiplexedConnection, i32) {
    let url = support::url("REDIS_REPLICA", "redis://127.0.0.1:6382");
    let mut replica = raw_redis(&url).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut replica)
        .await
        .unwrap();
    let pid = replica_pid(&info);
    (url, replica, pid)
}

fn replica_pid(info: &str) -> i32 {
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .expect("replica process_id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_makes_acquire_unavailable_and_leaves_nothing_behind() {
    let _serial = serial();
    let url = redis_url();
    let (_, _, pid) = test_replica().await;
    let locker = Locker::connect(&url).await.unwrap();
    let name = unique("replica");
    // SAFETY: pausing and resuming the test replica.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let result = locker
        .acquire(&name, &opts(10_000).with_wait(Some(Duration::ZERO)))
        .await;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let err = result.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    assert!(err.message().contains("replica"), "{err}");
    assert!(
        !locker.inspect(&name).await.unwrap().held,
        "a lock was left behind"
    );
    // Running again: acquire succeeds.
    let lease = locker
        .acquire(
            &name,
            &opts(10_000).with_wait(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    lease.release().await.unwrap();
    // With acknowledgement turned off the paused replica does not matter.
    let unacked = Locker::connect(&format!("{url}?replica_ack=false"))
        .await
        .unwrap();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let result = unacked
        .acquire(&name, &opts(10_000).with_wait(Some(Duration::ZERO)))
        .await;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    result.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_reaches_the_server_after_release() {
    let _serial = serial();
    let url = redis_url();
    let locker = Locker::connect(&url).await.unwrap();
    let mut raw = raw_redis(&url).await;
    let lease = locker.acquire(&unique("quiet"), &opts(300)).await.unwrap();
    let at_acquire = command_calls(&mut raw, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        command_calls(&mut raw, "evalsha").await > at_acquire,
        "the lease was never renewed"
    );
    lease.release().await.unwrap();
    let after_release = command_calls(&mut raw, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        command_calls(&mut raw, "evalsha").await,
        after_release,
        "a renewal was sent after release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_policies_that_can_drop_lock_keys_are_refused() {
    let _serial = serial();
    let url = redis_url();
    let mut raw = raw_redis(&url).await;
    for policy in ["allkeys-lru", "volatile-lru"] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(policy)
            .query_async(&mut raw)
            .await
            .unwrap();
        let refused = Locker::connect(&url).await;
        let allowed = Locker::connect(&format!("{url}?allow_eviction=true")).await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction")
            .query_async(&mut raw)
            .await
            .unwrap();
        let err = refused.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains(policy), "{err}");
        assert!(allowed.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_makes_a_held_lease_lost_at_its_deadline() {
    let _serial = serial();
    let url = redis_url();
    let options = LockerOptions::default().with_operation_timeout(Duration::from_millis(500));
    let locker = Locker::connect_with(&url, options).await.unwrap();
    let ttl = Duration::from_millis(2000);
    let lease = locker
        .acquire(
            &unique("unreachable"),
            &LockOptions::default().with_ttl(ttl),
        )
        .await
        .unwrap();
    tokio::task::spawn_blocking(|| servers(&["stop", "redis"]))
        .await
        .unwrap();
    let stopped = Instant::now();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(3), lease.lost_signal().wait()).await;
    tokio::task::spawn_blocking(|| servers(&["start", "redis"]))
        .await
        .unwrap();
    assert!(lost.is_ok(), "the lease was not lost by its deadline");
    assert!(stopped.elapsed() <= ttl + Duration::from_secs(3));
    assert!(lease.renewal_failing() || lease.is_lost());
    wait_until_answers(&url).await;
    // Connections come back by themselves after the restart.
    let started = Instant::now();
    loop {
        match locker
            .acquire(
                &unique("after"),
                &opts(10_000).with_wait(Some(Duration::ZERO)),
            )
            .await
        {
            Ok(lease) => {
                lease.release().await.unwrap();
                break;
            }
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "never reconnected: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Waiters of one name in one Locker queue locally: a release makes one of them try, not
/// all of them (the herd would cost about n²/2 scripts for n waiters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_one_locker_do_not_stampede() {
    let _serial = serial();
    let url = format!("{}?replica_ack=false", redis_url());
    let options = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
    let locker = Locker::connect_with(&url, options).await.unwrap();
    let name = unique("herd");
    let holder = locker.acquire(&name, &opts(30_000)).await.unwrap();
    let waiters = 16;
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let (locker, name, order) = (locker.clone(), name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = locker
                .acquire(
                    &name,
                    &opts(30_000).with_wait(Some(Duration::from_secs(30))),
                )
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            lease.release().await.unwrap();
        }));
        // Let each one queue before the next, so first come is first served.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut raw = raw_redis(&redis_url()).await;
    let before = command_calls(&mut raw, "evalsha").await;
    holder.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
    let scripts = command_calls(&mut raw, "evalsha").await - before;
    // One release by the holder, then per waiter about one acquire and one release.
    assert!(
        scripts <= 4 * waiters as u64,
        "{scripts} scripts for {waiters} handoffs: a stampede"
    );
    assert_eq!(
        *order.lock().unwrap(),
        (0..waiters).collect::<Vec<_>>(),
        "not first come, first served"
    );
}

/// Whether to wait for a replica is asked again during the Locker's life: a Locker that
/// connected while the master had no replica waits for one added later (a paused replica then
/// makes acquire UNAVAILABLE, as it does for a Locker that connected with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_added_after_connect_is_waited_for() {
    let _serial = serial();
    let url = redis_url();
    let master_addr = url
        .trim_start_matches("redis://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string();
    let (master_host, master_port) = master_addr.rsplit_once(':').unwrap();
    let (replica_url, mut replica, pid) = test_replica().await;
    let replicas = |mut c: redis::aio::MultiplexedConnection| async move {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut c)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    // Attached again however the test ends (other tests count on the replica).
    struct Reattach(String, String, String);
    impl Drop for Reattach {
        fn drop(&mut self) {
            if let Ok(mut c) = redis::Client::open(self.0.as_str()).and_then(|c| c.get_connection())
            {
                let _ = redis::cmd("REPLICAOF")
                    .arg(&self.1)
                    .arg(&self.2)
                    .query::<()>(&mut c);
            }
        }
    }
    let _reattach = Reattach(
        replica_url.clone(),
        master_host.to_string(),
        master_port.to_string(),
    );
    // Detached: the master has no replica when the Locker connects.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut replica)
        .await
        .unwrap();
    let started = Instant::now();
    while replicas(raw_redis(&url).await).await != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replica stayed attached"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let locker = Locker::connect(&url).await.unwrap();
    let attach = redis::cmd("REPLICAOF")
        .arg(master_host)
        .arg(master_port)
        .query_async::<()>(&mut replica)
        .await;
    let outcome = async {
        attach.unwrap();
        let started = Instant::now();
        while replicas(raw_redis(&url).await).await == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the replica never attached"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Within a re-check or two, a paused replica fails the acquire.
        let name = unique("replica-later");
        let started = Instant::now();
        loop {
            // SAFETY: pausing and resuming the test replica.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            let result = locker
                .acquire(&name, &opts(10_000).with_wait(Some(Duration::ZERO)))
                .await;
            unsafe { libc::kill(pid, libc::SIGCONT) };
            match result {
                Err(e) if e.code() == ErrorCode::Unavailable => return,
                Err(e) => panic!("{e}"),
                Ok(lease) => lease.release().await.unwrap(),
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the Locker never started waiting for the replica added after it connected"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    outcome.await;
    locker.close().await;
}
