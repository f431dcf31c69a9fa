//! OpenTelemetry spans: off by default; with `LockerOptions::tracing` on, acquires (waiting
//! included), extends, releases, fence writes and renewals show as spans of the global tracer
//! provider, the calls' spans children of the caller's span and the renewals root spans linked
//! to their acquire's. Read back through the SDK's in-memory exporter (a dev-dependency only).

use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{self, unique};
use fencelock::{Fence, LockOptions, Locker, LockerOptions, Statement};
use opentelemetry::trace::{FutureExt as _, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

/// One SDK provider for the test process, installed as the global one before any Locker
/// connects (its tracer is taken at connect).
fn exporter() -> &'static InMemorySpanExporter {
    static INSTALLED: OnceLock<InMemorySpanExporter> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider);
        exporter
    })
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> String {
    attribute(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

/// The finished spans about lock or fence resource `name`, once `ready` accepts them (spans
/// are reported when their operation ends, renewals from the runtime: polled, never slept for
/// a fixed time).
async fn spans_of(name: &str, ready: impl Fn(&[SpanData]) -> bool) -> Vec<SpanData> {
    let started = std::time::Instant::now();
    loop {
        let spans: Vec<SpanData> = exporter()
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .filter(|s| text(s, "fencelock.lock") == name || text(s, "fencelock.resource") == name)
            .collect();
        if ready(&spans) || started.elapsed() > Duration::from_secs(15) {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn named<'a>(spans: &'a [SpanData], span: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == span).collect()
}

/// The fence's store: a SQLite file of its own (any backend's tokens go to any fence).
fn fence_url() -> String {
    let dir = std::env::temp_dir().join(format!("fencelock-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("spans-data.db").display())
}

async fn a_lock_life_shows_in_the_spans(backend_name: &str) {
    exporter();
    let url = support::backend_url(backend_name);
    let tracing = LockerOptions::default().with_tracing(true);
    let locker = Locker::connect_with(&url, tracing.clone()).await.unwrap();
    let other = Locker::connect(&url).await.unwrap();
    let resource = unique("spans-fence");
    let fence = Fence::open_with(&fence_url(), &resource, tracing)
        .await
        .unwrap();
    let backend = locker.backend_kind().as_str();
    let name = unique("spans");
    let tracer = opentelemetry::global::tracer("spans-test");
    let request = tracer.start("request");
    let request_context = Context::current_with_span(request);
    let request_span = request_context.span().span_context().clone();

    let calls = async {
        let lease = locker
            .acquire(
                &name,
                &LockOptions::default().with_ttl(Duration::from_millis(900)),
            )
            .await
            .unwrap();
        let renewed = spans_of(&name, |s| named(s, "fencelock.renew").len() >= 2).await;
        assert!(
            named(&renewed, "fencelock.renew").len() >= 2,
            "{renewed:#?}"
        );
        lease.extend(None).await.unwrap();
        let create = [Statement::new("CREATE TABLE IF NOT EXISTS t (x)")];
        fence.fenced_execute(&lease, &create).await.unwrap();
        lease.release().await.unwrap();
        // A newer holder writes first: the older token is stale.
        let older = other.acquire(&name, &LockOptions::default()).await.unwrap();
        older.release().await.unwrap();
        let newer = locker
            .acquire(&name, &LockOptions::default())
            .await
            .unwrap();
        fence.fenced_execute(&newer, &[]).await.unwrap();
        let stale = fence.fenced_execute(older.token(), &[]).await;
        assert!(stale.is_err());
        // Held: a try-once acquire times out.
        let busy = locker
            .acquire(
                &name,
                &LockOptions::default().with_wait(Some(Duration::ZERO)),
            )
            .await;
        assert!(busy.is_err());
        newer.release().await.unwrap();
    };
    calls.with_context(request_context.clone()).await;
    request_context.span().end();

    let spans = spans_of(&name, |s| named(s, "fencelock.release").len() >= 2).await;
    let writes = spans_of(&resource, |s| s.len() >= 3).await;
    let acquires = named(&spans, "fencelock.acquire");
    // Three acquires of this Locker (the other Locker's is not traced).
    assert_eq!(acquires.len(), 3, "{spans:#?}");
    for span in &spans {
        if span.name != "fencelock.fence.write" {
            assert_eq!(text(span, "fencelock.backend"), backend);
        }
        if span.name != "fencelock.renew" {
            assert_eq!(span.parent_span_id, request_span.span_id(), "{span:#?}");
            assert_eq!(span.span_context.trace_id(), request_span.trace_id());
        }
    }
    let first = acquires[0];
    assert_eq!(text(first, "fencelock.outcome"), "acquired");
    assert_eq!(text(first, "fencelock.mode"), "exclusive");
    assert!(matches!(attribute(first, "fencelock.token"), Some(Value::I64(t)) if *t > 0));
    assert_eq!(text(acquires[2], "fencelock.outcome"), "timeout");
    for renewal in named(&spans, "fencelock.renew") {
        // A root span of its own trace, linked to the acquire that took the lease.
        assert_eq!(
            renewal.parent_span_id,
            opentelemetry::trace::SpanId::INVALID
        );
        assert_ne!(renewal.span_context.trace_id(), request_span.trace_id());
        assert_eq!(text(renewal, "fencelock.outcome"), "renewed");
        let linked: Vec<_> = renewal
            .links
            .links
            .iter()
            .map(|l| l.span_context.clone())
            .collect();
        assert_eq!(linked, vec![first.span_context.clone()], "{renewal:#?}");
    }
    let extends = named(&spans, "fencelock.extend");
    assert_eq!(extends.len(), 1);
    assert_eq!(text(extends[0], "fencelock.outcome"), "extended");
    let releases = named(&spans, "fencelock.release");
    assert!(
        releases
            .iter()
            .all(|s| text(s, "fencelock.outcome") == "released")
    );
    assert!(writes.iter().all(|s| s.name == "fencelock.fence.write"));
    assert!(
        writes
            .iter()
            .all(|s| s.parent_span_id == request_span.span_id())
    );
    let outcomes: Vec<String> = writes
        .iter()
        .map(|s| text(s, "fencelock.outcome"))
        .collect();
    assert_eq!(outcomes, ["accepted", "accepted", "stale"], "{writes:#?}");
    // The stale write's token came bare: only the leases' tokens name their lock.
    let locks: Vec<String> = writes.iter().map(|s| text(s, "fencelock.lock")).collect();
    assert_eq!(locks, [name.clone(), name.clone(), String::new()]);
    assert!(
        writes
            .iter()
            .all(|s| text(s, "fencelock.backend") == "sqlite")
    );
    locker.close().await;
    other.close().await;
    fence.close().await;
}

async fn spans_are_off_by_default(backend_name: &str) {
    exporter();
    let locker = Locker::connect(&support::backend_url(backend_name))
        .await
        .unwrap();
    let name = unique("spans-off");
    locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A traced Locker's span of the same kind, reported after this one's would have been.
    let traced = Locker::connect_with(
        &support::backend_url(backend_name),
        LockerOptions::default().with_tracing(true),
    )
    .await
    .unwrap();
    let marker = unique("spans-on");
    traced
        .acquire(&marker, &LockOptions::default())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    spans_of(&marker, |s| !named(s, "fencelock.release").is_empty()).await;
    assert!(spans_of(&name, |_| true).await.is_empty());
    locker.close().await;
    traced.close().await;
}

const BACKENDS: [&str; 5] = ["sqlite", "redis", "zookeeper", "postgres", "mariadb"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_life_shows_in_the_spans_of_each_backend() {
    for backend in BACKENDS {
        a_lock_life_shows_in_the_spans(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_off_by_default_on_each_backend() {
    for backend in BACKENDS {
        spans_are_off_by_default(backend).await;
    }
}
