//! Inspection and administration (docs/design.md §7.5) and lifecycle events (§7.1): `inspect`
//! shows the holder and token while held and nothing after release, `list(prefix)` treats the
//! prefix as data, bad inputs to inspect, list and force_release get typed errors, and one
//! lease's events arrive in order, a loss to a force release included. (What a force release
//! does to its holder is in loss.rs.)

use std::time::Duration;

use fencelock::{BackendKind, ErrorCode, LockOptions, LossReason};

use crate::conformance::backends::Target;
use crate::contract;
use crate::support::unique;

contract!(
    inspect_shows_the_holder_while_held_and_nothing_after_release,
    list_finds_held_locks_by_prefix_and_treats_the_prefix_as_data,
    bad_inputs_to_inspect_list_and_force_release_get_typed_errors,
    events_arrive_in_order_for_a_leases_whole_life_including_a_loss,
);

fn held_opts(ttl: Duration) -> LockOptions {
    LockOptions::default()
        .with_ttl(ttl)
        .with_wait(Some(Duration::from_secs(20)))
        .with_holder("nightly report")
}

async fn inspect_shows_the_holder_while_held_and_nothing_after_release(target: Target) {
    let locker = target.locker().await;
    let name = unique("ops-inspect");
    let ttl = Duration::from_secs(10);
    let lease = locker.acquire(&name, &held_opts(ttl)).await.unwrap();
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
            assert!(left > Duration::ZERO && left <= ttl, "{left:?}");
        }
    }
    assert!(info.waiters.is_empty());
    lease.release().await.unwrap();
    let after = locker.inspect(&name).await.unwrap();
    assert!(!after.held, "{after:?}");
    assert_eq!(after.holder, None);
    assert_eq!(after.time_left, None);
    // Where a free lock still shows its counter, it did not move back.
    if let Some(token) = after.token {
        assert!(token >= lease.token(), "{after:?}");
    }
    locker.close().await;
}

async fn list_finds_held_locks_by_prefix_and_treats_the_prefix_as_data(target: Target) {
    let locker = target.locker().await;
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
        let opts = held_opts(Duration::from_secs(30));
        leases.push(locker.acquire(name, &opts).await.unwrap());
    }
    let listed = locker.list(&format!("{base}/")).await.unwrap();
    assert!(!listed.truncated);
    let mut expected: Vec<String> = names.to_vec();
    expected.sort();
    let listed_names: Vec<_> = listed.locks.iter().map(|l| l.name.clone()).collect();
    assert_eq!(listed_names, expected);
    for info in &listed.locks {
        assert!(info.held);
        let lease = leases.iter().find(|l| l.name() == info.name).unwrap();
        assert_eq!(info.token, Some(lease.token()), "{}", info.name);
        let holder = info.holder_description().unwrap();
        assert_eq!(holder.text.as_deref(), Some("nightly report"));
    }
    // A prefix with wildcards matches only names that spell them.
    let star = locker.list(&format!("{base}/b*")).await.unwrap();
    let star: Vec<_> = star.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(star, [names[1].as_str()]);
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
            let found = all.locks.iter().any(|l| &l.name == name);
            assert!(found, "{name} missing from the full list");
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

async fn bad_inputs_to_inspect_list_and_force_release_get_typed_errors(target: Target) {
    let locker = target.locker().await;
    assert_eq!(code(locker.list("a\0b").await), ErrorCode::InvalidArgument);
    let long = "x".repeat(256);
    assert_eq!(code(locker.list(&long).await), ErrorCode::InvalidArgument);
    assert_eq!(
        code(locker.force_release("").await),
        ErrorCode::InvalidArgument
    );
    let never = unique("never-held");
    assert_eq!(code(locker.force_release(&never).await), ErrorCode::NotHeld);
    assert_eq!(code(locker.inspect("").await), ErrorCode::InvalidArgument);
    locker.close().await;
    assert_eq!(code(locker.list("").await), ErrorCode::Closed);
    assert_eq!(code(locker.force_release("x").await), ErrorCode::Closed);
    assert_eq!(code(locker.inspect("x").await), ErrorCode::Closed);
}

/// The code of the error `result` must be.
fn code<T>(result: fencelock::Result<T>) -> ErrorCode {
    result.map(|_| ()).unwrap_err().code()
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

async fn events_arrive_in_order_for_a_leases_whole_life_including_a_loss(target: Target) {
    use fencelock::LockEventKind::*;
    let (locker, operator) = (target.locker().await, target.locker().await);
    let sub = locker.subscribe();
    let name = unique("ops-events");
    // A short ttl so renewals come quickly (ZooKeeper's is its 2 s session).
    let lease = locker
        .acquire(&name, &held_opts(Duration::from_millis(900)))
        .await
        .unwrap();
    let renewed = events_until(&sub, &name, Renewed).await;
    assert_eq!(
        renewed.first().map(|e| e.kind),
        Some(Acquired),
        "{renewed:?}"
    );
    lease.release().await.unwrap();
    let rest = events_until(&sub, &name, Released).await;
    let life: Vec<_> = renewed.iter().chain(&rest).collect();
    let kinds: Vec<_> = life.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.first(), Some(&Acquired));
    assert_eq!(kinds.last(), Some(&Released));
    let middle = &kinds[1..kinds.len() - 1];
    assert!(middle.iter().all(|k| *k == Renewed), "{kinds:?}");
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
    let reason = last.reason.as_deref();
    assert!(
        reason.is_some_and(|r| r.contains("no longer ours")),
        "{last:?}"
    );
    let middle = &lost[1..lost.len() - 1];
    assert!(middle.iter().all(|e| e.kind == Renewed), "{lost:?}");
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
