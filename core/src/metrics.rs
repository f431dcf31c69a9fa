//! Metrics of a Locker, off unless [`crate::LockerOptions::metrics`] or
//! [`crate::LockerOptions::metrics_sink`] turns them on.
//!
//! With `metrics`, the instruments come from OpenTelemetry's global meter provider
//! (`opentelemetry::global::meter("fencelock")`) when the Locker connects: an application that
//! installed an SDK provider and exporter first gets them, one that did not pays for no-op
//! instruments only. With a [`MetricsSink`], every measurement goes to the sink instead: that is
//! how the Python, Node and JVM packages record into their own host's OpenTelemetry, with the
//! instruments of [`Instrument::ALL`] (one table for every language).
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `fencelock.acquire.duration` | histogram | s | `backend`: the round trip of the attempt that took the lock |
//! | `fencelock.acquire.wait` | histogram | s | `backend`: from the acquire call to the lock taken, queueing and waiting included |
//! | `fencelock.lease.hold` | histogram | s | `backend`, `outcome` (`released`, `lost`): how long a lease was held |
//! | `fencelock.acquisitions` | counter | | `backend` |
//! | `fencelock.renewals` | counter | | `backend`, `outcome` (`renewed`, `retried`) |
//! | `fencelock.losses` | counter | | `backend`, `reason` (`expired`, `taken_over`, `session_expired`) |

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

use crate::error::Result;
use crate::events::LockEventKind;
use crate::signal::LossReason;
use crate::url::BackendKind;

/// One of fencelock's instruments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instrument {
    AcquireDuration,
    AcquireWait,
    LeaseHold,
    Acquisitions,
    Renewals,
    Losses,
}

/// Whether an instrument adds up (counter) or records a distribution (histogram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrumentKind {
    Counter,
    Histogram,
}

impl Instrument {
    /// Every instrument, in a fixed order (bindings may number them by it).
    pub const ALL: [Instrument; 6] = [
        Instrument::AcquireDuration,
        Instrument::AcquireWait,
        Instrument::LeaseHold,
        Instrument::Acquisitions,
        Instrument::Renewals,
        Instrument::Losses,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Instrument::AcquireDuration => "fencelock.acquire.duration",
            Instrument::AcquireWait => "fencelock.acquire.wait",
            Instrument::LeaseHold => "fencelock.lease.hold",
            Instrument::Acquisitions => "fencelock.acquisitions",
            Instrument::Renewals => "fencelock.renewals",
            Instrument::Losses => "fencelock.losses",
        }
    }

    pub fn kind(self) -> InstrumentKind {
        match self {
            Instrument::AcquireDuration | Instrument::AcquireWait | Instrument::LeaseHold => {
                InstrumentKind::Histogram
            }
            Instrument::Acquisitions | Instrument::Renewals | Instrument::Losses => {
                InstrumentKind::Counter
            }
        }
    }

    /// The UCUM unit: seconds for the histograms, none for the counters.
    pub fn unit(self) -> &'static str {
        match self.kind() {
            InstrumentKind::Histogram => "s",
            InstrumentKind::Counter => "",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Instrument::AcquireDuration => "Round trip of the acquire attempt that took the lock",
            Instrument::AcquireWait => {
                "Time from an acquire call to the lock taken, waiting included"
            }
            Instrument::LeaseHold => "How long a lease was held, until released or lost",
            Instrument::Acquisitions => "Locks taken",
            Instrument::Renewals => {
                "Renewals confirmed (outcome=renewed) or failed and retried (outcome=retried)"
            }
            Instrument::Losses => "Leases lost, by reason",
        }
    }
}

/// One measurement: a counter increment or a histogram value (seconds), with its attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub instrument: Instrument,
    pub value: f64,
    /// `backend` first, then `outcome` or `reason` where the instrument has one.
    pub attributes: Vec<(&'static str, &'static str)>,
}

/// Where a Locker's measurements go when it has a sink. Called on the thread that measured
/// (often a runtime worker): a sink must return quickly and never block on the lock it measures.
/// [`on_own_thread`] makes one that hands each measurement to a thread of its own.
pub trait MetricsSink: Send + Sync {
    fn record(&self, measurement: Measurement);
}

/// A sink in [`crate::LockerOptions`]: compared by identity.
#[derive(Clone)]
pub struct MetricsSinkHandle(pub Arc<dyn MetricsSink>);

impl fmt::Debug for MetricsSinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricsSink")
    }
}

impl PartialEq for MetricsSinkHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MetricsSinkHandle {}

/// Measurements the sinks of [`on_own_thread`] dropped, process-wide.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many measurements the sinks of [`on_own_thread`] dropped because their queue was full
/// (a host that stopped taking them), in this process.
pub fn dropped_measurements() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// A sink that queues measurements (up to 4096; more are dropped, never waited for) and calls
/// `deliver` on a thread named `thread_name` with what has queued up (at least one, at most
/// 256: an acquire records three at once, so the host is entered once for them, not three
/// times). The thread ends when the sink is dropped. For bindings whose host may only be
/// entered from threads it can block (Python's GIL, a JVM callback): lock operations never wait
/// on the host's code.
pub fn on_own_thread(
    thread_name: &str,
    deliver: impl FnMut(&[Measurement]) + Send + 'static,
) -> Result<Arc<dyn MetricsSink>> {
    let queue = crate::delivery::on_own_thread(thread_name, "metrics", &DROPPED, deliver)?;
    Ok(Arc::new(QueuedSink { queue }))
}

struct QueuedSink {
    queue: crate::delivery::Queue<Measurement>,
}

impl MetricsSink for QueuedSink {
    fn record(&self, measurement: Measurement) {
        self.queue.push(measurement);
    }
}

/// OpenTelemetry instruments from one meter, one per [`Instrument`].
struct OtelInstruments {
    acquire_duration: Histogram<f64>,
    acquire_wait: Histogram<f64>,
    hold: Histogram<f64>,
    acquisitions: Counter<u64>,
    renewals: Counter<u64>,
    losses: Counter<u64>,
}

impl OtelInstruments {
    fn new(meter: &Meter) -> Self {
        let histogram = |i: Instrument| {
            meter
                .f64_histogram(i.name())
                .with_unit(i.unit())
                .with_description(i.description())
                .build()
        };
        let counter = |i: Instrument| {
            meter
                .u64_counter(i.name())
                .with_description(i.description())
                .build()
        };
        OtelInstruments {
            acquire_duration: histogram(Instrument::AcquireDuration),
            acquire_wait: histogram(Instrument::AcquireWait),
            hold: histogram(Instrument::LeaseHold),
            acquisitions: counter(Instrument::Acquisitions),
            renewals: counter(Instrument::Renewals),
            losses: counter(Instrument::Losses),
        }
    }

    fn record(&self, m: Measurement) {
        let attributes: Vec<KeyValue> = m
            .attributes
            .iter()
            .map(|(k, v)| KeyValue::new(*k, *v))
            .collect();
        let count = m.value as u64;
        match m.instrument {
            Instrument::AcquireDuration => self.acquire_duration.record(m.value, &attributes),
            Instrument::AcquireWait => self.acquire_wait.record(m.value, &attributes),
            Instrument::LeaseHold => self.hold.record(m.value, &attributes),
            Instrument::Acquisitions => self.acquisitions.add(count, &attributes),
            Instrument::Renewals => self.renewals.add(count, &attributes),
            Instrument::Losses => self.losses.add(count, &attributes),
        }
    }
}

enum Target {
    OpenTelemetry(OtelInstruments),
    Sink(Arc<dyn MetricsSink>),
}

/// A Locker's metrics: turns its lock life into [`Measurement`]s for its target.
pub(crate) struct LockMetrics {
    target: Target,
    backend: &'static str,
}

fn loss_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::TakenOver => "taken_over",
        LossReason::SessionExpired => "session_expired",
    }
}

impl LockMetrics {
    /// Instruments from the global meter provider.
    pub fn from_global(backend: BackendKind) -> Self {
        LockMetrics::new(&opentelemetry::global::meter("fencelock"), backend)
    }

    pub fn new(meter: &Meter, backend: BackendKind) -> Self {
        LockMetrics {
            target: Target::OpenTelemetry(OtelInstruments::new(meter)),
            backend: backend.as_str(),
        }
    }

    pub fn to_sink(sink: Arc<dyn MetricsSink>, backend: BackendKind) -> Self {
        LockMetrics {
            target: Target::Sink(sink),
            backend: backend.as_str(),
        }
    }

    fn emit(
        &self,
        instrument: Instrument,
        value: f64,
        extra: Option<(&'static str, &'static str)>,
    ) {
        let mut attributes = vec![("backend", self.backend)];
        attributes.extend(extra);
        let measurement = Measurement {
            instrument,
            value,
            attributes,
        };
        match &self.target {
            Target::OpenTelemetry(instruments) => instruments.record(measurement),
            Target::Sink(sink) => sink.record(measurement),
        }
    }

    /// A lock was taken: the winning attempt's round trip and the whole wait.
    pub fn acquired(&self, attempt: Duration, waited: Duration) {
        self.emit(Instrument::Acquisitions, 1.0, None);
        self.emit(Instrument::AcquireDuration, attempt.as_secs_f64(), None);
        self.emit(Instrument::AcquireWait, waited.as_secs_f64(), None);
    }

    /// A lease event (see [`crate::events`]); `held` is how long the lease has been held.
    pub fn lease_event(&self, kind: LockEventKind, loss: Option<LossReason>, held: Duration) {
        match kind {
            LockEventKind::Renewed => {
                self.emit(Instrument::Renewals, 1.0, Some(("outcome", "renewed")))
            }
            LockEventKind::RenewalRetried => {
                self.emit(Instrument::Renewals, 1.0, Some(("outcome", "retried")))
            }
            LockEventKind::Lost => {
                let reason = loss.map_or("unknown", loss_label);
                self.emit(Instrument::Losses, 1.0, Some(("reason", reason)));
                self.emit(
                    Instrument::LeaseHold,
                    held.as_secs_f64(),
                    Some(("outcome", "lost")),
                );
            }
            LockEventKind::Released => {
                self.emit(
                    Instrument::LeaseHold,
                    held.as_secs_f64(),
                    Some(("outcome", "released")),
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Collect(Mutex<Vec<Measurement>>);

    impl MetricsSink for Collect {
        fn record(&self, measurement: Measurement) {
            self.0.lock().unwrap().push(measurement);
        }
    }

    #[test]
    fn a_lease_life_becomes_measurements_with_the_backend_first() {
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let metrics = LockMetrics::to_sink(sink.clone(), BackendKind::Sqlite);
        metrics.acquired(Duration::from_millis(2), Duration::from_millis(5));
        metrics.lease_event(LockEventKind::Renewed, None, Duration::from_secs(1));
        metrics.lease_event(
            LockEventKind::Lost,
            Some(LossReason::TakenOver),
            Duration::from_secs(2),
        );
        let seen = sink.0.lock().unwrap();
        let names: Vec<_> = seen.iter().map(|m| m.instrument.name()).collect();
        assert_eq!(
            names,
            [
                "fencelock.acquisitions",
                "fencelock.acquire.duration",
                "fencelock.acquire.wait",
                "fencelock.renewals",
                "fencelock.losses",
                "fencelock.lease.hold"
            ]
        );
        assert!(
            seen.iter()
                .all(|m| m.attributes[0] == ("backend", "sqlite"))
        );
        assert_eq!(seen[4].attributes[1], ("reason", "taken_over"));
        assert_eq!(seen[5].value, 2.0);
    }

    #[test]
    fn the_table_is_complete_and_kinds_match_units() {
        let names: std::collections::HashSet<_> =
            Instrument::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), Instrument::ALL.len());
        for i in Instrument::ALL {
            assert_eq!(
                i.unit() == "s",
                i.kind() == InstrumentKind::Histogram,
                "{i:?}"
            );
            assert!(!i.description().is_empty());
        }
    }

    #[test]
    fn a_queued_sink_delivers_on_its_own_thread_and_survives_a_panicking_host() {
        let (seen, got) = std::sync::mpsc::channel();
        let sink = on_own_thread("fencelock-metrics-test", move |batch: &[Measurement]| {
            for m in batch {
                if m.value < 0.0 {
                    panic!("host failed");
                }
                let _ = seen.send((std::thread::current().name().map(str::to_string), m.value));
            }
        })
        .unwrap();
        let metrics = LockMetrics::to_sink(sink, BackendKind::Redis);
        metrics.emit(Instrument::Acquisitions, -1.0, None);
        // A panic loses its whole batch, which may hold the next measurements too: keep sending
        // until one arrives after it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let (thread, value) = loop {
            metrics.emit(Instrument::Acquisitions, 1.0, None);
            if let Ok(answer) = got.recv_timeout(Duration::from_millis(50)) {
                break answer;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nothing was delivered after the panic"
            );
        };
        assert_eq!(thread.as_deref(), Some("fencelock-metrics-test"));
        assert_eq!(value, 1.0);
    }
}
