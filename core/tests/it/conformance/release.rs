//! How a lease ends by its holder's hand (docs/design.md §1.7): a release frees the lock, and a
//! second release or an extend after it is NOT_HELD; a pipelined release (§8.4) frees it too and
//! still reports a lock found no longer ours; a dropped lease is released in the background;
//! closing a Locker releases everything it holds.

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, LossReason};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::contract;
use crate::support::unique;

contract!(
    a_release_frees_the_lock_and_a_second_one_is_not_held,
    a_pipelined_release_frees_the_lock,
    a_pipelined_release_still_reports_a_lock_taken_over,
    dropping_a_lease_releases_it_in_the_background,
    closing_the_locker_releases_what_it_holds,
);

/// Long enough that nothing here expires: a lock found free was released, not expired.
pub const TTL: Duration = Duration::from_secs(30);

/// How long a background release may take: 2 × `operation_timeout` (10 s by default) + 1 s
/// (docs/design.md §1.7), with a margin for a slow machine; still below [`TTL`].
pub const BACKGROUND: Duration = Duration::from_secs(25);

pub fn held() -> LockOptions {
    LockOptions::default().with_ttl(TTL)
}

async fn a_release_frees_the_lock_and_a_second_one_is_not_held(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("release");
    let lease = locker.acquire(&name, &held()).await.unwrap();
    lease.extend(None).await.unwrap();
    let info = locker.inspect(&name).await.unwrap();
    assert!(info.held);
    assert_eq!(info.token, Some(lease.token()));
    lease.release().await.unwrap();
    assert!(!lease.is_held() && !lease.is_lost());
    assert!(!locker.inspect(&name).await.unwrap().held);
    for (what, err) in [
        ("release", lease.release().await.unwrap_err()),
        ("extend", lease.extend(None).await.unwrap_err()),
        ("ensure_held", lease.ensure_held().unwrap_err()),
    ] {
        assert_eq!(
            err.code(),
            ErrorCode::NotHeld,
            "{what} after release: {err}"
        );
    }
    // Released, not lost: the lost signal stays quiet.
    assert!(!lease.lost_signal().is_set());
    let next = other.try_acquire(&name, &held()).await.unwrap();
    let next = next.expect("free at once after the release");
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    close(vec![locker, other]).await;
}

fn pipelined() -> LockOptions {
    held().with_pipelined_release(true)
}

async fn a_pipelined_release_frees_the_lock(target: Target) {
    let (locker, rival) = (target.locker().await, target.locker().await);
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
        .acquire(&name, &held().with_wait(Some(Duration::from_secs(10))))
        .await
        .expect("another client gets the lock after a pipelined release");
    assert!(next.token() > last);
    next.release().await.unwrap();
    close(vec![locker, rival]).await;
}

/// A lock force-released and taken by another client: a pipelined release returns before the
/// reply, which, checked in the background, fires the lost signal. (Where the backend hears of
/// the loss first, as ZooKeeper's watch on the node does, the release answers LOST itself.)
async fn a_pipelined_release_still_reports_a_lock_taken_over(target: Target) {
    let (locker, operator) = (target.locker().await, target.locker().await);
    let name = unique("pipelined-taken");
    // No renewal, so only the release can find out on TTL backends.
    let lease = locker
        .acquire(&name, &pipelined().with_auto_renew(false))
        .await
        .unwrap();
    operator.force_release(&name).await.unwrap();
    let next = operator.acquire(&name, &held()).await.unwrap();
    match lease.release().await {
        Ok(()) => {}
        Err(err) => assert_eq!(err.code(), ErrorCode::Lost, "{err}"),
    }
    let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost_signal().wait())
        .await
        .expect("the release's reply fires the lost signal");
    assert_eq!(reason, LossReason::TakenOver);
    // The release touched nothing of the new holder's.
    assert!(next.is_held());
    let info = operator.inspect(&name).await.unwrap();
    assert!(info.held);
    assert_eq!(info.token, Some(next.token()));
    next.release().await.unwrap();
    close(vec![locker, operator]).await;
}

async fn dropping_a_lease_releases_it_in_the_background(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("dropped");
    let lease = locker.acquire(&name, &held()).await.unwrap();
    let token = lease.token();
    drop(lease);
    // Well before the ttl: released, not expired.
    let next = other
        .acquire(&name, &held().with_wait(Some(BACKGROUND)))
        .await
        .unwrap_or_else(|e| panic!("a dropped lease was not released: {e}"));
    assert!(next.token() > token);
    next.release().await.unwrap();
    close(vec![locker, other]).await;
}

async fn closing_the_locker_releases_what_it_holds(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let names = [unique("closed-a"), unique("closed-b")];
    let mut leases = Vec::new();
    for name in &names {
        leases.push(locker.acquire(name, &held()).await.unwrap());
    }
    locker.close().await;
    assert!(locker.is_closed());
    for (name, lease) in names.iter().zip(&leases) {
        assert!(!lease.is_held());
        let next = other.try_acquire(name, &held()).await.unwrap();
        let next = next.unwrap_or_else(|| panic!("{name} still held after close"));
        assert!(next.token() > lease.token());
        next.release().await.unwrap();
        assert_eq!(
            lease.release().await.unwrap_err().code(),
            ErrorCode::NotHeld
        );
    }
    assert_eq!(
        locker
            .acquire(&unique("after-close"), &held())
            .await
            .unwrap_err()
            .code(),
        ErrorCode::Closed
    );
    other.close().await;
}
