//! The blocking API on one Redis instance, whose acquires and releases run on caller-driven
//! connections (at most four per Locker): exclusion across threads, the connections it opens,
//! and a connection the server closed while it sat idle.
//!
//! Each test uses a database of its own, so the server's client list shows its Locker's
//! connections apart from every other test's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::{raw_redis, redis_url, unique};
use fencelock::{LockOptions, Locker};

fn opts() -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_secs(30))
}

/// The test server's URL on database `db` (its own path, if any, replaced).
fn url_on_database(db: u32) -> String {
    let base = redis_url();
    let (address, query) = base.split_once('?').unwrap_or((&base, ""));
    let (scheme, rest) = address.split_once("://").unwrap();
    let host = rest.split('/').next().unwrap();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{scheme}://{host}/{db}{query}")
}

/// The connections on database `db`, as `CLIENT LIST` shows them: (id, last command).
async fn clients_on(db: u32) -> Vec<(String, String)> {
    let mut raw = raw_redis(&redis_url()).await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut raw)
        .await
        .unwrap();
    list.lines()
        .filter(|line| line.split(' ').any(|f| f == format!("db={db}")))
        .map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(&format!("{name}=")))
                    .unwrap_or_default()
                    .to_string()
            };
            (field("id"), field("cmd"))
        })
        .collect()
}

/// Eight threads take one lock in turn through the blocking API: never two at once, tokens
/// strictly increasing, and the Locker opens no more than its shared connections plus four.
#[test]
fn blocking_callers_on_many_threads_exclude_each_other_on_a_bounded_set_of_connections() {
    const DB: u32 = 11;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let before = runtime.block_on(clients_on(DB)).len();
    let locker = runtime
        .block_on(Locker::connect(&url_on_database(DB)))
        .unwrap();
    let shared = runtime.block_on(clients_on(DB)).len() - before;
    let name = unique("blocking-threads");
    let inside = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (locker, name) = (locker.clone(), name.clone());
            let (inside, last_token) = (inside.clone(), last_token.clone());
            std::thread::spawn(move || {
                for _ in 0..40 {
                    let lease = locker.acquire_blocking(&name, &opts()).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let previous = last_token.swap(lease.token(), Ordering::SeqCst);
                    assert!(
                        lease.token() > previous,
                        "{} after {previous}",
                        lease.token()
                    );
                    inside.store(false, Ordering::SeqCst);
                    lease.release_blocking(locker.runtime()).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let opened = runtime.block_on(clients_on(DB)).len() - before - shared;
    assert!(
        (1..=4).contains(&opened),
        "{opened} caller-driven connections beside the {shared} shared ones"
    );
    runtime.block_on(locker.close());
}

/// The server closes the caller-driven connection while it is idle (as its `timeout` setting
/// does): the next blocking calls answer as usual, on a new connection or the shared one,
/// instead of failing with the dead connection's error.
#[test]
fn a_caller_driven_connection_the_server_closed_is_replaced_without_an_error() {
    const DB: u32 = 12;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locker = runtime
        .block_on(Locker::connect(&url_on_database(DB)))
        .unwrap();
    let name = unique("blocking-killed");
    let lease = locker.acquire_blocking(&name, &opts()).unwrap();
    lease.release_blocking(locker.runtime()).unwrap();
    // The caller-driven connection is the one whose last command was a lock script (or the
    // WAIT after it): the shared connection has sent none in this test.
    let scripted: Vec<String> = runtime
        .block_on(clients_on(DB))
        .into_iter()
        .filter(|(_, cmd)| cmd == "evalsha" || cmd == "wait")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(scripted.len(), 1, "one caller-driven connection");
    runtime.block_on(async {
        let mut raw = raw_redis(&redis_url()).await;
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(&scripted[0])
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(killed, 1);
    });
    for _ in 0..3 {
        let lease = locker
            .try_acquire_blocking(&name, &opts())
            .unwrap()
            .expect("the lock is free");
        lease.release_blocking(locker.runtime()).unwrap();
    }
    runtime.block_on(locker.close());
}

/// Six threads share a semaphore of two permits through the blocking form of its calls (what
/// Python's and the JVM's blocking calls run): never more than two holders at once.
#[test]
fn blocking_callers_of_a_semaphore_never_exceed_its_permits() {
    const DB: u32 = 13;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locker = runtime
        .block_on(Locker::connect(&url_on_database(DB)))
        .unwrap();
    let semaphore = locker.semaphore(&unique("blocking-permits"), 2).unwrap();
    let holders = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (semaphore, runtime) = (semaphore.clone(), locker.runtime().clone());
            let (holders, most) = (holders.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let lease = fencelock::blocking::block_on(&runtime, semaphore.acquire(&opts()))
                        .unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    holders.fetch_sub(1, Ordering::SeqCst);
                    lease.release_blocking(&runtime).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "{most} holders at once");
    runtime.block_on(locker.close());
}
