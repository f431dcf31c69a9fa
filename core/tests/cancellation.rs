//! A cancelled acquire leaves nothing behind, on every backend (Redlock and Redis Cluster too): an acquire future dropped at
//! any moment of its wait (between attempts, in the middle of one, in the middle of a BEGIN)
//! never takes the lock afterwards and never leaves a connection that holds the table.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use fencelock::{LockOptions, Locker, LockerOptions};
use support::unique;

fn opts() -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_secs(10))
}

/// The waiter retries every millisecond, so a drop at a random moment often lands inside an
/// attempt. After each drop the holder releases and another Locker must get the lock at once:
/// an attempt cut short must not take it later (it would be held by nobody until its ttl), nor
/// leave a transaction open on a pooled connection.
async fn a_dropped_acquire_never_takes_the_lock_later(url: &str) {
    let options = LockerOptions::default().with_poll_interval(Duration::from_millis(1));
    let holder = Locker::connect_with(url, options.clone()).await.unwrap();
    let next = Locker::connect_with(url, options).await.unwrap();
    let base = unique("cancelled");
    for i in 0..200u64 {
        let name = format!("{base}-{i}");
        let lease = holder.acquire(&name, &opts()).await.unwrap();
        let waiter = {
            let (holder, name) = (holder.clone(), name.clone());
            tokio::spawn(async move { holder.acquire(&name, &opts()).await })
        };
        // 2 to 7 ms: the waiter is queued or polling by then.
        tokio::time::sleep(Duration::from_micros(2000 + (i * 397) % 5000)).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        lease.release().await.unwrap();
        let started = Instant::now();
        let taken = next
            .acquire(&name, &opts().with_wait(Some(Duration::from_secs(5))))
            .await
            .unwrap_or_else(|e| panic!("round {i}: the lock stayed taken after its release: {e}"));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "round {i}: the lock was free only after {:?}",
            started.elapsed()
        );
        taken.release().await.unwrap();
    }
    holder.close().await;
    next.close().await;
}

on_all_backends!(a_dropped_acquire_never_takes_the_lock_later);
