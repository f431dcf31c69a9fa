//! OpenTelemetry metrics of a Locker, off unless [`crate::LockerOptions::metrics`] turns them
//! on. Only the OpenTelemetry metrics API is used: the instruments come from the global meter
//! provider (`opentelemetry::global::meter("fencelock")`) when the Locker connects, so an
//! application that installed an SDK provider and exporter first gets them, and one that did
//! not pays for no-op instruments only.
//!
//! | instrument | kind | unit | attributes |
//! |---|---|---|---|
//! | `fencelock.acquire.duration` | histogram | s | `backend`: the round trip of the attempt that took the lock |
//! | `fencelock.acquire.wait` | histogram | s | `backend`: from the acquire call to the lock taken, queueing and waiting included |
//! | `fencelock.lease.hold` | histogram | s | `backend`, `outcome` (`released`, `lost`): how long a lease was held |
//! | `fencelock.acquisitions` | counter | | `backend` |
//! | `fencelock.renewals` | counter | | `backend`, `outcome` (`renewed`, `retried`) |
//! | `fencelock.losses` | counter | | `backend`, `reason` (`expired`, `taken_over`, `session_expired`) |

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

use crate::events::LockEventKind;
use crate::signal::LossReason;
use crate::url::BackendKind;

pub(crate) struct LockMetrics {
    acquire_duration: Histogram<f64>,
    acquire_wait: Histogram<f64>,
    hold: Histogram<f64>,
    acquisitions: Counter<u64>,
    renewals: Counter<u64>,
    losses: Counter<u64>,
    backend: KeyValue,
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
            acquire_duration: meter
                .f64_histogram("fencelock.acquire.duration")
                .with_unit("s")
                .with_description("Round trip of the acquire attempt that took the lock")
                .build(),
            acquire_wait: meter
                .f64_histogram("fencelock.acquire.wait")
                .with_unit("s")
                .with_description("Time from an acquire call to the lock taken, waiting included")
                .build(),
            hold: meter
                .f64_histogram("fencelock.lease.hold")
                .with_unit("s")
                .with_description("How long a lease was held, until released or lost")
                .build(),
            acquisitions: meter.u64_counter("fencelock.acquisitions").with_description("Locks taken").build(),
            renewals: meter
                .u64_counter("fencelock.renewals")
                .with_description("Renewals confirmed (outcome=renewed) or failed and retried (outcome=retried)")
                .build(),
            losses: meter.u64_counter("fencelock.losses").with_description("Leases lost, by reason").build(),
            backend: KeyValue::new("backend", backend.as_str()),
        }
    }

    /// A lock was taken: the winning attempt's round trip and the whole wait.
    pub fn acquired(&self, attempt: Duration, waited: Duration) {
        let attrs = std::slice::from_ref(&self.backend);
        self.acquisitions.add(1, attrs);
        self.acquire_duration.record(attempt.as_secs_f64(), attrs);
        self.acquire_wait.record(waited.as_secs_f64(), attrs);
    }

    /// A lease event (see [`crate::events`]); `held` is how long the lease has been held.
    pub fn lease_event(&self, kind: LockEventKind, loss: Option<LossReason>, held: Duration) {
        let backend = self.backend.clone();
        match kind {
            LockEventKind::Renewed => self.renewals.add(1, &[backend, KeyValue::new("outcome", "renewed")]),
            LockEventKind::RenewalRetried => self.renewals.add(1, &[backend, KeyValue::new("outcome", "retried")]),
            LockEventKind::Lost => {
                let reason = loss.map_or("unknown", loss_label);
                self.losses.add(1, &[backend.clone(), KeyValue::new("reason", reason)]);
                self.hold.record(held.as_secs_f64(), &[backend, KeyValue::new("outcome", "lost")]);
            }
            LockEventKind::Released => {
                self.hold.record(held.as_secs_f64(), &[backend, KeyValue::new("outcome", "released")]);
            }
            _ => {}
        }
    }
}
