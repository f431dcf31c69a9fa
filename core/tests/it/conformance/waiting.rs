//! Waiting: an acquire with a deadline times out with TIMEOUT naming the lock, and one that
//! waits (forever, or longer than it needs) is woken by the release, not by its next poll.

use std::time::{Duration, Instant};

use fencelock::{ErrorCode, LockOptions, LockerOptions};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::contract;
use crate::support::unique;

contract!(
    a_wait_with_a_deadline_times_out_naming_the_lock,
    a_waiter_is_woken_by_the_release,
    a_release_wakes_a_waiter_that_polls_once_a_minute,
);

async fn a_wait_with_a_deadline_times_out_naming_the_lock(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let name = unique("deadline");
    let lease = holder
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let err = other
        .acquire(
            &name,
            &LockOptions::default()
                .with_ttl(Duration::from_secs(30))
                .with_wait(Some(wait)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout, "{err}");
    assert!(err.message().contains(&name), "{err}");
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    assert!(lease.is_held());
    lease.release().await.unwrap();
    close(vec![holder, other]).await;
}

async fn a_waiter_is_woken_by_the_release(target: Target) {
    let holder = target.locker().await;
    let (waiter, probe) = target.probed_locker().await;
    let name = unique("woken");
    let options = LockOptions::default().with_ttl(Duration::from_secs(30));
    let lease = holder.acquire(&name, &options).await.unwrap();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        // wait = None: forever.
        tokio::spawn(async move { waiter.acquire(&name, &LockOptions::default()).await })
    };
    probe.until_waiting(&holder, &name).await;
    lease.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter was not woken")
        .unwrap()
        .unwrap();
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    close(vec![holder, waiter]).await;
}

/// Every backend wakes its waiters (Redis and Cluster pub/sub, each Redlock master's,
/// ZooKeeper's watch on the predecessor, PostgreSQL's LISTEN/NOTIFY, the watcher of SQLite's
/// files and of MariaDB's rows: docs/design.md §8.3): a release wakes the waiter at once
/// although its fallback poll is a minute away and the holder's ttl half a minute.
async fn a_release_wakes_a_waiter_that_polls_once_a_minute(target: Target) {
    let holder = target.locker().await;
    let slow_poll = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
    let (waiter, probe) = target.probed_locker_with(slow_poll).await;
    let name = unique("notified");
    let options = LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(Duration::from_secs(40)));
    let lease = holder.acquire(&name, &options).await.unwrap();
    let waiting = {
        let (waiter, name, options) = (waiter.clone(), name.clone(), options.clone());
        tokio::spawn(async move { waiter.acquire(&name, &options).await })
    };
    probe.until_waiting(&holder, &name).await;
    let released = Instant::now();
    lease.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    let took = released.elapsed();
    // A notification, not a poll or the holder's expiry; a wide margin for a busy machine.
    assert!(took < Duration::from_secs(5), "woken only after {took:?}");
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    close(vec![holder, waiter]).await;
}
