//! The core's bookkeeping holds only live leases: the process's deadline watchdog, a Locker's
//! renewal schedule and its map of the leases it releases on close. A test binary of its own, because the
//! watchdog is one per process and other tests' leases would count.

use std::time::{Duration, Instant};

use fencelock::internals::watchdog_entries;
use fencelock::{Lease, LockOptions, Locker};

/// The most entries the watchdog, or a renewal schedule, may hold beyond the live leases (their
/// pruning slack).
const SLACK: usize = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_cycles_and_lost_leases_leave_only_live_leases_tracked() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let locker = Locker::connect(&url).await.unwrap();
    let hour = LockOptions::default().with_ttl(Duration::from_secs(3600));

    let mut live: Vec<Lease> = Vec::new();
    for i in 0..10 {
        live.push(locker.acquire(&format!("kept-{i}"), &hour).await.unwrap());
    }
    // Released leases whose deadlines are an hour away.
    for _ in 0..10_000 {
        let lease = locker.acquire("cycle", &hour).await.unwrap();
        lease.release().await.unwrap();
    }
    assert_eq!(locker.tracked_leases(), live.len());
    let entries = watchdog_entries();
    assert!(
        entries <= live.len() + SLACK,
        "the watchdog holds {entries} deadlines for {} live leases",
        live.len()
    );
    let scheduled = locker.renewal_entries();
    assert!(
        (live.len()..=live.len() + SLACK).contains(&scheduled),
        "the renewal schedule holds {scheduled} entries for {} live leases",
        live.len()
    );

    // Leases lost (short ttl, no renewal) and then dropped without release.
    let short = LockOptions::default()
        .with_ttl(Duration::from_millis(300))
        .with_auto_renew(false);
    let mut lost = Vec::new();
    for i in 0..50 {
        lost.push(locker.acquire(&format!("lost-{i}"), &short).await.unwrap());
    }
    let started = Instant::now();
    while !lost.iter().all(Lease::is_lost) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the leases were never lost"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(lost);
    assert_eq!(locker.tracked_leases(), live.len());
    assert!(live.iter().all(Lease::is_held));

    // Released and dropped: nothing tracked, and the map empties on close.
    for lease in live.drain(..) {
        lease.release().await.unwrap();
    }
    assert_eq!(locker.tracked_leases(), 0);
    locker.close().await;
}
