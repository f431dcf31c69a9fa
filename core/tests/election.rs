//! Leader election (issue 12) on every backend: one leader at a time, terms that increase with
//! every new leader, observers that see the leader without campaigning, and leadership that
//! ends on resign, on shutdown, and at a loss.

#[macro_use]
mod support;

use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker};
use support::unique;

const LONG: Duration = Duration::from_secs(20);

fn within(wait: Duration) -> LockOptions {
    LockOptions::default().with_wait(Some(wait))
}

on_every_backend!(
    one_leader_at_a_time_and_each_term_is_larger,
    observers_see_the_leader_and_its_term,
    leadership_ends_when_the_lease_is_lost_and_shutdown_resigns,
);

async fn one_leader_at_a_time_and_each_term_is_larger(url: &str) {
    let election = unique("election");
    let first = Locker::connect(url).await.unwrap();
    let second = Locker::connect(url).await.unwrap();

    let leading = first.campaign(&election, &LockOptions::default()).await.unwrap();
    assert!(leading.is_leader());
    assert_eq!(leading.name(), election);
    let rival = second.campaign(&election, &within(Duration::from_millis(300))).await.unwrap_err();
    assert_eq!(rival.code(), ErrorCode::Timeout, "a second candidate must not lead at the same time");

    let waiting = tokio::spawn({
        let second = second.clone();
        let election = election.clone();
        async move { second.campaign(&election, &within(LONG)).await }
    });
    leading.resign().await.unwrap();
    assert!(!leading.is_leader());
    assert_eq!(leading.resign().await.unwrap_err().code(), ErrorCode::NotHeld);
    let next = waiting.await.unwrap().expect("the waiting candidate leads after the resignation");
    assert!(next.term() > leading.term(), "terms increase: {} then {}", leading.term(), next.term());

    // Terms keep increasing whoever wins.
    let mut last = next.term();
    next.resign().await.unwrap();
    for round in 0..4 {
        let candidate = if round % 2 == 0 { &first } else { &second };
        let leadership = candidate.campaign(&election, &within(LONG)).await.unwrap();
        assert!(leadership.term() > last);
        last = leadership.term();
        leadership.resign().await.unwrap();
    }
    first.close().await;
    second.close().await;
}

async fn observers_see_the_leader_and_its_term(url: &str) {
    let election = unique("observed");
    let candidate = Locker::connect(url).await.unwrap();
    let observer = Locker::connect(url).await.unwrap();
    assert_eq!(observer.leader(&election).await.unwrap(), None);

    let leadership = candidate
        .campaign(&election, &LockOptions::default().with_holder("reports worker"))
        .await
        .unwrap();
    let seen = observer.leader(&election).await.unwrap().expect("an observer sees the leader");
    assert_eq!(seen.term, leadership.term());
    let holder = seen.holder.expect("the leader's description");
    assert_eq!(holder.text.as_deref(), Some("reports worker"));
    assert_eq!(holder.pid, Some(std::process::id()));

    leadership.resign().await.unwrap();
    assert_eq!(observer.leader(&election).await.unwrap(), None);
    candidate.close().await;
    observer.close().await;
}

async fn leadership_ends_when_the_lease_is_lost_and_shutdown_resigns(url: &str) {
    let election = unique("lost-leader");
    let stalled = Locker::connect(url).await.unwrap();
    let standby = Locker::connect(url).await.unwrap();

    // No renewal: the leader loses its lease at the client deadline.
    let short = LockOptions::default().with_ttl(Duration::from_millis(1500)).with_auto_renew(false);
    let leadership = stalled.campaign(&election, &short).await.unwrap();
    tokio::time::timeout(LONG, leadership.lost_signal().wait()).await.expect("the lost signal fires");
    assert!(!leadership.is_leader());
    assert_eq!(leadership.resign().await.unwrap_err().code(), ErrorCode::Lost);

    let next = standby.campaign(&election, &within(LONG)).await.unwrap();
    assert!(next.term() > leadership.term());

    // Shutting the Locker down steps its leader down, and another candidate takes over.
    let observer = stalled.clone();
    standby.close().await;
    assert!(!next.is_leader());
    let after = observer.campaign(&election, &within(LONG)).await.unwrap();
    assert!(after.term() > next.term());
    after.resign().await.unwrap();
    stalled.close().await;
}
