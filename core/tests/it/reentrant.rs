//! Re-entry's scope registry under a race (docs/design.md §1.5): the contract of re-entry and
//! DEADLOCK runs on every backend in the conformance suite (conformance/reentry.rs); this one
//! race is in the core's registry, not in any backend, so it runs on SQLite only.

use crate::support::{self, unique};
use fencelock::{LockOptions, Locker, Scope};

const OUTER: Scope = Scope::new(1);

fn reentrant() -> LockOptions {
    LockOptions::default().with_reentrant(true)
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
