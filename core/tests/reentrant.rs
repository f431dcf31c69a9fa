//! Re-entrant locks per execution scope (docs/design.md §1.5, issue 11), on every backend: SQLite,
//! Redis, ZooKeeper, PostgreSQL and MariaDB (servers from tests/servers.sh). Each scenario runs
//! once per backend, as `<scenario>::<backend>`.

#[macro_use]
mod support;

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker, Scope};
use support::unique;

const OUTER: Scope = Scope::new(1);
const OTHER: Scope = Scope::new(2);

fn reentrant() -> LockOptions {
    LockOptions::default().with_reentrant(true)
}

/// A nested acquire that had to wait would time out: this proves "at once" without timing it.
fn at_once() -> LockOptions {
    reentrant().with_wait(Some(Duration::ZERO))
}

on_every_backend!(
    nested_acquire_shares_the_lease_and_the_lock_frees_after_the_outer_release,
    nested_leases_release_in_any_order,
    without_the_option_a_nested_acquire_is_a_deadlock,
    a_loss_while_nested_makes_every_nested_lease_lost,
    dropped_nested_leases_release_the_lock_when_the_last_goes,
);

async fn nested_acquire_shares_the_lease_and_the_lock_frees_after_the_outer_release(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let rival = Locker::connect(url).await.unwrap();
    let name = unique("nested");

    let outer = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let inner = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    assert_eq!(
        inner.token(),
        outer.token(),
        "a nested lease carries the outer lease's token"
    );

    // Another Locker, and another scope of the same Locker, contend as usual.
    assert!(
        rival
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        locker
            .try_acquire_in(OTHER, &name, &reentrant())
            .await
            .unwrap()
            .is_none()
    );

    inner.release().await.unwrap();
    assert!(!inner.is_held());
    assert!(outer.is_held());
    assert!(
        rival
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none(),
        "inner release must keep the lock"
    );
    assert_eq!(
        inner.release().await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    assert_eq!(
        inner.extend(None).await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    outer.extend(None).await.unwrap();

    outer.release().await.unwrap();
    let next = rival
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(10))),
        )
        .await
        .expect("the lock is free once the outer lease is released");
    assert!(next.token() > outer.token());
    next.release().await.unwrap();

    // The scope holds nothing now: acquiring again is a fresh acquisition with a new token.
    let again = locker
        .acquire_in(OUTER, &name, &LockOptions::default())
        .await
        .unwrap();
    assert!(again.token() > next.token());
    again.release().await.unwrap();
    locker.close().await;
    rival.close().await;
}

async fn nested_leases_release_in_any_order(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let rival = Locker::connect(url).await.unwrap();
    let name = unique("order");

    let first = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let second = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    let third = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();

    first.release().await.unwrap();
    assert!(
        rival
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    third.release().await.unwrap();
    assert!(
        rival
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    assert!(second.is_held());
    second.release().await.unwrap();

    let next = rival
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(10))),
        )
        .await
        .expect("free after the last nested lease is released");
    next.release().await.unwrap();
    locker.close().await;
    rival.close().await;
}

async fn without_the_option_a_nested_acquire_is_a_deadlock(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let name = unique("deadlock");

    let outer = locker
        .acquire_in(OUTER, &name, &LockOptions::default())
        .await
        .unwrap();
    let nested = locker
        .acquire_in(OUTER, &name, &LockOptions::default())
        .await
        .unwrap_err();
    assert_eq!(nested.code(), ErrorCode::Deadlock);
    assert!(
        nested.to_string().contains(&name),
        "the error names the lock: {nested}"
    );
    let tried = locker
        .try_acquire_in(OUTER, &name, &LockOptions::default())
        .await
        .unwrap_err();
    assert_eq!(tried.code(), ErrorCode::Deadlock);
    // The failed attempts changed nothing: the outer lease still holds the lock alone.
    assert!(outer.is_held());
    assert!(
        locker
            .try_acquire_in(OTHER, &name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );

    // Without a scope there is nothing to count re-entries in.
    let unscoped = locker
        .acquire(&unique("unscoped"), &reentrant())
        .await
        .unwrap_err();
    assert_eq!(unscoped.code(), ErrorCode::InvalidArgument);
    outer.release().await.unwrap();
    locker.close().await;
}

async fn a_loss_while_nested_makes_every_nested_lease_lost(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let name = unique("lost");
    // No renewal: the lease is lost at its client deadline (ttl, or the ZooKeeper session).
    let short = reentrant()
        .with_ttl(Duration::from_millis(1500))
        .with_auto_renew(false);

    let outer = locker.acquire_in(OUTER, &name, &short).await.unwrap();
    let inner = locker
        .acquire_in(OUTER, &name, &short.clone().with_wait(Some(Duration::ZERO)))
        .await
        .unwrap();
    let inner_signal = inner.lost_signal();
    tokio::time::timeout(Duration::from_secs(20), outer.lost_signal().wait())
        .await
        .expect("the lease is lost at its deadline");
    assert!(
        inner_signal.is_set(),
        "the nested lease's signal fires with the outer one"
    );
    assert!(inner.is_lost() && outer.is_lost());
    assert_eq!(inner.release().await.unwrap_err().code(), ErrorCode::Lost);
    assert_eq!(outer.release().await.unwrap_err().code(), ErrorCode::Lost);

    // A lost lease is not re-entered: the scope acquires afresh.
    let fresh = locker
        .acquire_in(
            OUTER,
            &name,
            &reentrant().with_wait(Some(Duration::from_secs(20))),
        )
        .await
        .unwrap();
    assert!(fresh.token() > outer.token());
    fresh.release().await.unwrap();
    locker.close().await;
}

async fn dropped_nested_leases_release_the_lock_when_the_last_goes(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let rival = Locker::connect(url).await.unwrap();
    let name = unique("dropped");

    let outer = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let inner = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    inner.release().await.unwrap();
    let inner_clone = inner.clone();
    drop(outer);
    // The released inner lease is still referenced, yet the lock goes back in the background.
    let next = rival
        .acquire(
            &name,
            &LockOptions::default().with_wait(Some(Duration::from_secs(10))),
        )
        .await
        .expect("dropping the last open acquisition releases the lock");
    assert!(!inner_clone.is_held());
    next.release().await.unwrap();
    locker.close().await;
    rival.close().await;
}

/// A nested acquisition racing the release of the scope's only acquisition on another thread
/// never returns a lease that is no longer held: it either joins the lease before the release
/// (which then releases only the outer acquisition) or acquires afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_acquire_racing_a_release_on_another_thread_is_always_held() {
    let locker = Locker::connect(&support::backend_url("sqlite"))
        .await
        .unwrap();
    let name = unique("reentry-race");
    for round in 0..2000 {
        let outer = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
        let release = tokio::spawn(async move { outer.release().await });
        let nested = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
        assert!(
            nested.is_held(),
            "round {round}: a nested lease that is not held"
        );
        release.await.unwrap().unwrap();
        assert!(
            nested.is_held(),
            "round {round}: the outer release took the nested lease"
        );
        nested.release().await.unwrap();
    }
}
