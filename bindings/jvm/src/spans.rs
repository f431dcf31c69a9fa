//! `ConnectOptions(tracing = true)` and `Fence.open(..., ConnectOptions(tracing = true))`: the
//! core's spans handed to the Kotlin layer, which makes them through OpenTelemetry's Java API
//! (`Tracing.kt`), and the caller each call carries into the core for its spans and its log
//! records.
//!
//! The Kotlin layer numbers the context of each call it makes while something wants one (its
//! OpenTelemetry `Context`, its MDC) and sets the number here ([`set_caller`]) just before the
//! native call, on the calling thread; the call takes it in its synchronous part (uniffi polls
//! an async call first on the calling thread, and the blocking calls start there), so the
//! operation runs with it. Records come back with the number: the span's
//! parent, and the MDC the log record is logged under.

use std::sync::Arc;

use fencelock::spans::{AttributeValue, SpanKind, SpanRecord, SpanSink, numbered};

use crate::error::NativeError;

/// Sets the caller of the next native call made on this thread (0: none); the call takes it
/// in its synchronous part (`fencelock::spans::numbered`).
#[uniffi::export]
pub fn set_caller(caller: u32) {
    numbered::set(caller);
}

/// One finished operation, as the Kotlin layer makes it a span.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeSpan {
    /// The span's name (the core's table: `fencelock.acquire`, ...).
    pub name: String,
    /// Text attributes as alternating keys and values (`fencelock.backend`, `fencelock.lock`,
    /// `fencelock.outcome`, ...).
    pub attributes: Vec<String>,
    /// `fencelock.token` (tokens stay below 2^63 on every backend).
    pub token: Option<i64>,
    /// The error code of an `error` outcome: the span's status is an error.
    pub error_code: Option<String>,
    /// A renewal: a root span, linked to the acquire of the same `lease`.
    pub renewal: bool,
    /// The acquire that took lease `lease`: renewals of it link to this span.
    pub takes_lease: bool,
    /// The lease ended (released or lost): forget its acquire.
    pub ends_lease: bool,
    pub lease: u64,
    /// The caller's number (0: none).
    pub caller: u32,
    pub start_nanos: i64,
    pub end_nanos: i64,
}

fn epoch_nanos(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

impl From<&SpanRecord> for NativeSpan {
    fn from(r: &SpanRecord) -> Self {
        let mut attributes = Vec::new();
        let mut token = None;
        for (key, value) in r.attributes() {
            match value {
                AttributeValue::Text(text) => {
                    attributes.extend([key.to_string(), text.to_string()])
                }
                AttributeValue::Owned(text) => attributes.extend([key.to_string(), text]),
                AttributeValue::Int(number) => token = Some(number),
            }
        }
        NativeSpan {
            name: r.kind.name().to_string(),
            attributes,
            token,
            error_code: r.error_code.map(str::to_string),
            renewal: r.kind == SpanKind::Renewal,
            takes_lease: r.takes_lease(),
            ends_lease: r.ends_lease(),
            lease: r.lease,
            caller: numbered::number(r.caller.as_ref()),
            start_nanos: epoch_nanos(r.start),
            end_nanos: epoch_nanos(r.end),
        }
    }
}

/// Receives the spans that queued up since its last call.
#[uniffi::export(callback_interface)]
pub trait NativeSpanSink: Send + Sync {
    fn record(&self, spans: Vec<NativeSpan>);
}

pub(crate) fn jvm_sink(sink: Box<dyn NativeSpanSink>) -> Result<Arc<dyn SpanSink>, NativeError> {
    Ok(fencelock::spans::on_own_thread(
        "fencelock-spans",
        move |batch: &[SpanRecord]| sink.record(batch.iter().map(NativeSpan::from).collect()),
    )?)
}
