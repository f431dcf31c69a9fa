//! Fencing tokens strictly increase per lock: across releases, across Lockers, and a token
//! identifies its lease.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::LockOptions;

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::contract;
use crate::support::unique;

contract!(
    tokens_strictly_increase_across_releases_and_lockers,
    tokens_are_floored_by_the_servers_clock
);

async fn tokens_strictly_increase_across_releases_and_lockers(target: Target) {
    let lockers = vec![target.locker().await, target.locker().await];
    let name = unique("tokens");
    let options = LockOptions::default().with_ttl(Duration::from_secs(30));
    let mut last = 0;
    for round in 0..6 {
        let locker = &lockers[round % lockers.len()];
        let lease = locker.acquire(&name, &options).await.unwrap();
        assert!(lease.token() > last, "{} after {last}", lease.token());
        assert!(lease.token() < 1 << 63);
        assert!(lease.is_held() && !lease.is_lost());
        last = lease.token();
        lease.release().await.unwrap();
        assert!(!lease.is_held());
    }
    close(lockers).await;
}

/// Where tokens are `max(counter + 1, server clock in µs)` (docs/design.md §3.1), a fresh
/// lock's token is the server's clock: within a minute of this machine's (the test servers run
/// on it).
async fn tokens_are_floored_by_the_servers_clock(target: Target) {
    let locker = target.locker().await;
    let lease = locker
        .acquire(
            &unique("clock"),
            &LockOptions::default().with_ttl(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(
        lease.token().abs_diff(now_us) < 60_000_000,
        "token {} is not near the clock {now_us}",
        lease.token()
    );
    lease.release().await.unwrap();
    locker.close().await;
}
