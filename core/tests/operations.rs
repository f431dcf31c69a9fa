//! Inspection and administration (issue 13) on every backend, Redlock and Redis Cluster
//! included: `inspect` shows the holder and token while held and nothing after release,
//! `list(prefix)` treats the prefix as data, and `force_release` frees a lock whose holder
//! hears of it within one renewal interval.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use fencelock::{BackendKind, ErrorCode, LockOptions, Locker, LossReason};
use support::unique;

on_all_backends!(
    inspect_shows_the_holder_while_held_and_nothing_after_release,
    list_finds_held_locks_by_prefix_and_treats_the_prefix_as_data,
    force_release_tells_the_holder_within_one_renewal_interval,
    bad_inputs_to_the_new_calls_get_typed_errors,
    events_arrive_in_order_for_a_leases_whole_life_including_a_loss,
);

fn held_opts(ttl: Duration) -> LockOptions {
    LockOptions::default()
        .with_ttl(ttl)
        .with_wait(Some(Duration::from_secs(10)))
        .with_holder("nightly report")
}

async fn inspect_shows_the_holder_while_held_and_nothing_after_release(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let name = unique("ops-inspect");
    let lease = locker
        .acquire(&name, &held_opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let info = locker.inspect(&name).await.unwrap();
    assert!(info.held, "{info:?}");
    assert_eq!(info.name, name);
    assert_eq!(info.token, Some(lease.token()));
    let holder = info.holder_description().expect("a holder description");
    assert_eq!(holder.pid, Some(std::process::id()));
    assert_eq!(holder.language.as_deref(), Some("rust"));
    assert_eq!(holder.text.as_deref(), Some("nightly report"));
    assert!(holder.host.is_some());
    match locker.backend_kind() {
        // The session is the lease there: no time left to show.
        BackendKind::ZooKeeper => assert_eq!(info.time_left, None),
        _ => {
            let left = info.time_left.expect("time left on a TTL backend");
            assert!(
                left > Duration::ZERO && left <= Duration::from_secs(10),
                "{left:?}"
            );
        }
    }
    assert!(info.waiters.is_empty());
    lease.release().await.unwrap();
    let after = locker.inspect(&name).await.unwrap();
    assert!(!after.held, "{after:?}");
    assert_eq!(after.holder, None);
    assert_eq!(after.time_left, None);
    locker.close().await;
}

async fn list_finds_held_locks_by_prefix_and_treats_the_prefix_as_data(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let base = unique("ops-list");
    // Glob and LIKE wildcards in names and in the prefix are plain characters.
    let names = [
        format!("{base}/a"),
        format!("{base}/b*"),
        format!("{base}/%c"),
        format!("{base}/_d"),
    ];
    let outside = format!("{base}-other");
    let mut leases = Vec::new();
    for name in names.iter().chain([&outside]) {
        leases.push(
            locker
                .acquire(name, &held_opts(Duration::from_secs(10)))
                .await
                .unwrap(),
        );
    }
    let listed = locker.list(&format!("{base}/")).await.unwrap();
    assert!(!listed.truncated);
    let mut expected: Vec<String> = names.to_vec();
    expected.sort();
    assert_eq!(
        listed
            .locks
            .iter()
            .map(|l| l.name.clone())
            .collect::<Vec<_>>(),
        expected
    );
    for info in &listed.locks {
        assert!(info.held);
        let lease = leases.iter().find(|l| l.name() == info.name).unwrap();
        assert_eq!(info.token, Some(lease.token()), "{}", info.name);
        assert_eq!(
            info.holder_description().unwrap().text.as_deref(),
            Some("nightly report")
        );
    }
    // A prefix with wildcards matches only names that spell them.
    let star = locker.list(&format!("{base}/b*")).await.unwrap();
    assert_eq!(
        star.locks
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>(),
        [names[1].as_str()]
    );
    for wildcard in ["*", "%", "_", "?", "["] {
        let none = locker.list(&format!("{base}/{wildcard}x")).await.unwrap();
        assert!(none.locks.is_empty(), "{wildcard}: {:?}", none.locks);
    }
    let percent = locker.list(&format!("{base}/%")).await.unwrap();
    assert_eq!(percent.locks.len(), 1, "{:?}", percent.locks);
    // The empty prefix lists them too (among whatever else other tests hold).
    let all = locker.list("").await.unwrap();
    if !all.truncated {
        for name in names.iter().chain([&outside]) {
            assert!(
                all.locks.iter().any(|l| &l.name == name),
                "{name} missing from the full list"
            );
        }
    }
    // Released locks are not listed.
    for lease in leases {
        lease.release().await.unwrap();
    }
    let after = locker.list(&base).await.unwrap();
    assert!(after.locks.is_empty(), "{:?}", after.locks);
    locker.close().await;
}

async fn force_release_tells_the_holder_within_one_renewal_interval(url: &str) {
    let holder = Locker::connect(url).await.unwrap();
    let operator = Locker::connect(url).await.unwrap();
    let name = unique("ops-force");
    let ttl = Duration::from_secs(6);
    let lease = holder.acquire(&name, &held_opts(ttl)).await.unwrap();
    let first = lease.token();
    let signal = lease.lost_signal();
    let forced_at = Instant::now();
    operator.force_release(&name).await.unwrap();
    // One renewal interval (a third of the lease's real ttl: on ZooKeeper the session
    // timeout) plus a generous margin for a slow machine; still well before the client
    // deadline, so the loss seen is the force release's, not an expiry.
    let interval = match holder.backend_kind() {
        BackendKind::ZooKeeper => Duration::from_secs(2) / 3,
        _ => ttl / 3,
    };
    let reason = tokio::time::timeout(interval + Duration::from_secs(3), signal.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no lost signal within {:?} of the force release",
                interval + Duration::from_secs(3)
            )
        });
    assert_eq!(reason, LossReason::TakenOver);
    assert!(lease.is_lost());
    eprintln!("lost {:?} after the force release", forced_at.elapsed());
    // Another holder gets a larger token: the fencing counter did not move back.
    let next = operator
        .acquire(&name, &held_opts(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(next.token() > first, "{} then {first}", next.token());
    // The old holder hears LOST, not success, and touches nothing.
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    assert_eq!(
        operator.inspect(&name).await.unwrap().token,
        Some(next.token())
    );
    next.release().await.unwrap();
    // Nobody holds it now.
    let free = operator.force_release(&name).await.unwrap_err();
    assert_eq!(free.code(), ErrorCode::NotHeld, "{free}");
    holder.close().await;
    operator.close().await;
}

async fn bad_inputs_to_the_new_calls_get_typed_errors(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    assert_eq!(
        locker.list("a\0b").await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        locker.list(&"x".repeat(256)).await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        locker.force_release("").await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        locker
            .force_release(&unique("never-held"))
            .await
            .unwrap_err()
            .code(),
        ErrorCode::NotHeld
    );
    assert_eq!(
        locker.inspect("").await.unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    locker.close().await;
    assert_eq!(locker.list("").await.unwrap_err().code(), ErrorCode::Closed);
    assert_eq!(
        locker.force_release("x").await.unwrap_err().code(),
        ErrorCode::Closed
    );
}

/// ZooKeeper's waiters queue: inspect shows them, first in line first, with their holder text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_inspect_shows_the_queue_of_waiters() {
    let url = support::backend_url("zookeeper");
    let holder = Locker::connect(&url).await.unwrap();
    let waiter = Locker::connect(&url).await.unwrap();
    let name = unique("ops-queue");
    let lease = holder
        .acquire(&name, &held_opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let opts = LockOptions::default()
                .with_wait(Some(Duration::from_secs(20)))
                .with_holder("second in line");
            waiter.acquire(&name, &opts).await
        })
    };
    let started = Instant::now();
    let info = loop {
        let info = holder.inspect(&name).await.unwrap();
        if !info.waiters.is_empty() {
            break info;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiter never showed up: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(info.token, Some(lease.token()));
    assert_eq!(info.waiters.len(), 1, "{info:?}");
    let described = fencelock::HolderDescription::parse(info.waiters[0].holder.as_deref().unwrap());
    assert_eq!(described.text.as_deref(), Some("second in line"));
    assert!(
        info.waiters[0].node.contains("-lock-"),
        "{:?}",
        info.waiters[0]
    );
    lease.release().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert!(holder.inspect(&name).await.unwrap().waiters.is_empty());
    second.release().await.unwrap();
}

/// Collects events for `name` until one of `last` arrives.
async fn events_until(
    sub: &fencelock::EventSubscription,
    name: &str,
    last: fencelock::LockEventKind,
) -> Vec<fencelock::LockEvent> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(15), sub.recv())
            .await
            .unwrap_or_else(|_| panic!("no {last} event; saw {seen:?}"))
            .expect("the subscription ended early");
        if event.name != name {
            continue;
        }
        let done = event.kind == last;
        seen.push(event);
        if done {
            return seen;
        }
    }
}

async fn events_arrive_in_order_for_a_leases_whole_life_including_a_loss(url: &str) {
    use fencelock::LockEventKind::*;
    let locker = Locker::connect(url).await.unwrap();
    let operator = Locker::connect(url).await.unwrap();
    let sub = locker.subscribe();
    let name = unique("ops-events");
    // A short ttl so renewals come quickly (ZooKeeper's is its 2 s session).
    let lease = locker
        .acquire(&name, &held_opts(Duration::from_millis(900)))
        .await
        .unwrap();
    let renewed = {
        let first = events_until(&sub, &name, Renewed).await;
        assert_eq!(first.first().map(|e| e.kind), Some(Acquired), "{first:?}");
        first
    };
    lease.release().await.unwrap();
    let rest = events_until(&sub, &name, Released).await;
    let life: Vec<_> = renewed.iter().chain(&rest).collect();
    let kinds: Vec<_> = life.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.first(), Some(&Acquired));
    assert_eq!(kinds.last(), Some(&Released));
    assert!(
        kinds[1..kinds.len() - 1].iter().all(|k| *k == Renewed),
        "{kinds:?}"
    );
    for event in &life {
        assert_eq!(event.token, lease.token());
        assert_eq!(event.backend, locker.backend_kind());
    }
    assert!(life.windows(2).all(|w| w[0].at <= w[1].at));

    // A second lease of the same name, lost to a force release.
    let lease = locker
        .acquire(&name, &held_opts(Duration::from_secs(3)))
        .await
        .unwrap();
    operator.force_release(&name).await.unwrap();
    let lost = events_until(&sub, &name, Lost).await;
    assert_eq!(lost.first().map(|e| e.kind), Some(Acquired), "{lost:?}");
    assert!(lost.iter().all(|e| e.token == lease.token()), "{lost:?}");
    let last = lost.last().unwrap();
    assert_eq!(last.loss, Some(LossReason::TakenOver));
    assert!(
        last.reason
            .as_deref()
            .is_some_and(|r| r.contains("no longer ours")),
        "{last:?}"
    );
    assert!(
        lost[1..lost.len() - 1].iter().all(|e| e.kind == Renewed),
        "{lost:?}"
    );
    // Nothing follows a loss; closing the Locker ends the subscription.
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    locker.close().await;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .unwrap()
    {
        assert_ne!(event.name, name, "an event after the loss: {event:?}");
    }
    assert!(sub.is_closed());
    operator.close().await;
}
