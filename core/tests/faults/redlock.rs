//! Redlock scenarios that stop and restart masters, on five fresh masters of the test's own
//! ([`FreshMasters`]): a shared master restarted here would abstain for the default prefix's
//! clients, and the suites that run next would have to wait that out (about 32 s). Killing a
//! fresh master and spawning it again is what `tests/servers.sh stop|start` does to a shared
//! one: both run without persistence (`save ""`, `appendonly no`), so it comes back empty and
//! with a fresh uptime.
//!
//! A restarted master abstains for max_ttl + 2 x max_skew of whichever client asks, so the
//! scenarios run in one test, in order, each on a key prefix of its own whose stored max_ttl is
//! 3 s (max_skew 100 ms). The contention counter and its fence live on shared master 1, which is
//! never stopped. Master k in the comments is index k - 1 of the fresh ones.

use std::time::{Duration, Instant};

use crate::support::redlock::{check_workers, counter, opts, servers_up, spawn_workers};
use crate::support::{self, own_ports, test_path, unique};
use fencelock::{ErrorCode, Locker, LockerOptions};

/// What each scenario's own prefix stores: a restarted master abstains 3 s + 2 x 100 ms.
const SCENARIO_BOUND: Duration = Duration::from_millis(3_200);

/// The contention scenario's leases last 10 s, so its prefix stores 10 s: 10 s + 2 x 100 ms.
const CONTENTION_BOUND: Duration = Duration::from_millis(10_200);

fn scenario_url(masters: &FreshMasters, tag: &str, max_ttl: &str) -> String {
    let prefix = unique(&format!("rl-{tag}"));
    FreshMasters::url(
        &masters.hosts(),
        &format!("prefix={prefix}&max_ttl={max_ttl}&max_skew=100ms"),
    )
}

#[test]
fn masters_stopped_and_restarted() {
    // Shared master 1 keeps the contention counter and its fence.
    if !servers_up() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let mut masters = rt.block_on(FreshMasters::start(5, &[0, 1, 2, 3, 4]));
    two_masters_stopped_mid_run_keep_the_lock_exclusive_and_live(&rt, &mut masters);
    eprintln!("scenario 1 done at {:?}", started.elapsed());
    rt.block_on(three_masters_stopped_means_unavailable_never_a_false_success(&mut masters));
    eprintln!("scenario 2 done at {:?}", started.elapsed());
    rt.block_on(a_restarted_master_abstains_until_its_uptime_passes_the_bound(&mut masters));
    eprintln!("scenario 3 done at {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_worker() {
    support::redlock::worker().await;
}

/// Issue 4: 8 contenders x 200 in two processes; two of the five masters are stopped
/// mid-run. Still exclusive (the fenced counter is exact, tokens increase in grant order)
/// and still live (every section completes).
fn two_masters_stopped_mid_run_keep_the_lock_exclusive_and_live(
    rt: &tokio::runtime::Runtime,
    masters: &mut FreshMasters,
) {
    // The masters just started: every one must vote before the run, as the long-running
    // shared ones did, so that the stop alone is what the run goes through.
    rt.block_on(masters.wait_until_voting(CONTENTION_BOUND));
    let name = unique("rl-faults-contention");
    let key = format!("fencelock-test:{}", unique("rl-faults-counter"));
    let spec = format!(
        "{}|{name}|{key}|4|200",
        scenario_url(masters, "contention", "10s")
    );
    let started = Instant::now();
    let workers = spawn_workers(&test_path(module_path!(), "contention_worker"), &spec, 2);
    rt.block_on(async {
        while counter(&key).await < 400 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no progress before the stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    masters.kill(3);
    masters.kill(4);
    let stopped_at = rt.block_on(counter(&key));
    check_workers(workers, 1600);
    eprintln!(
        "redlock contention, 2 of 5 masters stopped after {stopped_at} sections: 1600 critical sections in {:?}",
        started.elapsed()
    );
}

/// With three of five masters stopped there is no majority: acquire fails with UNAVAILABLE
/// by its deadline and never succeeds; a lease held when they stop is lost by its deadline.
async fn three_masters_stopped_means_unavailable_never_a_false_success(masters: &mut FreshMasters) {
    masters.spawn_stopped().await;
    masters.wait_until_voting(SCENARIO_BOUND).await;
    let url = scenario_url(masters, "no-quorum", "3s");
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
    masters.kill(2);
    masters.kill(3);
    masters.kill(4);
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
    // process start, which is before `spawn` returns (that waits for readiness, up to seconds
    // on a loaded machine), so the bound is measured from before the spawn.
    let restarted = Instant::now();
    masters.spawn(2).await;
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
async fn a_restarted_master_abstains_until_its_uptime_passes_the_bound(masters: &mut FreshMasters) {
    masters.spawn_stopped().await;
    masters.wait_until_voting(SCENARIO_BOUND).await;
    let url = scenario_url(masters, "restart", "3s");
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
    masters.kill(1);
    masters.kill(2);
    for _ in 0..10 {
        cycle(&mut tokens, expected_to_succeed).await.unwrap();
    }
    // Master 2 comes back empty; master 4 goes: the live ones are 1, 2 and 5, and 2 may not
    // vote yet, so there is no majority until its uptime passes the bound.
    let restart_invoked = Instant::now();
    masters.spawn(1).await;
    masters.kill(3);
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

/// Fresh Redis masters of this test's own (the shared ones stay untouched), on ports of its
/// own ([`own_ports`]), each listening on 127.0.0.1 and on the alias 127.0.0.2; killed when dropped.
struct FreshMasters {
    dir: tempfile::TempDir,
    children: Vec<Option<std::process::Child>>,
    ports: Vec<u16>,
}

impl FreshMasters {
    /// Reserves `n` ports and starts the masters in `now`.
    async fn start(n: usize, now: &[usize]) -> FreshMasters {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-fresh-masters-")
            .tempdir()
            .unwrap();
        let ports = own_ports(n);
        let mut masters = FreshMasters {
            dir,
            children: (0..n).map(|_| None).collect(),
            ports,
        };
        for &i in now {
            masters.spawn(i).await;
        }
        masters
    }

    async fn spawn(&mut self, i: usize) {
        let port = self.ports[i];
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1 127.0.0.2"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dbfilename", &format!("{port}.rdb")])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        self.children[i] = Some(child);
        let url = format!("redis://127.0.0.1:{port}");
        let started = Instant::now();
        while redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{url} did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Spawns again every master that is not running.
    async fn spawn_stopped(&mut self) {
        for i in 0..self.children.len() {
            if self.children[i].is_none() {
                self.spawn(i).await;
            }
        }
    }

    /// Each running master's `uptime_in_seconds` (`None` where it does not answer).
    async fn uptimes(&self) -> Vec<Option<u64>> {
        let mut out = Vec::new();
        for (i, child) in self.children.iter().enumerate() {
            if child.is_none() {
                continue;
            }
            let url = format!("redis://127.0.0.1:{}", self.ports[i]);
            let up = async {
                let client = redis::Client::open(url.as_str()).ok()?;
                let mut c = client.get_multiplexed_async_connection().await.ok()?;
                let info: String = redis::cmd("INFO")
                    .arg("server")
                    .query_async(&mut c)
                    .await
                    .ok()?;
                info.lines()
                    .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
                    .and_then(|v| v.trim().parse().ok())
            };
            out.push(
                tokio::time::timeout(Duration::from_secs(2), up)
                    .await
                    .ok()
                    .flatten(),
            );
        }
        out
    }

    /// Waits until every running master has been up for at least `bound`: then none abstains
    /// for clients whose max_ttl + 2 x max_skew is at most `bound`.
    async fn wait_until_voting(&self, bound: Duration) {
        let started = Instant::now();
        loop {
            let up = self.uptimes().await;
            if up
                .iter()
                // As the core judges it: a reported uptime may be a second above the true one.
                .all(|u| u.is_some_and(|u| u as f64 >= bound.as_secs_f64() + 1.0))
            {
                return;
            }
            assert!(
                started.elapsed() < bound + Duration::from_secs(60),
                "fresh masters not all up: {up:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `hosts`: the masters' spellings, e.g. `127.0.0.1:P` (see [`FreshMasters::host`]).
    fn url(hosts: &[String], query: &str) -> String {
        let sep = if query.is_empty() { "" } else { "?" };
        format!("redlock://{}{sep}{query}", hosts.join(","))
    }

    fn host(&self, i: usize, ip: &str) -> String {
        format!("{ip}:{}", self.ports[i])
    }

    fn hosts(&self) -> Vec<String> {
        (0..self.ports.len())
            .map(|i| self.host(i, "127.0.0.1"))
            .collect()
    }
}

impl Drop for FreshMasters {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// One master listed twice under two addresses (127.0.0.1 and 127.0.0.2 reach the same
/// process) is told apart by its run_id: refused at connect when it answers then, left out of
/// quorums when it first answers later, so its vote never counts twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_listed_twice_under_two_addresses_votes_once() {
    if !servers_up() {
        return;
    }
    let query = "max_ttl=2s&max_skew=100ms";
    let mut masters = FreshMasters::start(4, &[0, 1, 2]).await;
    let aliased = |m: &FreshMasters| {
        let mut hosts = m.hosts();
        hosts.push(m.host(3, "127.0.0.2"));
        hosts
    };
    // Both listings answer at connect: INVALID_ARGUMENT.
    let twice = vec![
        masters.host(0, "127.0.0.1"),
        masters.host(0, "127.0.0.2"),
        masters.host(1, "127.0.0.1"),
    ];
    let err = Locker::connect(&FreshMasters::url(&twice, query))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert!(err.message().contains("same server"), "{err}");
    // Master 3 is down at connect (3 of 5 answer), then starts: both of its listings answer.
    let locker = Locker::connect(&FreshMasters::url(&aliased(&masters), query))
        .await
        .unwrap();
    masters.spawn(3).await;
    let name = unique("rl-alias");
    let lease = locker
        .acquire(&name, &opts(1_500).with_wait(Some(Duration::from_secs(20))))
        .await
        .unwrap();
    lease.release().await.unwrap();
    // Only master 2 and master 3 (twice) are left: two servers, not the three votes a quorum
    // of five needs.
    masters.kill(0);
    masters.kill(1);
    let err = locker
        .acquire(&name, &opts(1_500).with_wait(Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
}

/// Freshly started masters abstain for max_ttl + 2 x max_skew (here 5 s + 2 x 100 ms, plus up
/// to a second of uptime rounding): an acquire whose wait covers that waits for them, one whose
/// wait does not fails at once saying how long they still abstain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_waits_through_the_abstention_of_fresh_masters_when_its_wait_allows() {
    waits_through_abstention("max_ttl=5s&max_skew=100ms", Duration::from_millis(5_200)).await;
}

/// The same with the default max_ttl and max_skew (the masters vote about 61 s after their
/// start): the soak profile's (tests/faults/rust-scenarios.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: about 62 s"]
async fn soak_an_acquire_waits_through_the_default_abstention() {
    waits_through_abstention("", Duration::from_secs(61)).await;
}

async fn waits_through_abstention(query: &str, bound: Duration) {
    if !servers_up() {
        return;
    }
    let masters = FreshMasters::start(3, &[0, 1, 2]).await;
    let started = Instant::now();
    let locker = Locker::connect(&FreshMasters::url(&masters.hosts(), query))
        .await
        .unwrap();
    let name = unique("rl-fresh");
    // Too short a wait: UNAVAILABLE now, not after the operation timeout, with how long.
    let short = Instant::now();
    let err = locker
        .acquire(&name, &opts(2_000).with_wait(Some(Duration::from_secs(1))))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    assert!(err.message().contains("voting in"), "{err}");
    assert!(
        short.elapsed() < Duration::from_secs(2),
        "{:?}",
        short.elapsed()
    );
    let err = locker.try_acquire(&name, &opts(2_000)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    // A wait longer than the abstention: the acquire waits and succeeds.
    let lease = locker
        .acquire(
            &name,
            &opts(2_000).with_wait(Some(bound + Duration::from_secs(25))),
        )
        .await
        .unwrap();
    let after = started.elapsed();
    assert!(
        after >= bound && after < bound + Duration::from_secs(10),
        "acquired {after:?} after the masters started (bound {bound:?})"
    );
    lease.release().await.unwrap();
    eprintln!("fresh masters voted after {after:?}");
}

/// Masters that restarted and lost the stored max_ttl do not make Lockers disagree on it: a
/// Locker that connects to them alone starts from its URL's smaller value, and learns the
/// larger one as soon as a Locker that knows it has acquired (which writes it back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_converge_on_the_largest_max_ttl_after_masters_lost_it() {
    if !servers_up() {
        return;
    }
    let mut masters = FreshMasters::start(3, &[0, 1, 2]).await;
    let url = |max_ttl: &str| {
        FreshMasters::url(
            &masters.hosts(),
            &format!("max_ttl={max_ttl}&max_skew=100ms"),
        )
    };
    let (knows, newcomer) = (url("4s"), url("2s"));
    let old = Locker::connect(&knows).await.unwrap();
    // Every master restarts empty; the third stays down.
    for i in 0..3 {
        masters.kill(i);
    }
    masters.spawn(0).await;
    masters.spawn(1).await;
    let new = Locker::connect(&newcomer).await.unwrap();
    let name = unique("rl-max-ttl");
    let long = opts(3_000).with_wait(Some(Duration::from_secs(20)));
    assert_eq!(
        new.acquire(&name, &long).await.unwrap_err().code(),
        ErrorCode::InvalidArgument,
        "a 3 s ttl is above the 2 s the newcomer started from"
    );
    // The Locker that knows 4 s acquires (waiting out the restarted masters' abstention),
    // which writes 4 s back; the newcomer learns it with its next acquire.
    old.acquire(&name, &long)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    new.acquire(&name, &opts(1_500).with_wait(Some(Duration::from_secs(20))))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let lease = new.acquire(&name, &long).await.unwrap();
    lease.release().await.unwrap();
}
