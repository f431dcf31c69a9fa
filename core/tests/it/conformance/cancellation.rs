//! A cancelled acquire leaves nothing behind (docs/design.md §1.7, §6.2): dropped at any moment
//! of its wait (between attempts, in the middle of one, in the middle of a BEGIN), it never
//! takes the lock afterwards, never leaves a connection that holds the table, and leaves no
//! waiter queued; neither does a wait that ran out.

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, LockerOptions};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::conformance::release::{BACKGROUND, held};
use crate::contract;
use crate::support::unique;

contract!(
    a_dropped_acquire_never_takes_the_lock_later,
    a_cancelled_or_timed_out_wait_leaves_no_waiter_behind,
);

const ROUNDS: u64 = 100;

/// The waiter retries every millisecond and is dropped 2 to 7 ms into its wait (the moment of
/// the cancellation varies; nothing waits on it), so the drop often lands inside an attempt.
/// Then the holder releases and another Locker must get the lock within the time a background
/// release may take, well before the ttl: an attempt cut short must not take it later (it
/// would be held by nobody until its ttl), nor leave a transaction open on a pooled connection.
async fn a_dropped_acquire_never_takes_the_lock_later(target: Target) {
    let options = LockerOptions::default()
        .with_poll_interval(Duration::from_millis(1))
        // Background releases finish within 2 × 3 s + 1 s (docs/design.md §1.7).
        .with_operation_timeout(Duration::from_secs(3));
    let holder = target.locker_with(options.clone()).await;
    let next = target.locker_with(options).await;
    let base = unique("cancelled");
    for i in 0..ROUNDS {
        let name = format!("{base}-{i}");
        let lease = holder.acquire(&name, &held()).await.unwrap();
        let cut_after = Duration::from_micros(2000 + (i * 397) % 5000);
        let cut = tokio::time::timeout(cut_after, holder.acquire(&name, &held())).await;
        assert!(cut.is_err(), "round {i}: the waiter got a held lock");
        lease.release().await.unwrap();
        let taken = next
            .acquire(&name, &held().with_wait(Some(Duration::from_secs(10))))
            .await
            .unwrap_or_else(|e| panic!("round {i}: the lock stayed taken after its release: {e}"));
        taken.release().await.unwrap();
    }
    close(vec![holder, next]).await;
}

/// A wait that runs out leaves its place before it returns; a waiting acquire that is aborted
/// leaves it in the background. Then the lock goes to the next client (no cancelled waiter
/// stands before it), and `inspect` shows no waiter.
async fn a_cancelled_or_timed_out_wait_leaves_no_waiter_behind(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let (waiter, probe) = target.probed_locker().await;
    let name = unique("abandoned");
    let lease = holder.acquire(&name, &held()).await.unwrap();
    let err = waiter
        .acquire(&name, &held().with_wait(Some(Duration::from_millis(300))))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout, "{err}");
    let info = holder.inspect(&name).await.unwrap();
    assert!(info.waiters.is_empty(), "{:?}", info.waiters);
    let before = probe.waits();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        // wait = None: forever.
        tokio::spawn(async move { waiter.acquire(&name, &LockOptions::default()).await })
    };
    probe.until_waiting_after(before, &holder, &name).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    let gone = tokio::time::Instant::now() + BACKGROUND;
    while !holder.inspect(&name).await.unwrap().waiters.is_empty() {
        assert!(
            tokio::time::Instant::now() < gone,
            "the cancelled waiter stayed queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lease.release().await.unwrap();
    let next = other
        .acquire(&name, &held().with_wait(Some(BACKGROUND)))
        .await
        .unwrap_or_else(|e| panic!("the lock stayed taken after its release: {e}"));
    assert!(next.token() > lease.token());
    assert!(holder.inspect(&name).await.unwrap().waiters.is_empty());
    next.release().await.unwrap();
    close(vec![holder, waiter, other]).await;
}
