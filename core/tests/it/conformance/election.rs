//! Leader election (docs/design.md §1.6): one leader at a time, a term that is the lease's token
//! and grows with every new leader, observers that see the leader without campaigning, and
//! leadership that ends on resign, on shutdown, at a loss and when deposed, after which a fence
//! refuses the old term.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fencelock::{ErrorCode, LockOptions, LossReason};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::conformance::fence::SqliteFence;
use crate::contract;
use crate::support::unique;

contract!(
    one_leader_at_a_time_and_each_term_is_larger,
    observers_see_the_leader_and_its_term,
    leadership_ends_when_the_lease_is_lost_and_shutdown_resigns,
    three_candidates_never_lead_at_once,
    a_deposed_leader_hears_of_it_and_a_fence_refuses_its_term,
    resigning_hands_over_within_a_wake_up,
);

const LONG: Duration = Duration::from_secs(20);

fn within(wait: Duration) -> LockOptions {
    LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(wait))
}

async fn one_leader_at_a_time_and_each_term_is_larger(target: Target) {
    let election = unique("election");
    let (first, second) = (target.locker().await, target.locker().await);

    let reentrant = LockOptions::default().with_reentrant(true);
    let refused = first.campaign(&election, &reentrant).await.unwrap_err();
    assert_eq!(refused.code(), ErrorCode::InvalidArgument);
    assert!(refused.message().contains("never re-entered"), "{refused}");

    let leading = first.campaign(&election, &within(LONG)).await.unwrap();
    assert!(leading.is_leader());
    assert_eq!(leading.name(), election);
    assert_eq!(leading.term(), leading.lease().token());
    let rival = second
        .campaign(&election, &within(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(
        rival.code(),
        ErrorCode::Timeout,
        "a second candidate led at the same time"
    );

    let waiting = tokio::spawn({
        let (second, election) = (second.clone(), election.clone());
        async move { second.campaign(&election, &within(LONG)).await }
    });
    leading.resign().await.unwrap();
    assert!(!leading.is_leader());
    assert_eq!(
        leading.resign().await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    let next = waiting.await.unwrap();
    let next = next.expect("the waiting candidate leads after the resignation");
    assert!(
        next.term() > leading.term(),
        "{} then {}",
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
    close(vec![first, second]).await;
}

async fn observers_see_the_leader_and_its_term(target: Target) {
    let election = unique("observed");
    let (candidate, observer) = (target.locker().await, target.locker().await);
    assert_eq!(observer.leader(&election).await.unwrap(), None);

    let options = within(LONG).with_holder("reports worker");
    let leadership = candidate.campaign(&election, &options).await.unwrap();
    let seen = observer.leader(&election).await.unwrap();
    let seen = seen.expect("an observer sees the leader");
    assert_eq!(seen.term, leadership.term());
    let holder = seen.holder.expect("the leader's description");
    assert_eq!(holder.text.as_deref(), Some("reports worker"));
    assert_eq!(holder.pid, Some(std::process::id()));

    leadership.resign().await.unwrap();
    assert_eq!(observer.leader(&election).await.unwrap(), None);
    close(vec![candidate, observer]).await;
}

async fn leadership_ends_when_the_lease_is_lost_and_shutdown_resigns(target: Target) {
    let election = unique("lost-leader");
    let (stalled, standby) = (target.locker().await, target.locker().await);

    // No renewal: the leader loses its lease at the client deadline (the ttl, or the
    // ZooKeeper session).
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
    standby.close().await;
    assert!(!next.is_leader());
    let after = stalled.campaign(&election, &within(LONG)).await.unwrap();
    assert!(after.term() > next.term());
    after.resign().await.unwrap();
    stalled.close().await;
}

async fn three_candidates_never_lead_at_once(target: Target) {
    const CANDIDATES: usize = 3;
    const TERMS: usize = 5;
    let election = unique("three");
    let leading = Arc::new(AtomicUsize::new(0));
    let mut candidates = Vec::new();
    for _ in 0..CANDIDATES {
        let locker = target.locker().await;
        let (election, leading) = (election.clone(), leading.clone());
        candidates.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            for _ in 0..TERMS {
                let leadership = locker.campaign(&election, &within(LONG)).await.unwrap();
                assert_eq!(
                    leading.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two leaders at once"
                );
                tokio::task::yield_now().await;
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
        let increasing = terms.windows(2).all(|pair| pair[0] < pair[1]);
        assert!(increasing, "one candidate's terms: {terms:?}");
        all.extend(terms);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), CANDIDATES * TERMS, "every term is distinct");
}

async fn a_deposed_leader_hears_of_it_and_a_fence_refuses_its_term(target: Target) {
    let election = unique("deposed");
    let ttl = Duration::from_secs(3);
    let (old_locker, new_locker) = (target.locker().await, target.locker().await);
    let old = old_locker
        .campaign(&election, &LockOptions::default().with_ttl(ttl))
        .await
        .unwrap();
    let store = SqliteFence::open("reports").await;
    let bump = SqliteFence::bump();
    store
        .fence
        .fenced_execute(old.lease(), &bump)
        .await
        .unwrap();

    // An operator deposes it; it hears of it (within one renewal interval: loss.rs).
    new_locker.force_release(&election).await.unwrap();
    let reason = tokio::time::timeout(LONG, old.lost_signal().wait()).await;
    assert_eq!(
        reason.expect("the deposed leader hears"),
        LossReason::TakenOver
    );
    assert!(!old.is_leader());
    let new = new_locker.campaign(&election, &within(LONG)).await.unwrap();
    assert!(new.term() > old.term());
    store
        .fence
        .fenced_execute(new.lease(), &bump)
        .await
        .unwrap();

    // The deposed leader's writes fail: its lease before anything is sent, its bare term as
    // older than the new leader's.
    let lost = store.fence.fenced_execute(old.lease(), &bump).await;
    assert_eq!(lost.unwrap_err().code(), ErrorCode::Lost);
    let stale = store.fence.fenced_execute(old.term(), &bump).await;
    assert_eq!(stale.unwrap_err().code(), ErrorCode::StaleToken);
    assert_eq!(store.fence.highest().await.unwrap(), Some(new.term()));
    assert_eq!(store.count().await, 2);
    new.resign().await.unwrap();
    store.close().await;
    close(vec![old_locker, new_locker]).await;
}

async fn resigning_hands_over_within_a_wake_up(target: Target) {
    let election = unique("handover");
    let leader_locker = target.locker().await;
    let (standby_locker, probe) = target.probed_locker().await;
    let leader = leader_locker
        .campaign(&election, &within(LONG))
        .await
        .unwrap();
    let standby = tokio::spawn({
        let (standby_locker, election) = (standby_locker.clone(), election.clone());
        async move {
            let leadership = standby_locker.campaign(&election, &within(LONG)).await;
            (leadership.unwrap(), Instant::now())
        }
    });
    // The standby's first attempt answered "held" and it waits for the release.
    probe.until_waiting(&leader_locker, &election).await;
    let resigned_at = Instant::now();
    leader.resign().await.unwrap();
    let (leadership, elected_at) = standby.await.unwrap();
    let took = elected_at.duration_since(resigned_at);
    // One wake-up (a release notification, or one 50 ms poll) plus a wide margin for CI.
    assert!(took < Duration::from_secs(2), "hand-over took {took:?}");
    assert!(leadership.term() > leader.term());
    leadership.resign().await.unwrap();
    close(vec![leader_locker, standby_locker]).await;
}
