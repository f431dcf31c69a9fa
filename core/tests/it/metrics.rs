//! OpenTelemetry metrics: off by default; with `LockerOptions::metrics` on, a lock's life shows
//! in the instruments of the global meter provider, with the backend as an attribute. Read back
//! through the SDK's in-memory exporter (the SDK is a dev-dependency only).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{self, unique};
use fencelock::{LockOptions, Locker, LockerOptions};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

struct Installed {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

/// One SDK provider for the test process, installed as the global one before any Locker
/// connects (instruments are taken from it at connect).
fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let exporter = InMemoryMetricExporter::default();
        let reader = PeriodicReader::builder(exporter.clone())
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        opentelemetry::global::set_meter_provider(provider.clone());
        Installed { provider, exporter }
    })
}

/// (instrument, attribute values joined) -> count (counters: sum; histograms: count).
fn snapshot(backend: &str) -> HashMap<(String, String), u64> {
    let installed = installed();
    installed.provider.force_flush().unwrap();
    let mut seen = HashMap::new();
    for resource in installed.exporter.get_finished_metrics().unwrap() {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                let name = metric.name().to_string();
                let mut add = |attrs: Vec<String>, n: u64| {
                    if attrs.iter().any(|a| a == &format!("backend={backend}")) {
                        let key = (name.clone(), attrs.join(","));
                        *seen.entry(key).or_insert(0) = n;
                    }
                };
                let label = |kv: &opentelemetry::KeyValue| format!("{}={}", kv.key, kv.value);
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        for p in sum.data_points() {
                            add(p.attributes().map(label).collect(), p.value());
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            add(p.attributes().map(label).collect(), p.count());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    seen
}

fn get(seen: &HashMap<(String, String), u64>, name: &str, must_have: &[&str]) -> u64 {
    seen.iter()
        .filter(|((n, attrs), _)| {
            n == name && must_have.iter().all(|m| attrs.split(',').any(|a| a == *m))
        })
        .map(|(_, v)| *v)
        .sum()
}

async fn a_lock_life_shows_in_the_metrics(url: &str) {
    installed();
    let locker = Locker::connect_with(url, LockerOptions::default().with_metrics(true))
        .await
        .unwrap();
    let operator = Locker::connect(url).await.unwrap();
    let backend = locker.backend_kind().as_str();
    let name = unique("metrics");
    let before = snapshot(backend);
    let lease = locker
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_millis(600)),
        )
        .await
        .unwrap();
    // Two renewals at ttl/3 (ZooKeeper: a third of its session), then a release.
    let subscription = locker.subscribe();
    let mut renewed = 0;
    while renewed < 2 {
        let event = tokio::time::timeout(Duration::from_secs(15), subscription.recv())
            .await
            .unwrap()
            .unwrap();
        if event.name == name && event.kind == fencelock::LockEventKind::Renewed {
            renewed += 1;
        }
    }
    lease.release().await.unwrap();
    let lost = locker
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    operator.force_release(&name).await.unwrap();
    tokio::time::timeout(Duration::from_secs(15), lost.lost_signal().wait())
        .await
        .unwrap();
    let b = format!("backend={backend}");
    let delta_in = |after: &HashMap<(String, String), u64>, name: &str, attrs: &[&str]| {
        let mut with = vec![b.as_str()];
        with.extend_from_slice(attrs);
        get(after, name, &with) - get(&before, name, &with)
    };
    // The lost signal fires before the loss is measured (observers come after the signal):
    // both of the loss's measurements are waited for.
    let started = std::time::Instant::now();
    let after = loop {
        let after = snapshot(backend);
        let measured = delta_in(&after, "fencelock.losses", &["reason=taken_over"]) >= 1
            && delta_in(&after, "fencelock.lease.hold", &["outcome=lost"]) >= 1;
        if measured || started.elapsed() > Duration::from_secs(10) {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let delta = |name: &str, attrs: &[&str]| delta_in(&after, name, attrs);
    assert_eq!(delta("fencelock.acquisitions", &[]), 2, "{after:?}");
    assert_eq!(delta("fencelock.acquire.duration", &[]), 2);
    assert_eq!(delta("fencelock.acquire.wait", &[]), 2);
    assert!(delta("fencelock.renewals", &["outcome=renewed"]) >= 2);
    assert_eq!(delta("fencelock.losses", &["reason=taken_over"]), 1);
    assert_eq!(delta("fencelock.lease.hold", &["outcome=released"]), 1);
    assert_eq!(delta("fencelock.lease.hold", &["outcome=lost"]), 1);
    locker.close().await;
    operator.close().await;
}

async fn metrics_are_off_by_default(url: &str) {
    installed();
    let locker = Locker::connect(url).await.unwrap();
    let backend = locker.backend_kind().as_str();
    let b = format!("backend={backend}");
    // The metrics-on test of the same backend may run meanwhile and adds exactly 2: this
    // Locker's 3 acquisitions, if counted, would add at least 3.
    let before = get(&snapshot(backend), "fencelock.acquisitions", &[&b]);
    for _ in 0..3 {
        locker
            .acquire(&unique("metrics-off"), &LockOptions::default())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let after = get(&snapshot(backend), "fencelock.acquisitions", &[&b]);
    assert!(
        after - before < 3,
        "acquisitions of a Locker without metrics were counted"
    );
    locker.close().await;
}

/// The backends whose metrics carry a `backend` attribute of their own (the Redis variants and
/// the lock contract itself are the conformance suite's).
const BACKENDS: [&str; 5] = ["sqlite", "redis", "zookeeper", "postgres", "mariadb"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_life_shows_in_the_metrics_of_each_backend() {
    for backend in BACKENDS {
        a_lock_life_shows_in_the_metrics(&support::backend_url(backend)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_off_by_default_on_each_backend() {
    for backend in BACKENDS {
        metrics_are_off_by_default(&support::backend_url(backend)).await;
    }
}
