//! The opt-in pipelined release (docs/design.md §8.4), on every backend: `release()` returns once
//! the command is on its way, the lock is free for the next holder all the same, and a release that
//! finds the lock no longer ours still reports it, through the lost signal.

#[macro_use]
mod support;
#[path = "support/sql.rs"]
mod sql_support;
#[path = "support/takeover.rs"]
mod takeover;

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker, LossReason};
use support::unique;

fn pipelined() -> LockOptions {
    LockOptions::default().with_pipelined_release(true)
}

on_every_backend!(
    a_pipelined_release_frees_the_lock,
    a_pipelined_release_still_reports_a_lock_taken_over
);

async fn a_pipelined_release_frees_the_lock(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let rival = Locker::connect(url).await.unwrap();
    let name = unique("pipelined");
    let mut last = 0;
    for _ in 0..5 {
        // The same Locker takes it again right after the release: on one connection the
        // release goes first.
        let lease = locker
            .acquire(&name, &pipelined().with_wait(Some(Duration::from_secs(10))))
            .await
            .unwrap();
        assert!(lease.token() > last);
        last = lease.token();
        lease.release().await.unwrap();
        assert!(!lease.is_held());
        assert_eq!(
            lease.release().await.unwrap_err().code(),
            ErrorCode::NotHeld
        );
    }
    let next = rival
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(10))),
        )
        .await
        .expect("another client gets the lock after a pipelined release");
    assert!(next.token() > last);
    next.release().await.unwrap();
    locker.close().await;
    rival.close().await;
}

async fn a_pipelined_release_still_reports_a_lock_taken_over(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let name = unique("pipelined-taken");
    // No renewal, so only the release can find out.
    let lease = locker
        .acquire(&name, &pipelined().with_auto_renew(false))
        .await
        .unwrap();
    takeover::take_over(url, &name).await;
    if url.starts_with("zk://") {
        // ZooKeeper's watch on the node reports the deletion at once, before any release.
        let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost_signal().wait())
            .await
            .unwrap();
        assert_eq!(reason, LossReason::TakenOver);
    } else {
        lease
            .release()
            .await
            .expect("a pipelined release returns before the reply");
        let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost_signal().wait())
            .await
            .expect("the reply, checked in the background, fires the lost signal");
        assert_eq!(reason, LossReason::TakenOver);
    }
    locker.close().await;
}
