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

    let reentrant = first
        .campaign(&election, &LockOptions::default().with_reentrant(true))
        .await
        .unwrap_err();
    assert_eq!(reentrant.code(), ErrorCode::InvalidArgument);
    assert!(
        reentrant.message().contains("never re-entered"),
        "{reentrant}"
    );

    let leading = first
        .campaign(&election, &LockOptions::default())
        .await
        .unwrap();
    assert!(leading.is_leader());
    assert_eq!(leading.name(), election);
    let rival = second
        .campaign(&election, &within(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(
        rival.code(),
        ErrorCode::Timeout,
        "a second candidate must not lead at the same time"
    );

    let waiting = tokio::spawn({
        let second = second.clone();
        let election = election.clone();
        async move { second.campaign(&election, &within(LONG)).await }
    });
    leading.resign().await.unwrap();
    assert!(!leading.is_leader());
    assert_eq!(
        leading.resign().await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    let next = waiting
        .await
        .unwrap()
        .expect("the waiting candidate leads after the resignation");
    assert!(
        next.term() > leading.term(),
        "terms increase: {} then {}",
        leading.term(),
        next.term()
    );

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
        .campaign(
            &election,
            &LockOptions::default().with_holder("reports worker"),
        )
        .await
        .unwrap();
    let seen = observer
        .leader(&election)
        .await
        .unwrap()
        .expect("an observer sees the leader");
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
    let short = LockOptions::default()
        .with_ttl(Duration::from_millis(1500))
        .with_auto_renew(false);
    let leadership = stalled.campaign(&election, &short).await.unwrap();
    tokio::time::timeout(LONG, leadership.lost_signal().wait())
        .await
        .expect("the lost signal fires");
    assert!(!leadership.is_leader());
    assert_eq!(
        leadership.resign().await.unwrap_err().code(),
        ErrorCode::Lost
    );

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

// --- issue 12's behavioural checks -----------------------------------------------------------

#[path = "support/sql.rs"]
mod sql_support;
#[path = "support/takeover.rs"]
mod takeover;

on_every_backend!(
    three_candidates_never_lead_at_once,
    a_deposed_leader_hears_within_one_renewal_and_the_fence_refuses_it,
    resigning_hands_over_within_a_wake_up,
);

async fn three_candidates_never_lead_at_once(url: &str) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let election = unique("three");
    let leading = Arc::new(AtomicUsize::new(0));
    let mut candidates = Vec::new();
    for _ in 0..3 {
        let locker = Locker::connect(url).await.unwrap();
        let (election, leading) = (election.clone(), leading.clone());
        candidates.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            for _ in 0..5 {
                let leadership = locker.campaign(&election, &within(LONG)).await.unwrap();
                assert_eq!(
                    leading.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two leaders at once"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                terms.push(leadership.term());
                leadership.resign().await.unwrap();
            }
            locker.close().await;
            terms
        }));
    }
    let mut all = Vec::new();
    for candidate in candidates {
        let terms = candidate.await.unwrap();
        assert!(
            terms.windows(2).all(|pair| pair[0] < pair[1]),
            "one candidate's terms: {terms:?}"
        );
        all.extend(terms);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 15, "every term is distinct");
}

async fn a_deposed_leader_hears_within_one_renewal_and_the_fence_refuses_it(url: &str) {
    let election = unique("deposed");
    let ttl = Duration::from_millis(3000);
    let old_locker = Locker::connect(url).await.unwrap();
    let new_locker = Locker::connect(url).await.unwrap();
    let old = old_locker
        .campaign(&election, &LockOptions::default().with_ttl(ttl))
        .await
        .unwrap();

    takeover::take_over(url, &election).await;
    let reason = tokio::time::timeout(ttl / 3 + Duration::from_secs(3), old.lost_signal().wait())
        .await
        .expect("the deposed leader's signal fires within one renewal interval plus a margin");
    assert!(!old.is_leader(), "{reason}");

    let new = new_locker.campaign(&election, &within(LONG)).await.unwrap();
    assert!(new.term() > old.term());
    let dir = tempfile::tempdir().unwrap();
    let fence = fencelock::Fence::open(
        &format!("sqlite://{}", dir.path().join("data.db").display()),
        "reports",
    )
    .await
    .unwrap();
    let create = fencelock::Statement::new("CREATE TABLE IF NOT EXISTS reports (term INTEGER)");
    fence.fenced_execute(new.lease(), &[create]).await.unwrap();
    let stale = fence
        .fenced_execute(
            old.lease(),
            &[fencelock::Statement::new("INSERT INTO reports VALUES (1)")],
        )
        .await;
    assert_eq!(
        stale.unwrap_err().code(),
        ErrorCode::Lost,
        "a lost lease is refused before anything is sent"
    );
    let stale = fence
        .fenced_execute(
            old.term(),
            &[fencelock::Statement::new("INSERT INTO reports VALUES (1)")],
        )
        .await;
    assert_eq!(
        stale.unwrap_err().code(),
        ErrorCode::StaleToken,
        "the old term is below the new leader's"
    );
    assert_eq!(fence.highest().await.unwrap(), Some(new.term()));
    fence.close().await;
    new.resign().await.unwrap();
    old_locker.close().await;
    new_locker.close().await;
}

async fn resigning_hands_over_within_a_wake_up(url: &str) {
    let election = unique("handover");
    let leader_locker = Locker::connect(url).await.unwrap();
    let standby_locker = Locker::connect(url).await.unwrap();
    let leader = leader_locker
        .campaign(&election, &LockOptions::default())
        .await
        .unwrap();
    let standby = tokio::spawn({
        let election = election.clone();
        async move {
            let leadership = standby_locker
                .campaign(&election, &within(LONG))
                .await
                .unwrap();
            (leadership, std::time::Instant::now(), standby_locker)
        }
    });
    // Let the standby subscribe and park (its first attempt answered "held").
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resigned_at = std::time::Instant::now();
    leader.resign().await.unwrap();
    let (leadership, elected_at, standby_locker) = standby.await.unwrap();
    let took = elected_at.duration_since(resigned_at);
    // One wake-up (a release notification, or one 50 ms poll) plus a wide margin for CI.
    assert!(took < Duration::from_secs(2), "hand-over took {took:?}");
    assert!(leadership.term() > leader.term());
    leadership.resign().await.unwrap();
    leader_locker.close().await;
    standby_locker.close().await;
}
