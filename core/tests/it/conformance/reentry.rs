//! Re-entry per execution scope (docs/design.md §1.5): a nested acquire with `reentrant` shares
//! the scope's lease and token, the lock is released when the last nested lease goes, a loss
//! takes every nested lease with it, and without `reentrant` a nested acquire is DEADLOCK.

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker, Scope};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::contract;
use crate::support::unique;

contract!(
    a_nested_acquire_shares_the_lease_and_the_lock_frees_after_the_outer_release,
    nested_leases_release_in_any_order,
    without_reentrant_a_nested_acquire_is_a_deadlock,
    a_loss_while_nested_makes_every_nested_lease_lost,
    dropped_nested_leases_release_the_lock_when_the_last_goes,
);

const OUTER: Scope = Scope::new(1);
const OTHER: Scope = Scope::new(2);

fn reentrant() -> LockOptions {
    LockOptions::default()
        .with_reentrant(true)
        .with_ttl(Duration::from_secs(30))
}

/// A nested acquire that had to wait would time out: this proves "at once" without timing it.
fn at_once() -> LockOptions {
    reentrant().with_wait(Some(Duration::ZERO))
}

fn within_20s() -> LockOptions {
    LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(Duration::from_secs(20)))
}

/// Whether `locker` may take `name` now, in no scope: `false` while somebody holds it.
async fn free(locker: &Locker, name: &str) -> bool {
    match locker.try_acquire(name, &LockOptions::default()).await {
        Ok(Some(lease)) => {
            lease.release().await.unwrap();
            true
        }
        Ok(None) => false,
        Err(e) => panic!("try_acquire {name:?}: {e}"),
    }
}

async fn a_nested_acquire_shares_the_lease_and_the_lock_frees_after_the_outer_release(
    target: Target,
) {
    let (locker, rival) = (target.locker().await, target.locker().await);
    let name = unique("nested");

    let outer = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let inner = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    assert_eq!(
        inner.token(),
        outer.token(),
        "a nested lease carries the outer token"
    );

    // Another Locker (even in the same scope) and another scope of this Locker contend.
    assert!(!free(&rival, &name).await);
    let rival_in_scope = rival.try_acquire_in(OUTER, &name, &reentrant()).await;
    assert!(
        rival_in_scope.unwrap().is_none(),
        "another Locker re-entered"
    );
    let other_scope = locker.try_acquire_in(OTHER, &name, &reentrant()).await;
    assert!(other_scope.unwrap().is_none(), "another scope re-entered");

    inner.release().await.unwrap();
    assert!(!inner.is_held() && outer.is_held());
    assert!(
        !free(&rival, &name).await,
        "the inner release must keep the lock"
    );
    let twice = inner.release().await.unwrap_err();
    assert_eq!(twice.code(), ErrorCode::NotHeld, "{twice}");
    let extended = inner.extend(None).await.unwrap_err();
    assert_eq!(extended.code(), ErrorCode::NotHeld, "{extended}");
    outer.extend(None).await.unwrap();

    outer.release().await.unwrap();
    let next = rival.acquire(&name, &within_20s()).await.unwrap();
    assert!(next.token() > outer.token());
    next.release().await.unwrap();

    // The scope holds nothing now: acquiring again is a fresh acquisition with a new token.
    let again = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    assert!(again.token() > next.token());
    again.release().await.unwrap();
    close(vec![locker, rival]).await;
}

async fn nested_leases_release_in_any_order(target: Target) {
    let (locker, rival) = (target.locker().await, target.locker().await);
    let name = unique("order");

    let first = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let second = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    let third = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();

    first.release().await.unwrap();
    assert!(!free(&rival, &name).await);
    third.release().await.unwrap();
    assert!(!free(&rival, &name).await);
    assert!(second.is_held());
    second.release().await.unwrap();

    let next = rival.acquire(&name, &within_20s()).await;
    next.expect("free after the last nested lease is released")
        .release()
        .await
        .unwrap();
    close(vec![locker, rival]).await;
}

async fn without_reentrant_a_nested_acquire_is_a_deadlock(target: Target) {
    let locker = target.locker().await;
    let name = unique("deadlock");
    let plain = LockOptions::default().with_ttl(Duration::from_secs(30));

    let outer = locker.acquire_in(OUTER, &name, &plain).await.unwrap();
    // A wait that would otherwise last forever: the answer comes at once.
    let nested = locker.acquire_in(OUTER, &name, &plain).await.unwrap_err();
    assert_eq!(nested.code(), ErrorCode::Deadlock, "{nested}");
    assert!(
        nested.to_string().contains(&name),
        "the error names the lock: {nested}"
    );
    let tried = locker.try_acquire_in(OUTER, &name, &plain).await;
    assert_eq!(tried.unwrap_err().code(), ErrorCode::Deadlock);
    // The failed attempts changed nothing: the outer lease still holds the lock alone.
    assert!(outer.is_held());
    let other_scope = locker.try_acquire_in(OTHER, &name, &plain).await;
    assert!(other_scope.unwrap().is_none());

    // Without a scope there is nothing to count re-entries in.
    let unscoped = locker.acquire(&unique("unscoped"), &reentrant()).await;
    assert_eq!(unscoped.unwrap_err().code(), ErrorCode::InvalidArgument);
    outer.release().await.unwrap();
    locker.close().await;
}

async fn a_loss_while_nested_makes_every_nested_lease_lost(target: Target) {
    let locker = target.locker().await;
    let name = unique("nested-lost");
    // No renewal: the lease is lost at its client deadline (the ttl, or the ZooKeeper session).
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

async fn dropped_nested_leases_release_the_lock_when_the_last_goes(target: Target) {
    let (locker, rival) = (target.locker().await, target.locker().await);
    let name = unique("dropped");

    let outer = locker.acquire_in(OUTER, &name, &reentrant()).await.unwrap();
    let inner = locker.acquire_in(OUTER, &name, &at_once()).await.unwrap();
    inner.release().await.unwrap();
    let inner_clone = inner.clone();
    drop(outer);
    // The released inner lease is still referenced, yet the lock goes back in the background.
    let next = rival.acquire(&name, &within_20s()).await;
    let next = next.expect("dropping the last open acquisition releases the lock");
    assert!(!inner_clone.is_held());
    next.release().await.unwrap();
    close(vec![locker, rival]).await;
}
