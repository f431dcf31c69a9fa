//! `connect(url, { tracing: true })` and `Fence.open(..., { tracing: true })`: the core's spans
//! handed to `index.js`, which makes them through OpenTelemetry's JS API (`@opentelemetry/api`),
//! and the caller each call carries into the core for its spans and its log records.
//!
//! `index.js` numbers the context of each call it makes while something wants one (tracing on,
//! or a logger set): it keeps OpenTelemetry's active context and an `AsyncLocalStorage`
//! snapshot under that number, and sets it here ([`set_caller`]) around the native call, whose
//! promise runs the operation with it. Records come back with the number, and
//! `index.js` makes their spans under that context and calls the logger in that snapshot.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock::spans::{AttributeValue, SpanKind, SpanRecord, SpanSink, numbered};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::error::{Result, from_napi};
use crate::observe::JS_QUEUE;

/// Sets the caller of the next native call made on this (the JS) thread (0: none); the call's
/// promise takes it (`fencelock::spans::numbered`).
#[napi(js_name = "setCaller")]
pub fn set_caller(caller: u32) {
    numbered::set(caller);
}

/// One finished operation, as `index.js` makes it a span.
#[napi(object)]
pub struct NativeSpan {
    /// The span's name (the core's table: `fencelock.acquire`, ...).
    pub name: String,
    /// Text attributes (`fencelock.backend`, `fencelock.lock`, `fencelock.outcome`, ...).
    pub attributes: HashMap<String, String>,
    /// `fencelock.token`, as decimal text (it may exceed 2^53).
    pub token: Option<String>,
    /// The error code of an `error` outcome: the span's status is an error.
    pub error_code: Option<String>,
    /// A renewal: a root span, linked to the acquire of the same `lease`.
    pub renewal: bool,
    /// The acquire that took lease `lease`: renewals of it link to this span.
    pub takes_lease: bool,
    /// The lease ended (released or lost): forget its acquire.
    pub ends_lease: bool,
    pub lease: f64,
    /// The caller's number (0: none).
    pub caller: u32,
    /// Start and end as [seconds, nanoseconds] since the epoch (OpenTelemetry's HrTime).
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

fn hr_time(at: SystemTime) -> Vec<f64> {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    vec![since.as_secs() as f64, f64::from(since.subsec_nanos())]
}

impl From<&SpanRecord> for NativeSpan {
    fn from(r: &SpanRecord) -> Self {
        let mut attributes = HashMap::new();
        let mut token = None;
        for (key, value) in r.attributes() {
            match value {
                AttributeValue::Text(text) => {
                    attributes.insert(key.to_string(), text.to_string());
                }
                AttributeValue::Owned(text) => {
                    token = Some(text);
                }
                AttributeValue::Int(number) => {
                    token = Some(number.to_string());
                }
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
            lease: r.lease as f64,
            caller: numbered::number(r.caller.as_ref()),
            start: hr_time(r.start),
            end: hr_time(r.end),
        }
    }
}

/// A sink that calls `callback` on the JS thread with each span. Weak: it does not keep the
/// process alive. As the metrics sink: the core's queue drops spans past 4096 (counted in
/// `droppedSpans()`), and lock operations never wait for the JS thread.
pub(crate) fn js_sink(callback: Function<'_, NativeSpan, ()>) -> Result<Arc<dyn SpanSink>> {
    let deliver = callback
        .build_threadsafe_function::<NativeSpan>()
        .callee_handled::<false>()
        .weak::<true>()
        .max_queue_size::<JS_QUEUE>()
        .build()
        .map_err(from_napi)?;
    fencelock::spans::on_own_thread("fencelock-spans", move |batch: &[SpanRecord]| {
        for record in batch {
            deliver.call(
                NativeSpan::from(record),
                ThreadsafeFunctionCallMode::Blocking,
            );
        }
    })
    .map_err(crate::error::to_js)
}

/// How many spans were dropped, process-wide, because too many waited for the JS thread.
#[napi(js_name = "droppedSpans")]
pub fn dropped_spans() -> f64 {
    fencelock::spans::dropped_spans() as f64
}
