//! Redlock scenarios that stop and restart masters (tests/servers.sh stop|start redlock-N).
//!
//! A restarted master abstains for max_ttl + 2 x max_skew of whichever client asks, so the
//! scenarios run in one test, in order, each on a key prefix of its own whose stored max_ttl is
//! 3 s (max_skew 100 ms), and the test ends by starting every master again and waiting until
//! none abstains for the clients of the default prefix (the test URL's max_ttl is 30 s, the default ttl), so the
//! suites that run next find five voting masters. Master 1 (7001) is never stopped: the
//! contention counter lives there.

#[path = "support/redlock.rs"]
mod redlock_support;
mod support;

use std::time::{Duration, Instant};

use fencelock::{ErrorCode, Locker, LockerOptions};
use redlock_support::{
    base_url, check_workers, counter, default_abstention, opts, servers_async, servers_up,
    spawn_workers, wait_until_voting, with,
};
use support::{servers, unique};

/// What each scenario's own prefix stores: a restarted master abstains 3 s + 2 x 100 ms
/// (the contention scenario's leases last 10 s, so it stores 10 s).
const SCENARIO_BOUND: Duration = Duration::from_millis(3_200);

fn scenario_url(tag: &str, max_ttl: &str) -> String {
    let prefix = unique(&format!("rl-{tag}"));
    with(
        &base_url(),
        &format!("prefix={prefix}&max_ttl={max_ttl}&max_skew=100ms"),
    )
}

/// Starts every master again when the test ends, passed or failed, and waits until none
/// abstains for the default prefix's clients.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        servers(&["start", "redlock"]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async { wait_until_voting(default_abstention().await).await });
    }
}

#[test]
fn masters_stopped_and_restarted() {
    if !servers_up() {
        return;
    }
    let _restore = Restore;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    two_masters_stopped_mid_run_keep_the_lock_exclusive_and_live(&rt);
    eprintln!("scenario 1 done at {:?}", started.elapsed());
    rt.block_on(three_masters_stopped_means_unavailable_never_a_false_success());
    eprintln!("scenario 2 done at {:?}", started.elapsed());
    rt.block_on(a_restarted_master_abstains_until_its_uptime_passes_the_bound());
    eprintln!("scenario 3 done at {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_worker() {
    redlock_support::worker().await;
}

/// Issue 4: 8 contenders x 200 in two processes; two of the five masters are stopped
/// mid-run. Still exclusive (the fenced counter is exact, tokens increase in grant order)
/// and still live (every section completes).
fn two_masters_stopped_mid_run_keep_the_lock_exclusive_and_live(rt: &tokio::runtime::Runtime) {
    rt.block_on(wait_until_voting(SCENARIO_BOUND));
    let name = unique("rl-faults-contention");
    let key = format!("fencelock-test:{}", unique("rl-faults-counter"));
    let spec = format!("{}|{name}|{key}|4|200", scenario_url("contention", "10s"));
    let started = Instant::now();
    let workers = spawn_workers("contention_worker", &spec, 2);
    rt.block_on(async {
        while counter(&key).await < 400 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no progress before the stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    servers(&["stop", "redlock-4", "redlock-5"]);
    let stopped_at = rt.block_on(counter(&key));
    check_workers(workers, 1600);
    eprintln!(
        "redlock contention, 2 of 5 masters stopped after {stopped_at} sections: 1600 critical sections in {:?}",
        started.elapsed()
    );
}

/// With three of five masters stopped there is no majority: acquire fails with UNAVAILABLE
/// by its deadline and never succeeds; a lease held when they stop is lost by its deadline.
async fn three_masters_stopped_means_unavailable_never_a_false_success() {
    servers_async(&["start", "redlock"]).await;
    wait_until_voting(SCENARIO_BOUND).await;
    let url = scenario_url("no-quorum", "3s");
    let options = LockerOptions::default().with_operation_timeout(Duration::from_secs(3));
    let locker = Locker::connect_with(&url, options).await.unwrap();
    let ttl = Duration::from_millis(2_000);
    let held = locker
        .acquire(
            &unique("rl-held"),
            &fencelock::LockOptions::default().with_ttl(ttl),
        )
        .await
        .unwrap();
    servers_async(&["stop", "redlock-3", "redlock-4", "redlock-5"]).await;
    let stopped = Instant::now();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(2), held.lost_signal().wait()).await;
    assert!(lost.is_ok(), "the held lease was not lost by its deadline");
    assert!(
        stopped.elapsed() <= ttl + Duration::from_secs(1),
        "lost only after {:?}",
        stopped.elapsed()
    );
    let name = unique("rl-no-quorum");
    for wait in [Duration::ZERO, Duration::from_millis(1500)] {
        let started = Instant::now();
        let err = locker
            .acquire(&name, &opts(3_000).with_wait(Some(wait)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
        assert!(err.message().contains("no quorum"), "{err}");
        assert!(
            started.elapsed() < wait + Duration::from_secs(1),
            "took {:?} for a wait of {wait:?}",
            started.elapsed()
        );
    }
    // Waiting forever still ends: the backend failing for operation_timeout is an error.
    let started = Instant::now();
    let err = locker.acquire(&name, &opts(3_000)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3) + Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    // A connect with three of five down has no quorum either.
    let err = Locker::connect(&url).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    // One master back: a majority again once it stops abstaining. Its uptime counts from its
    // process start, which is before `start` returns (that waits for readiness, up to seconds
    // on a loaded machine), so the bound is measured from before the start is invoked.
    let restarted = Instant::now();
    servers_async(&["start", "redlock-3"]).await;
    // (The default operation_timeout, 10 s, outlasts the abstention; 3 s would not.)
    let locker = Locker::connect(&url).await.unwrap();
    let lease = locker
        .acquire(&name, &opts(2_000).with_wait(Some(Duration::from_secs(15))))
        .await
        .unwrap();
    assert!(
        restarted.elapsed() >= SCENARIO_BOUND,
        "master 3 voted before its abstention ended"
    );
    lease.release().await.unwrap();
}

/// A master stopped and restarted mid-run abstains until its uptime passes max_ttl + 2 x
/// max_skew (here 3 s + 2 x 100 ms), then votes again; tokens increase throughout.
async fn a_restarted_master_abstains_until_its_uptime_passes_the_bound() {
    servers_async(&["start", "redlock"]).await;
    wait_until_voting(SCENARIO_BOUND).await;
    let url = scenario_url("restart", "3s");
    let locker = Locker::connect(&url).await.unwrap();
    let name = unique("rl-restart");
    let mut tokens = Vec::new();
    // `wait`: zero where a refusal is the point; elsewhere up to a ttl, for a release that did
    // not reach every master on a loaded machine (its key then lives out its 1.5 s ttl).
    let cycle = async |tokens: &mut Vec<u64>, wait: Duration| -> fencelock::Result<()> {
        let lease = locker
            .acquire(&name, &opts(1_500).with_wait(Some(wait)))
            .await?;
        tokens.push(lease.token());
        lease.release().await
    };
    let expected_to_succeed = Duration::from_secs(3);
    for _ in 0..10 {
        cycle(&mut tokens, expected_to_succeed).await.unwrap();
    }
    servers_async(&["stop", "redlock-2", "redlock-3"]).await;
    for _ in 0..10 {
        cycle(&mut tokens, expected_to_succeed).await.unwrap();
    }
    // Master 2 comes back empty; master 4 goes: the live ones are 1, 2 and 5, and 2 may not
    // vote yet, so there is no majority until its uptime passes the bound.
    let restart_invoked = Instant::now();
    servers_async(&["start", "redlock-2"]).await;
    servers_async(&["stop", "redlock-4"]).await;
    let bound = SCENARIO_BOUND;
    let mut refused = 0;
    let back = loop {
        match cycle(&mut tokens, Duration::ZERO).await {
            Ok(()) => break restart_invoked.elapsed(),
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::Unavailable, "{e}");
                refused += 1;
                assert!(
                    restart_invoked.elapsed() < Duration::from_secs(20),
                    "master 2 never voted again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(
        refused > 0,
        "no attempt was refused while master 2 abstained"
    );
    assert!(
        back >= bound,
        "master 2 voted {back:?} after its restart began, before the bound of {bound:?}"
    );
    for _ in 0..10 {
        cycle(&mut tokens, expected_to_succeed).await.unwrap();
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens went backwards: {tokens:?}"
    );
    eprintln!(
        "master 2 abstained: {refused} attempts refused, voting again {back:?} after the restart began"
    );
}
