//! Waiting without sleeping: a Locker whose acquires report when they start waiting, so a test
//! releases a lock only once the other side is observably waiting for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fencelock::options::TestHook;
use fencelock::{LockOptions, Locker, LockerOptions};

/// Counts the times a Locker's acquire started waiting: the test hook's `waiting` point, where
/// the waiter, subscribed to release notices (or polling where it cannot be), failed its attempt
/// once more and sleeps until a notice or its next poll. A release from then on can only reach
/// it through the notice or the poll, which is what tests of wake-ups need.
#[derive(Debug, Default, Clone)]
pub struct WaitProbe {
    waits: Arc<AtomicUsize>,
}

impl WaitProbe {
    /// `options` with the hook that feeds this probe.
    pub fn install(&self, mut options: LockerOptions) -> LockerOptions {
        let seen = self.waits.clone();
        options.test_hook = Some(TestHook(Arc::new(move |point: &'static str| {
            if point == "waiting" {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        })));
        options
    }

    /// How many times an acquire of the probed Locker started waiting so far.
    pub fn waits(&self) -> usize {
        self.waits.load(Ordering::SeqCst)
    }

    /// Returns once an acquire of the probed Locker is waiting (more often than `before`), or
    /// once `observer` shows a waiter queued on `name` (ZooKeeper, whose waiters queue on the
    /// server): a release after this wakes a waiter, not a late arrival.
    pub async fn until_waiting_after(&self, before: usize, observer: &Locker, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.waits() > before {
                return;
            }
            if let Ok(info) = observer.inspect(name).await
                && !info.waiters.is_empty()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the waiter for {name:?} never started waiting"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// [`WaitProbe::until_waiting_after`] the probed Locker's first wait.
    pub async fn until_waiting(&self, observer: &Locker, name: &str) {
        self.until_waiting_after(0, observer, name).await
    }
}

/// A release wakes a waiter through the backend's notification (Redis pub/sub, PostgreSQL
/// NOTIFY): the waiter's fallback poll is a minute, so only the notification can hand the lock
/// over within seconds. Three hand-overs on `url`, each released once the waiter sleeps.
pub async fn a_release_wakes_a_slow_polling_waiter(url: &str) {
    let slow_poll = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
    let probe = WaitProbe::default();
    let holder = Locker::connect(url).await.unwrap();
    let waiter = Locker::connect_with(url, probe.install(slow_poll))
        .await
        .unwrap();
    let options = LockOptions::default().with_ttl(Duration::from_secs(30));
    for round in 0..3 {
        let name = crate::support::unique("woken");
        let lease = holder.acquire(&name, &options).await.unwrap();
        let before = probe.waits();
        let waiting = {
            let (waiter, name, options) = (waiter.clone(), name.clone(), options.clone());
            tokio::spawn(async move { waiter.acquire(&name, &options).await })
        };
        probe.until_waiting_after(before, &holder, &name).await;
        lease.release().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| panic!("{url}, round {round}: the waiter was not woken"))
            .unwrap()
            .unwrap();
        assert!(next.token() > lease.token());
        next.release().await.unwrap();
    }
    holder.close().await;
    waiter.close().await;
}
