//! Redis scenarios that disturb the shared test server (restarts, a paused replica, server
//! settings, command counts), and a failover on a master and replica of the test's own. They
//! run one at a time: cargo runs test binaries one after the other, and a lock inside this one
//! serializes its tests.

// `serial()`'s guard is held across awaits on purpose: see there.
#![allow(clippy::await_holding_lock)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{
    self, command_calls, own_ports, raw_redis, redis_url, servers, test_path, unique,
};
use fencelock::{BootInstant, ErrorCode, Fence, LockOptions, Locker, LockerOptions, LossReason};

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
                    &test_path(module_path!(), "contention_worker"),
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
    // Renewed every 500 ms: a busy machine's pause of a few hundred does not lose it.
    let lease = locker.acquire(&unique("quiet"), &opts(1500)).await.unwrap();
    let at_acquire = command_calls(&mut raw, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        command_calls(&mut raw, "evalsha").await > at_acquire,
        "the lease was never renewed"
    );
    lease.release().await.unwrap();
    let after_release = command_calls(&mut raw, "evalsha").await;
    // Longer than two renewal intervals.
    tokio::time::sleep(Duration::from_millis(1200)).await;
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
    // Read before the restart, whose own time is not the lease's.
    let lost_after = stopped.elapsed();
    tokio::task::spawn_blocking(|| servers(&["start", "redis"]))
        .await
        .unwrap();
    assert!(lost.is_ok(), "the lease was not lost by its deadline");
    assert!(
        lost_after <= ttl + Duration::from_secs(3),
        "lost after {lost_after:?}"
    );
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

// ------------------------------------------------------------ failover with a skewed clock

/// How far the promoted replica's clock runs ahead of its master's.
const FAILOVER_SKEW: Duration = Duration::from_millis(400);
/// The URLs' `max_skew`, above the real skew: the holder's client deadline (the ttl less
/// 1% + 2 ms + `max_skew` after the last acknowledged send) comes 3000 − 832 = 2168 ms after
/// it, 432 ms before the promoted replica expires the key (3000 − 400 = 2600 ms).
/// `FENCELOCK_TEST_FAILOVER_MAX_SKEW=0ms` (the margin before `max_skew` existed: 32 ms) makes
/// the test fail: the deadline then comes 368 ms after the waiter got the lock.
const FAILOVER_MAX_SKEW: &str = "800ms";
const FAILOVER_TTL: Duration = Duration::from_secs(3);

/// libfaketime (Debian's `faketime` package) where Debian and a source install put it.
fn libfaketime() -> Option<PathBuf> {
    let file = "faketime/libfaketimeMT.so.1";
    let mut dirs = vec![
        PathBuf::from("/usr/lib"),
        "/usr/local/lib".into(),
        "/usr/lib64".into(),
    ];
    // Multiarch: /usr/lib/x86_64-linux-gnu/faketime/…
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    dirs.into_iter().map(|d| d.join(file)).find(|p| p.exists())
}

/// A missing prerequisite skips the test, or fails it when FENCELOCK_REQUIRE_SERVERS=1 (CI).
fn skip(why: &str) {
    assert!(
        std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
        "cannot run the failover test: {why}"
    );
    println!("skipped: {why}");
}

/// A master and a replica of this test's own (the shared servers stay untouched), on ports of
/// its own ([`own_ports`]), their files in a temporary folder. Dropping it resumes and kills both.
struct OwnPair {
    dir: tempfile::TempDir,
    master: Child,
    replica: Child,
    master_port: u16,
    replica_port: u16,
}

impl OwnPair {
    /// The replica runs with its wall clock `skew` ahead, through libfaketime. Debian's
    /// redis-server allocates with jemalloc, which deadlocks against libfaketime's
    /// initialisation (libfaketime issue #130; the `faketime` wrapper hangs the same way), so
    /// the replica preloads libc after libfaketime: glibc's malloc then comes first and
    /// jemalloc is left only its statistics calls. Only the wall clock is shifted
    /// (FAKETIME_DONT_FAKE_MONOTONIC=1): Redis times its event loop on the monotonic clock
    /// and expires keys on the wall clock.
    fn start(faketime: &Path, skew: Duration) -> std::io::Result<OwnPair> {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-failover-")
            .tempdir()?;
        let ports = own_ports(2);
        let (master_port, replica_port) = (ports[0], ports[1]);
        let spawn = |name: &str, port: u16, extra: &[String], env: &[(&str, String)]| {
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args([
                    "--repl-diskless-sync",
                    "yes",
                    "--repl-diskless-sync-delay",
                    "0",
                ])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(dir.path().join(format!("{name}.log")))
                .args(extra)
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(
                    dir.path().join(format!("{name}.err")),
                )?);
            cmd.spawn()
        };
        let master = spawn("master", master_port, &[], &[])?;
        let replica = spawn(
            "replica",
            replica_port,
            &[
                "--replicaof".into(),
                "127.0.0.1".into(),
                master_port.to_string(),
            ],
            &[
                ("LD_PRELOAD", format!("{} libc.so.6", faketime.display())),
                // libfaketime's offset in seconds; "+0.400" in the C locale.
                ("FAKETIME", format!("+{:.3}", skew.as_secs_f64())),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
                ("LC_ALL", "C".into()),
            ],
        );
        let replica = match replica {
            Ok(r) => r,
            Err(e) => {
                let mut master = master;
                let _ = master.kill();
                let _ = master.wait();
                return Err(e);
            }
        };
        Ok(OwnPair {
            dir,
            master,
            replica,
            master_port,
            replica_port,
        })
    }

    fn url(port: u16) -> String {
        format!("redis://127.0.0.1:{port}")
    }

    /// What the servers said, for a failure message.
    fn logs(&self) -> String {
        ["master.err", "master.log", "replica.err", "replica.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
                let tail: Vec<_> = text.lines().rev().take(8).collect();
                let tail: Vec<_> = tail.into_iter().rev().collect();
                format!("--- {f}\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for OwnPair {
    fn drop(&mut self) {
        for child in [&mut self.master, &mut self.replica] {
            // SAFETY: signalling a child of this test (stopped or not).
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn info_field(conn: &mut redis::aio::MultiplexedConnection, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .ok()?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
}

/// Server TIME in microseconds.
async fn server_micros(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1_000_000 + micros
}

/// How far the replica's clock runs ahead of the master's, in µs: the replica's TIME against
/// the middle of two master TIMEs around it, from the tightest of a few tries.
async fn clock_offset(
    master: &mut redis::aio::MultiplexedConnection,
    replica: &mut redis::aio::MultiplexedConnection,
) -> i64 {
    let mut best = (i64::MAX, 0);
    for _ in 0..5 {
        let before = server_micros(master).await;
        let theirs = server_micros(replica).await;
        let after = server_micros(master).await;
        if after - before < best.0 {
            best = (after - before, theirs - (before + after) / 2);
        }
    }
    best.1
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// Signed milliseconds from `from` to `to`.
fn ms_between(from: BootInstant, to: BootInstant) -> f64 {
    (to.since_boot().as_secs_f64() - from.since_boot().as_secs_f64()) * 1000.0
}

/// Issue 23, safety finding 3. Redis 7 replicates key expiry as absolute unix times, so a
/// replica whose clock runs S ahead of its master's expires a lock key S early once it is
/// promoted. The holder's client deadline keeps `max_skew` in its margin for that: its lost
/// signal must fire before a waiter on the promoted replica gets the lock. The master is
/// paused (SIGSTOP) so the holder's renewals fail, then the replica, running 400 ms ahead under
/// libfaketime, is promoted (REPLICAOF NO ONE); a waiter tries every 5 ms there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_with_a_clock_ahead_lets_a_waiter_in_only_after_the_holder_lost() {
    let _serial = serial();
    let Some(faketime) = libfaketime() else {
        return skip(
            "libfaketime is not installed (apt-get install faketime, or tests/servers.sh install redis)",
        );
    };
    let max_skew = std::env::var("FENCELOCK_TEST_FAILOVER_MAX_SKEW")
        .unwrap_or_else(|_| FAILOVER_MAX_SKEW.to_string());
    let pair = match OwnPair::start(&faketime, FAILOVER_SKEW) {
        Ok(pair) => pair,
        Err(e) => return skip(&format!("cannot start redis-server: {e}")),
    };
    let (master_url, replica_url) = (
        OwnPair::url(pair.master_port),
        OwnPair::url(pair.replica_port),
    );
    // Both answer, and the replica is in sync (so the master counts it and WAITs for it).
    let started = Instant::now();
    let (mut master, mut replica) = loop {
        let master = redis::Client::open(master_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await;
        let replica = redis::Client::open(replica_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await;
        // After a diskless sync the master streams writes to the replica only once the
        // replica's first REPLCONF ACK came (up to a second later): until a write is
        // acknowledged, the holder's first acquire could fail its WAIT and be retried.
        if let (Ok(mut m), Ok(mut r)) = (master, replica)
            && info_field(&mut r, "master_link_status").await.as_deref() == Some("up")
            && info_field(&mut m, "connected_slaves").await.as_deref() == Some("1")
            && redis::pipe()
                .cmd("SET")
                .arg("probe")
                .arg("1")
                .ignore()
                .cmd("WAIT")
                .arg(1)
                .arg(100)
                .query_async::<(i64,)>(&mut m)
                .await
                .is_ok_and(|(acks,)| acks == 1)
        {
            break (m, r);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the master and its replica did not come up\n{}",
            pair.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let offset = clock_offset(&mut master, &mut replica).await;
    println!("replica clock ahead by {:.1} ms", offset as f64 / 1000.0);
    let skew = FAILOVER_SKEW.as_micros() as i64;
    assert!(
        (offset - skew).abs() < 150_000,
        "libfaketime did not put the replica's clock {FAILOVER_SKEW:?} ahead: it is {offset} µs ahead"
    );

    // The holder, on the master, its renewals acknowledged by the replica (WAIT 1).
    let options = LockerOptions::default().with_operation_timeout(Duration::from_millis(500));
    let holder = Locker::connect_with(&format!("{master_url}?max_skew={max_skew}"), options)
        .await
        .unwrap();
    let name = unique("failover");
    let key = format!("fencelock:{{{name}}}");
    let t0 = BootInstant::now();
    let lease = holder
        .acquire(&name, &LockOptions::default().with_ttl(FAILOVER_TTL))
        .await
        .unwrap();
    let acquired = BootInstant::now();
    let lost_at = Arc::new(Mutex::new(None));
    {
        let lost_at = lost_at.clone();
        lease.lost_signal().on_lost(move |reason| {
            *lost_at.lock().unwrap() = Some((BootInstant::now(), reason));
        });
    }
    // The key reached the replica (the acquire waited for it), with the master's absolute
    // expiry, which the replica's clock reads as S nearer.
    let on_replica = pttl(&mut replica, &key).await;
    let on_master = pttl(&mut master, &key).await;
    println!("PTTL after the acquire: master {on_master} ms, replica {on_replica} ms");
    assert!(on_replica > 0, "the lock key is not on the replica");
    assert!(
        on_master - on_replica > FAILOVER_SKEW.as_millis() as i64 / 2,
        "the replica does not expire the key early ({on_master} vs {on_replica} ms): Redis \
         did not replicate the expiry as an absolute time, or the clock is not skewed"
    );

    // Failover: the master stops answering (the holder's renewals fail), the replica is
    // promoted.
    // SAFETY: pausing our own master; OwnPair's drop resumes and kills it.
    unsafe { libc::kill(pair.master.id() as i32, libc::SIGSTOP) };
    let stopped = BootInstant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut replica)
        .await
        .unwrap();
    let left = pttl(&mut replica, &key).await;
    assert!(
        left > 0,
        "the lock key expired on the replica before the test could wait"
    );
    let expires = BootInstant::now()
        .checked_add(Duration::from_millis(left as u64))
        .unwrap();

    // A waiter on the promoted replica tries every 5 ms.
    let waiter = Locker::connect(&format!("{replica_url}?max_skew={max_skew}"))
        .await
        .unwrap();
    let (tried_at, got_at, taken) = loop {
        let tried_at = BootInstant::now();
        if let Some(lease) = waiter
            .try_acquire(&name, &LockOptions::default().with_ttl(FAILOVER_TTL))
            .await
            .unwrap()
        {
            break (tried_at, BootInstant::now(), lease);
        }
        assert!(
            stopped.elapsed() < FAILOVER_TTL + Duration::from_secs(10),
            "the waiter never got the lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The signal may still be due (that is the failure this test catches): wait for it.
    let lost = tokio::time::timeout(FAILOVER_TTL, lease.lost_signal().wait()).await;
    let recorded = *lost_at.lock().unwrap();
    let timeline = format!(
        "ms after the holder's acquire was called: it returned {:.0}, master stopped {:.0}, \
         client deadline {:.0}, lost signal {}, replica's expiry {:.0}, waiter's winning try \
         sent {:.0} and answered {:.0} (max_skew={max_skew}, skew {FAILOVER_SKEW:?}, ttl \
         {FAILOVER_TTL:?})",
        ms_between(t0, acquired),
        ms_between(t0, stopped),
        ms_between(t0, lease.deadline()),
        recorded.map_or("never".to_string(), |(at, _)| format!(
            "{:.0}",
            ms_between(t0, at)
        )),
        ms_between(t0, expires),
        ms_between(t0, tried_at),
        ms_between(t0, got_at),
    );
    println!("{timeline}");
    assert!(
        lost.is_ok(),
        "the holder's lease was never lost; {timeline}"
    );
    let (lost_at, reason) = recorded.expect("the lost signal fired but its callback did not run");
    assert_eq!(reason, LossReason::Expired, "{timeline}");
    assert!(
        lost_at < tried_at,
        "the waiter got the lock before the holder's lost signal fired; {timeline}"
    );
    // The counter reached the replica with the key, and its clock is ahead anyway.
    assert!(
        taken.token() > lease.token(),
        "token went backwards across the failover: {} after {}",
        taken.token(),
        lease.token()
    );
    taken.release().await.unwrap();
    waiter.close().await;
    drop(lease);
    let _ = tokio::time::timeout(Duration::from_secs(2), holder.close()).await;
    drop(pair);
}

/// A blocking acquire whose caller-driven round trip times out (the server paused): the
/// caller hears UNAVAILABLE, and once the server runs the acquire, the release sent after it
/// on the same connection frees the lock again, long before its ttl.
#[test]
fn a_blocking_acquire_that_times_out_leaves_the_lock_free() {
    let _serial = serial();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = redis_url();
    let options = LockerOptions::default().with_operation_timeout(Duration::from_millis(500));
    let locker = runtime
        .block_on(Locker::connect_with(&url, options))
        .unwrap();
    let name = unique("paused-acquire");
    // A first cycle opens the caller-driven connection.
    let lease = locker.acquire_blocking(&name, &opts(30_000)).unwrap();
    lease.release_blocking(locker.runtime()).unwrap();
    runtime.block_on(async {
        let mut raw = raw_redis(&url).await;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .arg("WRITE")
            .query_async(&mut raw)
            .await
            .unwrap();
    });
    let err = locker
        .try_acquire_blocking(&name, &opts(30_000))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    let started = Instant::now();
    loop {
        // Inspecting runs a script too: it times out while the server is paused.
        let info = match runtime.block_on(locker.inspect(&name)) {
            Err(e) if e.code() == ErrorCode::Unavailable => None,
            answer => Some(answer.unwrap()),
        };
        if info.as_ref().is_some_and(|info| !info.held)
            && started.elapsed() > Duration::from_millis(1500)
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the lock is still held {:?} after the timeout: {info:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let lease = locker
        .try_acquire_blocking(&name, &opts(30_000))
        .unwrap()
        .expect("free again");
    lease.release_blocking(locker.runtime()).unwrap();
    runtime.block_on(locker.close());
}

/// An acquire polled on an event loop (Node's executor) is dropped while its reply is owed (an
/// `AbortSignal` fired) and the server is busy (`DEBUG SLEEP`), so it has not read the acquire
/// yet: its clean-up release is written after it on the same connection before that is closed,
/// so once the server reads them the lock is free, never held by nobody until its ttl (a
/// release on another connection could be read first and find nothing to release).
#[test]
fn an_event_loop_acquire_dropped_in_flight_leaves_the_lock_free() {
    use fencelock::event_loop::{LoopPoll, poll_on_event_loop};
    let _serial = serial();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = redis_url();
    let locker = runtime.block_on(Locker::connect(&url)).unwrap();
    let name = unique("dropped-on-loop");
    // Cycles on the loop until one runs on the caller-driven connection (opened in the
    // background by the first).
    let given_up = Instant::now() + Duration::from_secs(10);
    loop {
        let (lease, driven) =
            support::event_loop::on_loop(&locker, locker.acquire(&name, &opts(30_000)));
        support::event_loop::on_loop(&locker, lease.unwrap().release())
            .0
            .unwrap();
        if driven.socket_waits > 0 {
            break;
        }
        assert!(Instant::now() < given_up, "no caller-driven connection");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sleeper = std::thread::spawn({
        let url = url.clone();
        move || {
            let mut raw = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.8")
                .query(&mut raw)
                .unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let options = opts(30_000);
    let mut acquire = Box::pin(locker.try_acquire(&name, &options));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match poll_on_event_loop(locker.runtime(), acquire.as_mut(), &mut cx) {
        LoopPoll::Pending(Some(_)) => {}
        LoopPoll::Pending(None) => panic!("the acquire did not go out on the loop's connection"),
        LoopPoll::Ready(answer) => panic!("answered while the server sleeps: {answer:?}"),
        LoopPoll::Panicked(_) => panic!("the acquire panicked"),
    }
    drop(acquire);
    sleeper.join().unwrap();
    let started = Instant::now();
    loop {
        let info = runtime.block_on(locker.inspect(&name)).unwrap();
        if !info.held {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the lock is still held {:?} after the server woke: {info:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let lease = runtime
        .block_on(locker.try_acquire(&name, &opts(30_000)))
        .unwrap()
        .expect("free again");
    runtime.block_on(lease.release()).unwrap();
    runtime.block_on(locker.close());
}
