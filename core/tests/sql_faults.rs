//! PostgreSQL and MariaDB scenarios that restart or stop the shared test servers. They run one
//! at a time: cargo runs test binaries one after the other, and a lock inside this one
//! serializes its tests. Each scenario runs on both databases (`<scenario>::postgres`,
//! `<scenario>::mariadb`).
//!
//! What a restart may do to a lease: renew before the client deadline (the server came back
//! in time), or fire the lost signal (it did not). Never a silent double hold: whenever
//! another client holds the lock, the first lease already reports itself lost.

// Each test runs on a runtime of its own; the guard only keeps the restarts apart.
#![allow(clippy::await_holding_lock)]

#[path = "support/sql.rs"]
mod sql_support;
mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use fencelock::{ErrorCode, Fence, LockOptions, Locker, LockerOptions};
use sql_support::{Db, table};
use support::{servers, unique};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

async fn run_servers(args: &'static [&'static str]) {
    tokio::task::spawn_blocking(move || servers(args))
        .await
        .unwrap();
}

fn restart_args(db: &Db) -> &'static [&'static str] {
    match db.kind {
        sql_support::Kind::Postgres => &["restart", "postgres"],
        sql_support::Kind::MariaDb => &["restart", "mariadb"],
    }
}

/// Retries `f` while it answers UNAVAILABLE (connections being made again), for up to 30 s.
async fn until_available<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = fencelock::Result<T>>,
{
    let started = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e)
                if e.code() == ErrorCode::Unavailable
                    && started.elapsed() < Duration::from_secs(30) =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

macro_rules! on_both {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let _serial = super::serial();
                super::$scenario(super::sql_support::postgres()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mariadb() {
                let _serial = super::serial();
                super::$scenario(super::sql_support::mariadb()).await
            }
        }
    )*};
}

on_both!(
    a_restart_shorter_than_the_ttl_is_ridden_out_by_renewals,
    a_server_down_longer_than_the_ttl_fires_the_lost_signal
);

async fn a_restart_shorter_than_the_ttl_is_ridden_out_by_renewals(db: Db) {
    let (t, f) = (table("rs"), table("rsf"));
    let url = db.with(&format!("table={t}"));
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&db.with(&format!("table={f}")), "resource")
        .await
        .unwrap();
    let ttl = Duration::from_secs(20);
    let name = unique("restart");
    let lease = locker
        .acquire(&name, &LockOptions::default().with_ttl(ttl))
        .await
        .unwrap();
    fence.fenced_execute(&lease, &[]).await.unwrap();
    let restart_began = SystemTime::now();
    let began = Instant::now();
    run_servers(restart_args(&db)).await;
    db.wait_until_answers().await;
    eprintln!("{} restarted in {:?}", db.name(), began.elapsed());
    assert!(
        began.elapsed() < ttl / 2,
        "the restart took too long for this test: {:?}",
        began.elapsed()
    );
    // A renewal sent after the restart began is confirmed before the client deadline.
    let confirmed = loop {
        if lease
            .expires_at()
            .is_some_and(|at| at > restart_began + ttl)
        {
            break true;
        }
        if lease.is_lost() || began.elapsed() > ttl {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        confirmed,
        "no renewal after the restart; lost: {}",
        lease.is_lost()
    );
    assert!(lease.is_held() && !lease.is_lost());
    // Still ours on the server: nobody else gets it.
    let other = Locker::connect(&url).await.unwrap();
    assert!(
        other
            .try_acquire(&name, &opts(10_000))
            .await
            .unwrap()
            .is_none()
    );
    let info = other.inspect(&name).await.unwrap();
    assert!(info.held);
    assert_eq!(info.token, Some(lease.token()));
    // The fence's connections came back too.
    let nothing: [fencelock::Statement; 0] = [];
    until_available("fenced write after the restart", || {
        fence.fenced_execute(&lease, &nothing)
    })
    .await;
    lease.release().await.unwrap();
    assert!(
        other
            .try_acquire(&name, &opts(10_000))
            .await
            .unwrap()
            .is_some()
    );
    other.close().await;
    locker.close().await;
    fence.close().await;
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta"), &f])
        .await;
}

async fn a_server_down_longer_than_the_ttl_fires_the_lost_signal(db: Db) {
    let t = table("down");
    let url = db.with(&format!("table={t}"));
    let quick = LockerOptions::default().with_operation_timeout(Duration::from_millis(1000));
    let locker = Locker::connect_with(&url, quick).await.unwrap();
    let ttl = Duration::from_millis(2000);
    let name = unique("down");
    let lease = locker
        .acquire(&name, &LockOptions::default().with_ttl(ttl))
        .await
        .unwrap();
    let (stop, start): (&'static [&'static str], &'static [&'static str]) = match db.kind {
        sql_support::Kind::Postgres => (&["stop", "postgres"], &["start", "postgres"]),
        sql_support::Kind::MariaDb => (&["stop", "mariadb"], &["start", "mariadb"]),
    };
    run_servers(stop).await;
    let stopped = Instant::now();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(3), lease.lost_signal().wait()).await;
    let waited = stopped.elapsed();
    run_servers(start).await;
    assert!(lost.is_ok(), "the lease was not lost by its deadline");
    assert_eq!(lost.unwrap(), fencelock::LossReason::Expired);
    assert!(waited <= ttl + Duration::from_secs(3));
    assert!(lease.is_lost());
    db.wait_until_answers().await;
    // Someone else takes it once the server's expiry passed; by then the first lease knew.
    let other = Locker::connect(&url).await.unwrap();
    let next = other
        .acquire(
            &name,
            &opts(10_000).with_wait(Some(Duration::from_secs(15))),
        )
        .await
        .unwrap();
    assert!(lease.is_lost(), "two holders at once");
    assert!(next.token() > lease.token());
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    // The first Locker's connections come back by themselves.
    let after = unique("after");
    let try_once = opts(10_000).with_wait(Some(Duration::ZERO));
    let again = until_available("acquire after the restart", || {
        locker.acquire(&after, &try_once)
    })
    .await;
    again.release().await.unwrap();
    next.release().await.unwrap();
    other.close().await;
    locker.close().await;
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta")])
        .await;
}

/// The LISTEN connection comes back after a restart: with the fallback poll at a minute and
/// the holder's ttl at 30 s, a waiter that waited across the restart is handed the lock within
/// seconds of its release only by a notification on the new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waiters_are_woken_by_notify_after_a_restart() {
    let _serial = serial();
    let db = sql_support::postgres();
    let t = table("relisten");
    let url = db.with(&format!("table={t}"));
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect_with(
        &url,
        LockerOptions::default().with_poll_interval(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let name = unique("relisten");
    let lease = holder.acquire(&name, &opts(30_000)).await.unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire(&name, &opts(30_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    run_servers(&["restart", "postgres"]).await;
    db.wait_until_answers().await;
    // Time for the listening connection to come back (its back-off is at most 2 s).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter got a lock that was held"
    );
    let released = Instant::now();
    lease.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not woken after the restart")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(10));
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    holder.close().await;
    waiter.close().await;
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta")])
        .await;
}
