//! The Redlock backend against five real redis-server masters (tests/servers.sh start redlock).
//! Nothing here stops a master: those tests are in core/tests/faults/redlock.rs, run one at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::redlock::{
    base_url, check_workers, masters, opts, redlock_url, servers_up, spawn_workers, with,
};
use crate::support::{self, raw_redis, test_path, unique};
use fencelock::{ErrorCode, LockOptions, Locker};

fn lock_key(name: &str, prefix: &str) -> String {
    format!("{prefix}:{{{}}}", fencelock::internals::encode_name(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_worker() {
    support::redlock::worker().await;
}

/// Fencing phase 2 on the real masters (docs/design.md §3.3): the lock key is on a majority
/// with the token T that phase 2 wrote, and the counter there is at least T (a master that
/// granted after the majority was reached keeps its own phase-1 token). (Tokens, inspect,
/// renewal, extend and the wake-up by a release as the contract states them: the conformance
/// suite.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_2_leaves_the_token_and_a_raised_counter_on_a_majority() {
    if !servers_up() {
        return;
    }
    let locker = Locker::connect(&redlock_url()).await.unwrap();
    let name = unique("rl-basic");
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    let mut with_t = 0;
    for m in masters() {
        let mut raw = raw_redis(&m).await;
        let token: Option<u64> = redis::cmd("HGET")
            .arg(lock_key(&name, "fencelock"))
            .arg("token")
            .query_async(&mut raw)
            .await
            .unwrap();
        let counter: Option<u64> = redis::cmd("GET")
            .arg(format!("{}:fence", lock_key(&name, "fencelock")))
            .query_async(&mut raw)
            .await
            .unwrap();
        if token == Some(lease.token()) {
            assert!(
                counter.unwrap() >= lease.token(),
                "phase 2 did not raise the counter on {m}"
            );
            with_t += 1;
        }
    }
    assert!(with_t >= 3, "T is on {with_t} masters only");
    lease.release().await.unwrap();
    locker.close().await;
}

/// Fencing phase 2 on the real masters. Foreign keys steer which masters can grant: first
/// {1,2,3}, with master 1's counter set far ahead, then {3,4,5}, which shares only master 3
/// with the first majority. Without phase 2 the second token would come from clocks near
/// now and fall below the first; with it, master 3 carries the first token forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_skewed_counters() {
    if !servers_up() {
        return;
    }
    let prefix = format!("rl-skew-{}", std::process::id());
    let locker = Locker::connect(&with(&redlock_url(), &format!("prefix={prefix}")))
        .await
        .unwrap();
    let name = unique("rl-skew");
    let key = lock_key(&name, &prefix);
    let fence_key = format!("{key}:fence");
    let mut raws = Vec::new();
    for m in masters() {
        raws.push(raw_redis(&m).await);
    }
    let block = |raws: &mut Vec<redis::aio::MultiplexedConnection>, which: Vec<usize>| {
        let key = key.clone();
        let mut conns: Vec<_> = which.iter().map(|&i| raws[i].clone()).collect();
        async move {
            for c in conns.iter_mut() {
                let _: () = redis::cmd("HSET")
                    .arg(&key)
                    .arg("owner")
                    .arg("someone-else")
                    .arg("token")
                    .arg(1)
                    .query_async(c)
                    .await
                    .unwrap();
                let _: () = redis::cmd("PEXPIRE")
                    .arg(&key)
                    .arg(60_000)
                    .query_async(c)
                    .await
                    .unwrap();
            }
        }
    };
    let unblock = |raws: &mut Vec<redis::aio::MultiplexedConnection>, which: Vec<usize>| {
        let key = key.clone();
        let mut conns: Vec<_> = which.iter().map(|&i| raws[i].clone()).collect();
        async move {
            for c in conns.iter_mut() {
                let _: () = redis::cmd("DEL").arg(&key).query_async(c).await.unwrap();
            }
        }
    };
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let ahead = now_us + 3_600_000_000; // an hour ahead of every clock
    let _: () = redis::cmd("SET")
        .arg(&fence_key)
        .arg(ahead)
        .query_async(&mut raws[0])
        .await
        .unwrap();
    block(&mut raws, vec![3, 4]).await;
    let first = locker
        .acquire(&name, &opts(10_000).with_wait(Some(Duration::from_secs(5))))
        .await
        .unwrap();
    assert!(first.token() > ahead, "T is the largest phase-1 token");
    first.release().await.unwrap();
    unblock(&mut raws, vec![3, 4]).await;
    block(&mut raws, vec![0, 1]).await;
    let second = locker
        .acquire(&name, &opts(10_000).with_wait(Some(Duration::from_secs(5))))
        .await
        .unwrap();
    assert!(
        second.token() > first.token(),
        "{} after {}: phase 2 did not carry the token",
        second.token(),
        first.token()
    );
    second.release().await.unwrap();
    unblock(&mut raws, vec![0, 1]).await;
    // Every other split of majorities keeps increasing too.
    let mut last = second.token();
    for blocked in [vec![1, 2], vec![2, 4], vec![0, 3], vec![], vec![0, 4]] {
        block(&mut raws, blocked.clone()).await;
        // Up to the ttl and more: a release one master did not get in time (a busy machine)
        // leaves the previous key there until it expires, and then three free masters are two.
        let lease = match locker
            .acquire(
                &name,
                &opts(10_000).with_wait(Some(Duration::from_secs(15))),
            )
            .await
        {
            Ok(lease) => lease,
            Err(e) => panic!(
                "blocked {blocked:?}: {e}; the lock as the masters see it: {:?}",
                locker.inspect(&name).await
            ),
        };
        assert!(lease.token() > last);
        last = lease.token();
        lease.release().await.unwrap();
        unblock(&mut raws, blocked).await;
    }
    // With three masters blocked, there is no majority to grant: held.
    block(&mut raws, vec![0, 1, 2]).await;
    assert!(
        locker
            .try_acquire(&name, &opts(10_000))
            .await
            .unwrap()
            .is_none()
    );
    unblock(&mut raws, vec![0, 1, 2]).await;
}

/// The same for read-write locks: a read lease's token (from a master whose counter runs an
/// hour ahead) is raised by phase 2 on the majority that granted it, so a write lease granted
/// by another majority afterwards, sharing one master with it, outranks it; and write leases
/// keep increasing across every split. A master is kept from granting by a write lease of
/// somebody else, written by hand in the shared layout (docs/redis.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_tokens_outrank_read_tokens_across_skewed_counters() {
    if !servers_up() {
        return;
    }
    let prefix = format!("rl-rw-skew-{}", std::process::id());
    let locker = Locker::connect(&with(&redlock_url(), &format!("prefix={prefix}")))
        .await
        .unwrap();
    let name = unique("rl-rw-skew");
    let key = lock_key(&name, &prefix);
    let mut raws = Vec::new();
    for m in masters() {
        raws.push(raw_redis(&m).await);
    }
    let (shared, leases) = (format!("{key}:shared"), format!("{key}:leases"));
    let block = |raws: &mut Vec<redis::aio::MultiplexedConnection>, which: Vec<usize>| {
        let (shared, leases) = (shared.clone(), leases.clone());
        let mut conns: Vec<_> = which.iter().map(|&i| raws[i].clone()).collect();
        async move {
            for c in conns.iter_mut() {
                let expiry = redis::cmd("TIME")
                    .query_async::<(u64, u64)>(c)
                    .await
                    .map(|(s, _)| s * 1000 + 60_000)
                    .unwrap();
                let _: () = redis::pipe()
                    .cmd("HSET")
                    .arg(&shared)
                    .arg(&["v", "1", "kind", "read-write lock", "permits", "0"])
                    .arg("l:someone-else")
                    .arg("write 1 {}")
                    .ignore()
                    .cmd("ZADD")
                    .arg(&leases)
                    .arg(expiry)
                    .arg("someone-else")
                    .ignore()
                    .query_async(c)
                    .await
                    .unwrap();
            }
        }
    };
    // Removes the other holder's lease only, as its release would: a registration one of our
    // own attempts left there (a "held" answer from a blocked master) stays consistent with the
    // hash until our release or its expiry removes it. Deleting the hash and the lease set
    // alone would leave such a registration in a set beside no hash, a state no script makes,
    // which the next acquire there answers as a name of an unknown kind.
    let unblock = |raws: &mut Vec<redis::aio::MultiplexedConnection>, which: Vec<usize>| {
        let keys = [
            shared.clone(),
            leases.clone(),
            format!("{key}:waiters"),
            format!("{key}:writers"),
        ];
        let mut conns: Vec<_> = which.iter().map(|&i| raws[i].clone()).collect();
        async move {
            let release_other = redis::Script::new(
                r"
                redis.call('ZREM', KEYS[2], 'someone-else')
                redis.call('HDEL', KEYS[1], 'l:someone-else')
                if redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) == 0 then
                  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
                end
                return 1
                ",
            );
            for c in conns.iter_mut() {
                let _: i64 = release_other.key(&keys[..]).invoke_async(c).await.unwrap();
            }
        }
    };
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let ahead = now_us + 3_600_000_000; // an hour ahead of every clock
    let _: () = redis::cmd("SET")
        .arg(format!("{key}:fence"))
        .arg(ahead)
        .query_async(&mut raws[0])
        .await
        .unwrap();
    let waiting = opts(10_000).with_wait(Some(Duration::from_secs(15)));
    let (read, write) = (
        locker.read_lock(&name).unwrap(),
        locker.write_lock(&name).unwrap(),
    );
    block(&mut raws, vec![3, 4]).await;
    let reader = read.acquire(&waiting).await.unwrap();
    assert!(reader.token() > ahead, "T is the largest phase-1 token");
    reader.release().await.unwrap();
    unblock(&mut raws, vec![3, 4]).await;
    let mut last = reader.token();
    for blocked in [vec![0, 1], vec![1, 2], vec![2, 4], vec![0, 3], vec![]] {
        block(&mut raws, blocked.clone()).await;
        let writer = match write.acquire(&waiting).await {
            Ok(lease) => lease,
            Err(e) => panic!(
                "blocked {blocked:?}: {e}; the lock as the masters see it: {:?}",
                locker.inspect(&name).await
            ),
        };
        assert!(
            writer.token() > last,
            "blocked {blocked:?}: write token {} after {last}: phase 2 did not carry the token",
            writer.token()
        );
        last = writer.token();
        writer.release().await.unwrap();
        unblock(&mut raws, blocked).await;
    }
    locker.close().await;
}

/// Uncontended, the masters adopt the Locker's proposed token and the lease is taken in two
/// rounds, phase 2 skipped (docs/redlock.md, "Two rounds when the quorum agrees"); tokens still
/// increase, and the keys and counters of a majority carry the lease's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_leases_take_two_rounds_when_the_masters_agree() {
    if !servers_up() {
        return;
    }
    let logs = fencelock::logs::subscribe(fencelock::logs::LogLevel::Debug);
    let locker = Locker::connect(&redlock_url()).await.unwrap();
    let name = unique("rl-two-rounds");
    let (mut tokens, mut agreed) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        let lease = locker
            .acquire(
                &name,
                &opts(10_000).with_wait(Some(Duration::from_secs(15))),
            )
            .await
            .unwrap();
        tokens.push(lease.token());
        let info = locker.inspect(&name).await.unwrap();
        assert_eq!(info.token, Some(lease.token()), "{info:?}");
        lease.release().await.unwrap();
        // Drained as it goes: the other tests of this binary log too.
        while let Some(record) = logs.try_recv() {
            let ours = record.lock.as_deref() == Some(name.as_str());
            if ours && record.message.contains("two rounds") {
                agreed.push(record.message);
            }
        }
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "{tokens:?}");
    // The first acquire may find no fresh clock reading to propose from; the rest agree unless
    // the machine stalls between the estimate and a master's answer by more than the lead.
    assert!(
        agreed.len() >= 2,
        "{} of {} leases in two rounds: {agreed:?}",
        agreed.len(),
        tokens.len()
    );
    for message in &agreed {
        assert!(
            tokens
                .iter()
                .any(|t| message.contains(&format!("token {t}:"))),
            "{message} names none of {tokens:?}"
        );
    }
    locker.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_invalid_arguments() {
    if !servers_up() {
        return;
    }
    let url = base_url();
    let hosts = masters()
        .iter()
        .map(|m| m.trim_start_matches("redis://").to_string())
        .collect::<Vec<_>>();
    for bad in [
        "redlock://".to_string(),
        format!("redlock://{},{}", hosts[0], hosts[0]),
        format!("redlock://{},{},{}", hosts[0], hosts[1], hosts[0]),
        format!("{url}?bogus=1"),
        format!("{url}?max_ttl=forever"),
        format!("{url}?max_skew=-1"),
        format!("{url}?prefix=a{{b}}"),
    ] {
        let err = Locker::connect(&bad).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}: {err}");
    }
    // max_ttl is stored by the first client; every later client uses the stored value.
    let prefix = format!("rl-maxttl-{}", std::process::id());
    let first = Locker::connect(&with(&url, &format!("prefix={prefix}&max_ttl=3s")))
        .await
        .unwrap();
    let later = Locker::connect(&with(&url, &format!("prefix={prefix}&max_ttl=60s")))
        .await
        .unwrap();
    for locker in [&first, &later] {
        let err = locker
            .acquire(&unique("rl-long"), &opts(5_000))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains("max_ttl"), "{err}");
        locker
            .acquire(&unique("rl-ok"), &opts(3_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // A ttl the drift margin (1% + 2 ms + max_skew) would eat is refused.
    let err = first
        .acquire(&unique("rl-short"), &opts(900))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    // extend above max_ttl too.
    let lease = first
        .acquire(&unique("rl-ext"), &opts(3_000))
        .await
        .unwrap();
    assert_eq!(
        lease
            .extend(Some(Duration::from_secs(10)))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::InvalidArgument
    );
    lease.release().await.unwrap();
    let mut raw = raw_redis(&masters()[0]).await;
    let stored: u64 = redis::cmd("GET")
        .arg(format!("{prefix}:redlock:max_ttl"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(stored, 3_000);
    // A Fence has no Redlock form: the resource side is one store.
    assert_eq!(
        fencelock::Fence::open(&url, "r").await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    let _ = LockOptions::default();
}

/// Issue 4: 8 contenders x 200 critical sections in two processes, with all five masters up.
#[test]
fn eight_contenders_in_two_processes_keep_a_fenced_counter_exact() {
    if !servers_up() {
        return;
    }
    let name = unique("rl-contention");
    let key = format!("fencelock-test:{}", unique("rl-counter"));
    let spec = format!("{}|{name}|{key}|4|200", redlock_url());
    let started = Instant::now();
    let workers = spawn_workers(&test_path(module_path!(), "contention_worker"), &spec, 2);
    check_workers(workers, 1600);
    eprintln!(
        "redlock contention, 5 of 5 masters up: 1600 critical sections in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_above_2_pow_53_are_minted_and_raised_exactly() {
    if !servers_up() {
        return;
    }
    let locker = Locker::connect(&redlock_url()).await.unwrap();
    let name = unique("rl-past-2-53");
    // As doubles, 2^53 + 1 and 2^53 + 2 are both 2^53 (phase 1) and a raise would compare
    // rounded (phase 2).
    let counter = (1u64 << 53) + 1;
    for m in masters() {
        let mut raw = raw_redis(&m).await;
        let _: () = redis::cmd("SET")
            .arg(format!("{}:fence", lock_key(&name, "fencelock")))
            .arg(counter.to_string())
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), counter + 1);
    lease.release().await.unwrap();
    let lease = locker.acquire(&name, &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), counter + 2);
    lease.release().await.unwrap();
}

/// A lease exists only on a majority. A forced release that has not yet reached one master
/// leaves the old holder's key there; the old holder's release must still answer LOST (the lock
/// was removed, and may be someone else's), and a second forced release finds nobody holding
/// it, though it removes the straggler. The straggler is made by hand: the key is copied
/// (DUMP) from one master before the forced release and put back (RESTORE) after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggling_key_does_not_make_a_release_or_a_forced_release_find_a_holder() {
    if !servers_up() {
        return;
    }
    let (holder, operator) = (
        Locker::connect(&redlock_url()).await.unwrap(),
        Locker::connect(&redlock_url()).await.unwrap(),
    );
    let name = unique("rl-straggler");
    let key = lock_key(&name, "fencelock");
    let lease = holder
        .acquire(&name, &opts(10_000).with_auto_renew(false))
        .await
        .unwrap();
    let mut first = raw_redis(&masters()[0]).await;
    let dumped: Vec<u8> = redis::cmd("DUMP")
        .arg(&key)
        .query_async(&mut first)
        .await
        .unwrap();
    operator.force_release(&name).await.unwrap();
    let () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(10_000)
        .arg(dumped)
        .query_async(&mut first)
        .await
        .unwrap();
    let err = lease.release().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Lost, "{err}");
    // The release removed its own straggler; put it back once more for the operator.
    let dumped_again = {
        let again = holder
            .acquire(&name, &opts(10_000).with_auto_renew(false))
            .await
            .unwrap();
        let bytes: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut first)
            .await
            .unwrap();
        again.release().await.unwrap();
        // The release returns once a majority released; the rest still runs in the
        // background. Wait for it everywhere, so it cannot remove the straggler put back below.
        let given_up = Instant::now() + Duration::from_secs(5);
        for m in masters() {
            let mut raw = raw_redis(&m).await;
            loop {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                if !exists {
                    break;
                }
                assert!(Instant::now() < given_up, "{m} kept the released key");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        bytes
    };
    let () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(10_000)
        .arg(dumped_again)
        .query_async(&mut first)
        .await
        .unwrap();
    let err = operator.force_release(&name).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotHeld, "{err}");
    let exists: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut first)
        .await
        .unwrap();
    assert!(!exists, "the forced release left the straggler");
    holder.close().await;
    operator.close().await;
}

/// A round returns once a majority has answered, but its requests to the other masters are
/// still sent and applied (docs/redlock.md): a dropped request future must not take its
/// command off the connection before it is written. Many extends alternate between two ttls,
/// then many leases are released; afterwards every master holds the last ttl, and then no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_applies_the_requests_of_a_round_decided_by_a_majority() {
    if !servers_up() {
        return;
    }
    let locker = Locker::connect(&redlock_url()).await.unwrap();
    let name = unique("rl-stragglers");
    let key = lock_key(&name, "fencelock");
    let lease = locker
        .acquire(&name, &opts(10_000).with_auto_renew(false))
        .await
        .unwrap();
    for round in 0..1000u64 {
        let ttl = if round % 2 == 0 { 28_000 } else { 10_000 };
        lease
            .extend(Some(Duration::from_millis(ttl)))
            .await
            .unwrap();
    }
    // The last extend set 10 s; one a master missed left it at 28 s (or less).
    let mut raws = Vec::new();
    for m in masters() {
        raws.push((m.clone(), raw_redis(&m).await));
    }
    let given_up = Instant::now() + Duration::from_secs(5);
    for (m, raw) in &mut raws {
        loop {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(raw).await.unwrap();
            if (0..=10_000).contains(&pttl) {
                break;
            }
            assert!(
                Instant::now() < given_up,
                "master {m} kept the lock for {pttl} ms after an extend to 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    lease.release().await.unwrap();
    let names: Vec<String> = (0..500).map(|i| format!("{name}-{i}")).collect();
    for name in &names {
        let lease = locker
            .acquire(name, &opts(28_000).with_auto_renew(false))
            .await
            .unwrap();
        lease.release().await.unwrap();
    }
    let given_up = Instant::now() + Duration::from_secs(5);
    for (m, raw) in &mut raws {
        for name in &names {
            loop {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(lock_key(name, "fencelock"))
                    .query_async(raw)
                    .await
                    .unwrap();
                if !exists {
                    break;
                }
                assert!(
                    Instant::now() < given_up,
                    "master {m} kept {name} after its release"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    locker.close().await;
}

/// The lock-script calls on `key` that a redis-server at `addr` executes from now on, as
/// `(number of keys, owner id)` in order (MONITOR), until the returned flag is set.
fn monitor_scripts(
    addr: &str,
    key: &str,
) -> (
    Arc<AtomicBool>,
    std::thread::JoinHandle<Vec<(usize, String)>>,
) {
    use std::io::{BufRead, Write};
    let done = Arc::new(AtomicBool::new(false));
    let mut stream = std::net::TcpStream::connect(addr.trim_start_matches("redis://")).unwrap();
    stream.write_all(b"MONITOR\r\n").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut ok = String::new();
    reader.read_line(&mut ok).unwrap();
    assert_eq!(ok.trim(), "+OK");
    let (stop, quoted_key) = (done.clone(), format!("\"{key}\""));
    let thread = std::thread::spawn(move || {
        let mut calls = Vec::new();
        let mut line = String::new();
        while !stop.load(Ordering::SeqCst) {
            match reader.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => continue, // a read timeout: look at the flag again
            }
            if line.contains("\"EVALSHA\"") && line.contains(&quoted_key) {
                // "EVALSHA" "<sha>" "<numkeys>" "<key>"... "<owner>" ...
                let words: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
                let at = words.iter().position(|w| *w == "EVALSHA").unwrap();
                let keys: usize = words[at + 2].parse().unwrap();
                calls.push((keys, words[at + 3 + keys].to_string()));
            }
            line.clear();
        }
        calls
    });
    (done, thread)
}

/// An attempt that lost the round gives back its grants by owner id, and the release's
/// tombstone then refuses that owner id on those masters (a replayed acquire): the waiter's
/// next attempt must draw a fresh one. Before, it kept it: the masters it had won refused it
/// while free, and were taken for down (which then failed other acquires for lack of a quorum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_lost_a_round_tries_again_under_a_fresh_owner_id() {
    if !servers_up() {
        return;
    }
    let (holder, waiter) = (
        Locker::connect(&redlock_url()).await.unwrap(),
        Locker::connect(&redlock_url()).await.unwrap(),
    );
    let name = unique("rl-lost-round");
    let key = lock_key(&name, "fencelock");
    let lease = holder
        .acquire(&name, &opts(30_000).with_auto_renew(false))
        .await
        .unwrap();
    // The holder keeps masters 3 to 5, still a majority; masters 1 and 2 are free, so every
    // attempt of the waiter wins them, loses the round and gives them back.
    for m in &masters()[..2] {
        let () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut raw_redis(m).await)
            .await
            .unwrap();
    }
    let (done, watching) = monitor_scripts(&masters()[0], &key);
    let brief = opts(30_000).with_wait(Some(Duration::from_secs(2)));
    let err = waiter.acquire(&name, &brief).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout, "{err}");
    done.store(true, Ordering::SeqCst);
    let calls = watching.join().unwrap();
    // The acquire script takes 4 keys, the release 2.
    let acquires = calls.iter().filter(|(keys, _)| *keys == 4).count();
    assert!(
        acquires >= 2,
        "the waiter tried {acquires} times: {calls:?}"
    );
    // One acquire per owner id (its release may come first, when the round was decided
    // before that master answered: the late acquire is then refused).
    let mut seen = std::collections::HashSet::new();
    for (_, owner) in calls.iter().filter(|(keys, _)| *keys == 4) {
        assert!(
            seen.insert(owner),
            "owner id {owner} was sent to acquire twice: {calls:?}"
        );
    }
    lease.release().await.unwrap();
    holder.close().await;
    waiter.close().await;
}
