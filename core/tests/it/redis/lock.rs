//! What is specific to the Redis backend, against a real redis-server and Cluster
//! (tests/servers.sh start redis cluster): pub/sub wake-ups, its fence, key layout and slots, ACL
//! errors, URL inputs, `max_skew`, exact big tokens, and replayed lock scripts. The lock
//! contract runs on Redis, TLS, the ACL user and the Cluster in the conformance suite
//! (core/tests/it/conformance).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::probe::WaitProbe;
use crate::support::{self, cluster_url, raw_redis, redis_url, unique};
use fencelock::options::TestHook;
use fencelock::{BootInstant, ErrorCode, Fence, LockOptions, Locker, LockerOptions};

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

/// A release wakes a waiter through pub/sub (sharded pub/sub on a Cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_at_once() {
    for url in [redis_url(), cluster_url()] {
        support::probe::a_release_wakes_a_slow_polling_waiter(&url).await;
    }
}

/// Forces each interleaving of a release with the waiter's failed attempt, its subscription
/// and its sleep: the waiter must never miss it (the fallback poll is a minute here).
/// Multi-threaded: the hook blocks one worker while the release runs on the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_never_misses_a_release_around_its_subscription() {
    for point in ["attempt_failed", "subscribed", "waiting"] {
        let holder = Locker::connect(&redis_url()).await.unwrap();
        let name = unique(point);
        let lease = holder.acquire(&name, &opts(30_000)).await.unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        let hook = {
            let fired = fired.clone();
            let lease = std::sync::Mutex::new(Some(lease.clone()));
            TestHook(Arc::new(move |at: &'static str| {
                if at == point && !fired.swap(true, Ordering::SeqCst) {
                    let lease = lease.lock().unwrap().take().unwrap();
                    // Release synchronously, on another thread, right at this point.
                    std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        rt.block_on(lease.release()).unwrap();
                    })
                    .join()
                    .unwrap();
                }
            }))
        };
        let mut options = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
        options.test_hook = Some(hook);
        let waiter = Locker::connect_with(&redis_url(), options).await.unwrap();
        let got = waiter
            .acquire(
                &name,
                &opts(30_000).with_wait(Some(Duration::from_secs(10))),
            )
            .await;
        assert!(
            fired.load(Ordering::SeqCst),
            "the hook point {point} was never reached"
        );
        let got = got.unwrap_or_else(|e| panic!("missed a release at {point}: {e}"));
        assert!(got.token() > lease.token());
    }
}

#[tokio::test]
async fn contention_in_one_process_with_a_redis_fence() {
    let url = redis_url();
    let name = unique("contend");
    let counter_key = format!("fencelock-test:{}", unique("counter"));
    let fence = Fence::open(&url, &name).await.unwrap();
    let locker = Locker::connect(&url).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (locker, fence, name, counter_key, url) = (
            locker.clone(),
            fence.clone(),
            name.clone(),
            counter_key.clone(),
            url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut raw = raw_redis(&url).await;
            for _ in 0..25 {
                let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
                let n: Option<u64> = redis::cmd("GET")
                    .arg(&counter_key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let next = n.unwrap_or(0) + 1;
                fence
                    .fenced_set(&lease, &counter_key, next.to_string().as_bytes())
                    .await
                    .unwrap();
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut raw = raw_redis(&url).await;
    let n: u64 = redis::cmd("GET")
        .arg(&counter_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(n, 200);
}

#[tokio::test]
async fn the_redis_fence_rejects_stale_tokens_and_foreign_locks() {
    let url = redis_url();
    let locker = Locker::connect(&url).await.unwrap();
    let resource = unique("resource");
    let key = format!("fencelock-test:{resource}");
    let fence = Fence::open(&url, &resource).await.unwrap();
    let name = unique("fenced");
    let old = locker.acquire(&name, &opts(10_000)).await.unwrap();
    let old_token = old.token();
    fence.fenced_set(&old, &key, b"old").await.unwrap();
    old.release().await.unwrap();
    let new = locker.acquire(&name, &opts(10_000)).await.unwrap();
    fence.fenced_set(&new, &key, b"new").await.unwrap();
    let err = fence
        .fenced_set(old_token, &key, b"stale")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StaleToken);
    assert_eq!(
        fence.check(old_token).await.unwrap_err().code(),
        ErrorCode::StaleToken
    );
    fence.check(&new).await.unwrap();
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
    let mut raw = raw_redis(&url).await;
    let value: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(value, "new");
    let other = locker
        .acquire(&unique("other"), &opts(10_000))
        .await
        .unwrap();
    assert_eq!(
        fence
            .fenced_set(&other, &key, b"x")
            .await
            .unwrap_err()
            .code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        fence.fenced_execute(&new, &[]).await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    // fencelock's own keys (the fence's records, the locks) are never data: overwriting the
    // record would erase the token history the fence checks against.
    for own in [
        format!("fencelock-fence:{{{resource}}}"),
        format!("fencelock:{{{name}}}"),
    ] {
        let err = fence.fenced_set(&new, &own, b"x").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{own}: {err}");
    }
    fence.check(&new).await.unwrap();
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
    // Tokens are compared exactly up to 2^63 - 1 (as doubles, 2^53 + 1 would round to 2^53
    // and 2^53 would pass as not older); beyond, the token is refused.
    let exact = Fence::open(&redis_url(), &unique("exact")).await.unwrap();
    let just_above = (1u64 << 53) + 1;
    exact.fenced_set(just_above, &key, b"2^53+1").await.unwrap();
    for older in [1u64 << 53, just_above - 2] {
        let err = exact.check(older).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::StaleToken, "{older}: {err}");
        let err = exact.fenced_set(older, &key, b"x").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::StaleToken, "{older}: {err}");
    }
    exact
        .fenced_set(i64::MAX as u64, &key, b"2^63-1")
        .await
        .unwrap();
    let err = exact.check(i64::MAX as u64 - 1).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::StaleToken, "{err}");
    assert_eq!(exact.highest().await.unwrap(), Some(i64::MAX as u64));
    let err = exact.check(1u64 << 63).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
}

#[tokio::test]
async fn names_that_look_like_hash_tags_keep_every_key_in_one_slot() {
    let locker = Locker::connect(&redis_url()).await.unwrap();
    for name in ["}start", "mid{dle}", "{}", "a/../b", "zürich"] {
        let name = format!("{name}{}", unique(""));
        let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
        assert_eq!(lease.name(), name);
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn auth_errors_never_show_the_password() {
    let acl = support::url(
        "REDIS_ACL",
        "redis://fencelock:fencelock-test@127.0.0.1:6381",
    );
    let wrong = acl.replace(":fencelock-test@", ":wrong-hunter2@");
    assert_ne!(wrong, acl, "the ACL URL has no password to replace");
    let err = Locker::connect(&wrong).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Auth, "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // The driver's own error is kept as the cause, for each language to chain.
    let cause = err.cause().expect("the driver's error as the cause");
    assert_eq!(
        (cause.driver(), cause.code()),
        ("redis", "WRONGPASS"),
        "{err:?}"
    );
    assert!(std::error::Error::source(&err).is_some());
    assert!(!format!("{cause} {err:?}").contains("hunter2"), "{err:?}");
    // A prefix outside the user's key pattern: NOPERM on a lock command is AUTH.
    let sep = if acl.contains('?') { '&' } else { '?' };
    let locker = Locker::connect(&format!("{acl}{sep}prefix=elsewhere"))
        .await
        .unwrap();
    let err = locker
        .acquire(&unique("noperm"), &opts(1000))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Auth, "{err}");
    assert!(!err.to_string().contains("fencelock-test"), "{err}");
    assert_eq!(err.cause().map(|c| c.code()), Some("NOPERM"), "{err:?}");
}

#[tokio::test]
async fn bad_redis_inputs_get_typed_errors() {
    // The test servers' addresses, whatever ports they run on.
    let server = redis_url().trim_start_matches("redis://").to_string();
    let tls_server = support::url("REDIS_TLS", "rediss://127.0.0.1:6380")
        .trim_start_matches("rediss://")
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_string();
    let cases = [
        (
            format!("redis://{server}/notanumber"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("redis://{server}/99999"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("redis://{server}?prefix=a{{b}}"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("redis://{server}?bogus=1"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("redis://{server}?replica_ack=maybe"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("redis://{server}?ca=/etc/hosts"),
            ErrorCode::InvalidArgument,
        ),
        (
            format!("rediss://{tls_server}?ca=/no/such/ca.pem"),
            ErrorCode::InvalidArgument,
        ),
        ("redis://127.0.0.1:1".to_string(), ErrorCode::Unavailable),
    ];
    for (url, code) in cases {
        let options = LockerOptions::default().with_operation_timeout(Duration::from_secs(3));
        let started = Instant::now();
        let err = Locker::connect_with(&url, options).await.unwrap_err();
        assert_eq!(err.code(), code, "{url}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{url} took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_locks_names_in_every_slot_and_keeps_each_locks_keys_together() {
    let url = cluster_url();
    let locker = Locker::connect(&url).await.unwrap();
    let seed = url
        .trim_start_matches("redis+cluster://")
        .split(',')
        .next()
        .unwrap()
        .to_string();
    let mut raw = raw_redis(&format!("redis://{seed}")).await;
    let mut slots = std::collections::HashSet::new();
    let names: Vec<String> = ["}start", "a{b", "mid{dle}", "{}", "plain"]
        .iter()
        .map(|n| n.to_string())
        .chain((0..20).map(|i| format!("job-{i}")))
        .map(|n| format!("{n}{}", unique("")))
        .collect();
    for name in &names {
        let lease = locker.acquire(name, &opts(10_000)).await.unwrap();
        let encoded = fencelock::internals::encode_name(name);
        let mut key_slots = Vec::new();
        for key in [
            format!("fencelock:{{{encoded}}}"),
            format!("fencelock:{{{encoded}}}:fence"),
            format!("fencelock:{{{encoded}}}:released"),
        ] {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            key_slots.push(slot);
        }
        assert!(
            key_slots.windows(2).all(|w| w[0] == w[1]),
            "{name:?}: keys in slots {key_slots:?}"
        );
        slots.insert(key_slots[0]);
        assert!(locker.inspect(name).await.unwrap().held);
        lease.extend(None).await.unwrap();
        lease.release().await.unwrap();
    }
    assert!(slots.len() > 5, "names should spread over slots: {slots:?}");
}

/// A waiter that cannot subscribe to release notifications (here a Redis user not allowed to
/// SUBSCRIBE; in life a connection blip) keeps waiting by polling, and gets the lock once it is
/// released, instead of failing an acquire that was to wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_cannot_subscribe_polls_and_gets_the_lock() {
    let url = redis_url();
    let mut raw = raw_redis(&url).await;
    let user = unique("nosub").replace(['-', '_'], "");
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                &user,
                "on",
                ">nosub-pw",
                "~*",
                "allchannels",
                "+@all",
            ][..],
        )
        .arg(&["-subscribe", "-psubscribe", "-ssubscribe"][..])
        .query_async(&mut raw)
        .await
        .unwrap();
    let limited = url.replacen("redis://", &format!("redis://{user}:nosub-pw@"), 1);
    let probe = WaitProbe::default();
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect_with(&limited, probe.install(LockerOptions::default()))
        .await
        .unwrap();
    let name = unique("no-subscribe");
    let held = holder.acquire(&name, &opts(10_000)).await.unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire(&name, &opts(10_000)).await })
    };
    // Waiting (polling) after its subscription failed, rather than giving up.
    probe.until_waiting(&holder, &name).await;
    if waiting.is_finished() {
        panic!("the waiter gave up: {:?}", waiting.await);
    }
    held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    assert!(lease.token() > held.token());
    lease.release().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["DELUSER", &user][..])
        .query_async(&mut raw)
        .await
        .unwrap();
}

/// `max_skew` (100 ms by default) is part of the drift margin on every Redis URL: the client
/// deadline comes that much earlier (a promoted replica whose clock runs ahead expires the key
/// sooner), and a ttl the margin would take half of is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_skew_is_part_of_the_drift_margin() {
    let url = redis_url();
    let with = |query: &str| format!("{url}{}{query}", if url.contains('?') { '&' } else { '?' });
    let default = Locker::connect(&url).await.unwrap();
    let err = default
        .acquire(&unique("skew"), &opts(150))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert!(err.message().contains("max_skew"), "{err}");
    let lease = default.acquire(&unique("skew"), &opts(600)).await.unwrap();
    let err = lease
        .extend(Some(Duration::from_millis(150)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    lease.release().await.unwrap();
    // No replica is ever promoted: a short ttl is fine.
    let none = Locker::connect(&with("max_skew=0")).await.unwrap();
    none.acquire(&unique("skew"), &opts(150))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // With 200 ms of skew, a 600 ms lease ends for its holder 1% + 2 ms + 200 ms early.
    let skewed = Locker::connect(&with("max_skew=200ms")).await.unwrap();
    let lease = skewed
        .acquire(&unique("skew"), &opts(600).with_auto_renew(false))
        .await
        .unwrap();
    // Counted from the acquire's send time, which is before now.
    let left = BootInstant::now().until(lease.deadline());
    assert!(
        left <= Duration::from_millis(600 - 200),
        "a 600 ms lease with 200 ms of skew ends in {left:?}"
    );
    for bad in ["max_skew=2h", "max_skew=soon"] {
        let err = Locker::connect(&with(bad)).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}: {err}");
    }
}

/// A waiting acquire dropped outside any runtime (by a Rust caller's own executor or thread)
/// still unsubscribes from the lock's release channel: the subscription does not stay on the
/// server for the Locker's life.
#[test]
fn a_waiting_acquire_dropped_outside_the_runtime_unsubscribes() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = redis_url();
    let name = unique("dropped-off-runtime");
    let channel = format!("fencelock:{{{name}}}:released");
    let (holder, waiter, held, mut raw) = rt.block_on(async {
        let holder = Locker::connect(&url).await.unwrap();
        let waiter = Locker::connect(&url).await.unwrap();
        let held = holder.acquire(&name, &opts(10_000)).await.unwrap();
        (holder, waiter, held, raw_redis(&url).await)
    });
    let mut subscribers = |rt: &tokio::runtime::Runtime| -> i64 {
        rt.block_on(async {
            let reply: (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut raw)
                .await
                .unwrap();
            reply.1
        })
    };
    let mut waiting = Box::pin({
        let (waiter, name) = (waiter.clone(), name.clone());
        async move { waiter.acquire(&name, &opts(10_000)).await }
    });
    // Polled on the runtime until it waits, subscribed.
    rt.block_on(async {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            assert!(
                tokio::time::timeout(Duration::from_millis(100), &mut waiting)
                    .await
                    .is_err(),
                "the waiter got a held lock"
            );
            let reply: (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut raw_redis(&url).await)
                .await
                .unwrap();
            if reply.1 == 1 {
                return;
            }
        }
        panic!("the waiter never subscribed");
    });
    std::thread::spawn(move || drop(waiting)).join().unwrap();
    let started = Instant::now();
    while subscribers(&rt) != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the dropped waiter's subscription stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(async {
        held.release().await.unwrap();
        waiter.close().await;
        holder.close().await;
    });
}

#[tokio::test]
async fn tokens_above_2_pow_53_are_minted_exactly() {
    let locker = Locker::connect(&redis_url()).await.unwrap();
    let mut raw = raw_redis(&redis_url()).await;
    let name = unique("past-2-53");
    // As a double, 2^53 + 1 is 2^53, and the next token would repeat 2^53 + 1's neighbour.
    let counter = (1u64 << 53) + 1;
    let _: () = redis::cmd("SET")
        .arg(format!(
            "fencelock:{{{}}}:fence",
            fencelock::internals::encode_name(&name)
        ))
        .arg(counter.to_string())
        .query_async(&mut raw)
        .await
        .unwrap();
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), counter + 1);
    lease.release().await.unwrap();
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), counter + 2);
    lease.release().await.unwrap();
    // A carry through every digit.
    let name = unique("all-nines");
    let _: () = redis::cmd("SET")
        .arg(format!(
            "fencelock:{{{}}}:fence",
            fencelock::internals::encode_name(&name)
        ))
        .arg("99999999999999999")
        .query_async(&mut raw)
        .await
        .unwrap();
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), 100_000_000_000_000_000);
    lease.release().await.unwrap();
}

// A reply lost after the server ran a lock script: the Cluster client (`retries(2)`) sends the
// script again, and the second run must answer what the first did (issue 24 item 5, safety
// review finding 6). The tests below replay the scripts by hand (the sources the core runs,
// sent twice with the same arguments) on one instance, through the least-privilege ACL user and
// on the Cluster; `duplicated_lock_scripts_change_nothing` goes through the public API, and in a
// build with the test-only `fault-injection-duplicate-scripts` feature (tests/run-all.sh) every
// acquire, renew and release script is sent twice.

/// Where the lock scripts are replayed: one server, or a Cluster (routed by the first key).
enum ScriptConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ScriptConn {
    /// A connection to the server of `url`, or to the Cluster of its seeds, and the publish
    /// command the core uses there.
    async fn open(url: &str) -> (ScriptConn, &'static str) {
        match url.strip_prefix("redis+cluster://") {
            Some(seeds) => {
                let seeds: Vec<String> = seeds.split(',').map(|s| format!("redis://{s}")).collect();
                let conn = redis::cluster::ClusterClient::new(seeds)
                    .unwrap()
                    .get_async_connection()
                    .await
                    .unwrap();
                (ScriptConn::Cluster(conn), "SPUBLISH")
            }
            None => (ScriptConn::Single(raw_redis(url).await), "PUBLISH"),
        }
    }
}

impl redis::aio::ConnectionLike for ScriptConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            ScriptConn::Single(c) => c.req_packed_command(cmd),
            ScriptConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            ScriptConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            ScriptConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            ScriptConn::Single(c) => c.get_db(),
            ScriptConn::Cluster(c) => c.get_db(),
        }
    }
}

/// The lock scripts as the core runs them, with the arguments the core sends.
struct Replay {
    conn: ScriptConn,
    publish: &'static str,
    lock: String,
    fence: String,
    channel: String,
}

impl Replay {
    async fn new(url: &str, name: &str) -> Replay {
        let (conn, publish) = ScriptConn::open(url).await;
        let lock = format!("fencelock:{{{}}}", fencelock::internals::encode_name(name));
        Replay {
            conn,
            publish,
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            lock,
        }
    }

    fn script(name: &str) -> redis::Script {
        redis::Script::new(&fencelock::internals::redis_script_source(name).unwrap())
    }

    /// `(1, token)` taken, `(0, pttl)` held.
    async fn acquire(&mut self, owner: &str, ttl_ms: u64) -> (i64, String) {
        redis::from_redis_value(self.acquire_reply(owner, ttl_ms).await).unwrap()
    }

    /// The acquire script's reply as it comes.
    async fn acquire_reply(&mut self, owner: &str, ttl_ms: u64) -> redis::Value {
        Self::script("acquire")
            .key(&self.lock)
            .key(&self.fence)
            .arg(owner)
            .arg(ttl_ms)
            .arg("{\"language\":\"test\"}")
            .arg("1")
            .arg(30u64 * 24 * 3600 * 1000)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// As Redlock's masters run it: with a proposed token and the cap (µs) it is held to.
    async fn acquire_proposing(
        &mut self,
        owner: &str,
        proposal: u64,
        cap_us: u64,
    ) -> (i64, String) {
        Self::script("acquire")
            .key(&self.lock)
            .key(&self.fence)
            .arg(owner)
            .arg(10_000)
            .arg("{\"language\":\"test\"}")
            .arg("1")
            .arg(30u64 * 24 * 3600 * 1000)
            .arg("0000000000000000")
            .arg(proposal.to_string())
            .arg(cap_us)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// The server's clock in µs.
    async fn time_us(&mut self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn)
            .await
            .unwrap();
        s * 1_000_000 + us
    }

    async fn renew(&mut self, owner: &str, ttl_ms: u64) -> i64 {
        Self::script("renew")
            .key(&self.lock)
            .arg(owner)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn release(&mut self, owner: &str) -> i64 {
        Self::script("release")
            .key(&self.lock)
            .arg(owner)
            .arg(&self.channel)
            .arg(self.publish)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn force_release(&mut self) -> i64 {
        Self::script("force_release")
            .key(&self.lock)
            .arg(&self.channel)
            .arg(self.publish)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn pttl(&mut self) -> i64 {
        redis::cmd("PTTL")
            .arg(&self.lock)
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }

    async fn owner(&mut self) -> Option<String> {
        redis::cmd("HGET")
            .arg(&self.lock)
            .arg("owner")
            .query_async(&mut self.conn)
            .await
            .unwrap()
    }
}

/// A fresh owner id: 32 hex digits, as the core's.
fn owner_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!(
        "{nanos:016x}{:016x}",
        NEXT.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 32)
    )
}

/// One server, the least-privilege ACL user (the tombstone's commands and key are allowed), and
/// the Cluster.
fn replay_urls() -> [String; 3] {
    [
        redis_url(),
        support::url(
            "REDIS_ACL",
            "redis://fencelock:fencelock-test@127.0.0.1:6381",
        ),
        cluster_url(),
    ]
}

/// Redlock's proposal rule, in the acquire script every Redis backend shares (docs/redlock.md,
/// "Two rounds when the quorum agrees"): a proposal is minted when it is at least the
/// server's own token (`max(counter + 1, TIME)`) and at most TIME + the cap; otherwise the own
/// token is, and the counter follows whichever was minted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acquire_script_adopts_a_proposal_only_between_its_own_token_and_its_clock_plus_the_cap()
 {
    const CAP: u64 = 500_000;
    for url in replay_urls() {
        let mut r = Replay::new(&url, &unique("proposal")).await;
        let taken = |reply: (i64, String)| {
            assert_eq!(reply.0, 1, "{url}: {reply:?}");
            reply.1.parse::<u64>().unwrap()
        };
        let cycle = async |r: &mut Replay, proposal: u64| {
            let owner = owner_id();
            let reply = r.acquire_proposing(&owner, proposal, CAP).await;
            assert_eq!(r.release(&owner).await, 1);
            reply
        };
        // Within the window: adopted, and the counter carries it.
        let proposal = r.time_us().await + 100_000;
        assert_eq!(taken(cycle(&mut r, proposal).await), proposal, "{url}");
        // At or below the counter: the server's own counter + 1.
        assert_eq!(taken(cycle(&mut r, proposal).await), proposal + 1, "{url}");
        // Beyond its clock + the cap (a client an hour fast): its own token, near its clock.
        let fast = r.time_us().await + 3_600_000_000;
        let own = taken(cycle(&mut r, fast).await);
        assert!(own > proposal + 1 && own < fast, "{url}: {own}");
        // Below its clock: its own token, the clock.
        let slow = r.time_us().await - 3_600_000_000;
        let own_again = taken(cycle(&mut r, slow).await);
        assert!(own_again > own, "{url}: {own_again}");
        // Without a proposal (one instance, a Cluster): as before.
        let owner = owner_id();
        let (_, plain) = r.acquire(&owner, 10_000).await;
        assert!(plain.parse::<u64>().unwrap() > own_again, "{url}: {plain}");
        assert_eq!(r.release(&owner).await, 1, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_acquire_answers_taken_with_the_same_token() {
    for url in replay_urls() {
        let mut r = Replay::new(&url, &unique("replay-acquire")).await;
        let owner = owner_id();
        let (taken, token) = r.acquire(&owner, 10_000).await;
        assert_eq!(taken, 1, "{url}");
        // Time passes between the run and its replay: the replay applies the ttl again.
        let _: () = redis::cmd("PEXPIRE")
            .arg(&r.lock)
            .arg(3_000)
            .query_async(&mut r.conn)
            .await
            .unwrap();
        assert_eq!(
            r.acquire(&owner, 10_000).await,
            (1, token.clone()),
            "{url}: the replay must answer taken, with the token of the first run"
        );
        assert!(r.pttl().await > 9_000, "{url}: the replay applies the ttl");
        // Another owner is still refused, and the lock is still the first owner's.
        let (taken, pttl) = r.acquire(&owner_id(), 10_000).await;
        assert_eq!(taken, 0, "{url}");
        assert!(pttl.parse::<i64>().unwrap() > 9_000, "{url}: {pttl}");
        assert_eq!(r.owner().await.as_deref(), Some(owner.as_str()), "{url}");
        assert_eq!(r.release(&owner).await, 1, "{url}");
    }
}

/// An acquire that runs after its own acquisition's release (sent, unanswered, released by owner
/// id by the in-flight guard, then resent by the Cluster client or delivered late) is refused:
/// its owner id is in the tombstone. Before, it re-created the lock for an owner nobody holds a
/// lease for, blocking everyone for a ttl (safety review N5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_replayed_after_its_release_takes_nothing() {
    for url in replay_urls() {
        let mut r = Replay::new(&url, &unique("replay-after-release")).await;
        let owner = owner_id();
        assert_eq!(r.acquire(&owner, 10_000).await.0, 1, "{url}");
        assert_eq!(r.release(&owner).await, 1, "{url}");
        let late = r.acquire_reply(&owner, 10_000).await;
        assert_eq!(
            r.pttl().await,
            -2,
            "{url}: the late acquire took the lock: {late:?}"
        );
        assert_eq!(
            late,
            redis::Value::Array(vec![redis::Value::Int(5)]),
            "{url}: refused as a replay"
        );
        // Anybody else takes it at once.
        let next = owner_id();
        assert_eq!(r.acquire(&next, 10_000).await.0, 1, "{url}");
        assert_eq!(r.release(&next).await, 1, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_renew_still_answers_renewed() {
    for url in replay_urls() {
        let mut r = Replay::new(&url, &unique("replay-renew")).await;
        let owner = owner_id();
        assert_eq!(r.acquire(&owner, 10_000).await.0, 1, "{url}");
        assert_eq!(r.renew(&owner, 20_000).await, 1, "{url}");
        assert_eq!(r.renew(&owner, 20_000).await, 1, "{url}: replayed renew");
        assert!(r.pttl().await > 19_000, "{url}");
        assert_eq!(r.renew(&owner_id(), 20_000).await, 0, "{url}: not ours");
        assert_eq!(r.release(&owner).await, 1, "{url}");
        // After a release a renewal (or its replay) never re-creates the lock.
        assert_eq!(r.renew(&owner, 20_000).await, 0, "{url}");
        assert_eq!(r.pttl().await, -2, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_release_still_answers_released() {
    for url in replay_urls() {
        let mut r = Replay::new(&url, &unique("replay-release")).await;
        let first = owner_id();
        let (_, token) = r.acquire(&first, 10_000).await;
        assert_eq!(r.release(&first).await, 1, "{url}");
        assert_eq!(
            r.release(&first).await,
            1,
            "{url}: the replay must answer released"
        );
        assert_eq!(r.pttl().await, -2, "{url}");
        // Whatever a release leaves behind, the next acquire takes the lock at once, with a
        // larger token.
        let second = owner_id();
        let (taken, next) = r.acquire(&second, 10_000).await;
        assert_eq!(taken, 1, "{url}");
        assert!(
            next.len() > token.len() || (next.len() == token.len() && next > token),
            "{url}: {next} after {token}"
        );
        // A late replay of the first owner's release answers released and leaves the second
        // owner's lock alone.
        assert_eq!(r.release(&first).await, 1, "{url}");
        assert_eq!(r.owner().await.as_deref(), Some(second.as_str()), "{url}");
        assert_eq!(r.release(&second).await, 1, "{url}");
        // An owner that never held the lock, or whose lock expired, is told it is not held.
        assert_eq!(r.release(&owner_id()).await, 0, "{url}");
        let expired = owner_id();
        assert_eq!(r.acquire(&expired, 300).await.0, 1, "{url}");
        let gone = Instant::now() + Duration::from_secs(10);
        while r.pttl().await != -2 {
            assert!(Instant::now() < gone, "{url}: the key never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            r.release(&expired).await,
            0,
            "{url}: expired, never released"
        );
        // An operator's release is not the owner's: its owner is still told so.
        let forced = owner_id();
        assert_eq!(r.acquire(&forced, 10_000).await.0, 1, "{url}");
        assert_eq!(r.force_release().await, 1, "{url}");
        assert_eq!(
            r.release(&forced).await,
            0,
            "{url}: released by an operator"
        );
        assert_eq!(r.force_release().await, 0, "{url}: nothing to release");
        // Several releases by other owners in between: the replay is still recognised.
        let late = owner_id();
        assert_eq!(r.acquire(&late, 10_000).await.0, 1, "{url}");
        assert_eq!(r.release(&late).await, 1, "{url}");
        for _ in 0..7 {
            let other = owner_id();
            assert_eq!(r.acquire(&other, 10_000).await.0, 1, "{url}");
            assert_eq!(r.release(&other).await, 1, "{url}");
        }
        assert_eq!(r.release(&late).await, 1, "{url}: after 7 other releases");
    }
}

/// Through the public API: acquire, renewals, release, and the next acquire at once, exactly as
/// without a replay. In the `fault-injection-duplicate-scripts` build every lock script is sent
/// twice (tests/run-all.sh runs this file so once more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_lock_scripts_change_nothing() {
    let duplicated = cfg!(feature = "fault-injection-duplicate-scripts");
    for url in [redis_url(), cluster_url()] {
        let before = fencelock::internals::duplicated_redis_scripts();
        let a = Locker::connect(&url).await.unwrap();
        let b = Locker::connect(&url).await.unwrap();
        let name = unique("duplicated");
        let lease = a
            .try_acquire(&name, &opts(1_000))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{url}: a free lock was not acquired at once"));
        lease.extend(None).await.unwrap();
        // Several automatic renewals (a third of the ttl apart) keep the lease.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(lease.is_held(), "{url}");
        let info = a.inspect(&name).await.unwrap();
        assert!(info.held, "{url}");
        assert_eq!(info.token, Some(lease.token()), "{url}");
        assert!(
            b.try_acquire(&name, &opts(1_000)).await.unwrap().is_none(),
            "{url}"
        );
        assert_eq!(a.list(&name).await.unwrap().locks.len(), 1, "{url}");
        lease.release().await.unwrap();
        let next = b
            .try_acquire(&name, &opts(1_000))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{url}: a released lock was not acquired at once"));
        assert!(next.token() > lease.token(), "{url}");
        next.release().await.unwrap();
        assert!(a.list(&name).await.unwrap().locks.is_empty(), "{url}");
        let sent_twice = fencelock::internals::duplicated_redis_scripts() - before;
        if duplicated {
            assert!(sent_twice >= 5, "{url}: {sent_twice} scripts sent twice");
        } else {
            assert_eq!(sent_twice, 0, "{url}");
        }
        a.close().await;
        b.close().await;
    }
}
