//! The lease's own life on every backend, Redlock and Redis Cluster included: an extend to a
//! shorter ttl keeps the lease renewed, and the lost signal fires before anything observes the
//! loss, whatever those observers do.

#[macro_use]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::metrics::{Instrument, Measurement, MetricsSink};
use fencelock::{LockOptions, Locker, LockerOptions};
use support::unique;

on_all_backends!(
    an_extend_to_a_shorter_ttl_keeps_the_lease_renewed,
    a_panicking_metrics_sink_neither_delays_nor_loses_the_lost_signal,
);

/// The renewals follow the ttl an extend set: a 30 s lease extended to 2 s stays held for
/// several of the new ttls (it was reported lost 2 s after the extend, its renewal still due
/// at 10 s).
async fn an_extend_to_a_shorter_ttl_keeps_the_lease_renewed(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let name = unique("shorter");
    let lease = locker
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    lease.extend(Some(Duration::from_secs(2))).await.unwrap();
    let extended = Instant::now();
    while extended.elapsed() < Duration::from_secs(6) {
        assert!(
            lease.is_held(),
            "lost {:?} after an extend to 2 s: {:?}",
            extended.elapsed(),
            lease.lost_signal().reason()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lease.release().await.unwrap();
    locker.close().await;
}

/// A sink that panics on every loss it is told of.
struct PanicsOnLoss;

impl MetricsSink for PanicsOnLoss {
    fn record(&self, measurement: Measurement) {
        if measurement.instrument == Instrument::Losses {
            panic!("a metrics sink that panics on a loss");
        }
    }
}

/// The lost signal fires although the metrics sink panics when told of the loss, and the
/// process's deadline watchdog lives on: a second lease's loss is signalled too.
async fn a_panicking_metrics_sink_neither_delays_nor_loses_the_lost_signal(url: &str) {
    let options = LockerOptions::default().with_metrics_sink(Arc::new(PanicsOnLoss));
    let locker = Locker::connect_with(url, options).await.unwrap();
    let short = LockOptions::default()
        .with_ttl(Duration::from_millis(1500))
        .with_auto_renew(false);
    for round in 0..2 {
        let lease = locker
            .acquire(&unique(&format!("observed-{round}")), &short)
            .await
            .unwrap();
        // ZooKeeper's leases end with the session (a 2 s timeout in these tests), not the ttl.
        let fired = tokio::time::timeout(Duration::from_secs(20), lease.lost_signal().wait()).await;
        assert!(fired.is_ok(), "round {round}: the lost signal never fired");
    }
    locker.close().await;
}
