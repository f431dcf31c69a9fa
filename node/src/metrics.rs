//! `connect(url, { metrics: true })`: the core's measurements handed to `index.js`, which records
//! them into OpenTelemetry's JS API (`@opentelemetry/api`). The instrument table is the core's
//! (`metricInstruments()`), so every language names and describes them alike.

use std::collections::HashMap;
use std::sync::Arc;

use fencelock::metrics::{Instrument, InstrumentKind, Measurement, MetricsSink};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::error::{Result, from_napi};
use crate::observe::JS_QUEUE;

/// One instrument of the core's table.
#[napi(object)]
pub struct NativeInstrument {
    pub name: String,
    /// "counter" or "histogram".
    pub kind: String,
    /// "s" for the histograms, "" for the counters.
    pub unit: String,
    pub description: String,
}

/// One measurement: a counter increment, or a histogram value in seconds.
#[napi(object)]
pub struct NativeMeasurement {
    pub instrument: String,
    pub value: f64,
    /// `backend`, and `outcome` or `reason` where the instrument has one.
    pub attributes: HashMap<String, String>,
}

/// The instruments a Locker with metrics records into.
#[napi]
pub fn metric_instruments() -> Vec<NativeInstrument> {
    Instrument::ALL
        .into_iter()
        .map(|i| NativeInstrument {
            name: i.name().to_string(),
            kind: match i.kind() {
                InstrumentKind::Counter => "counter",
                InstrumentKind::Histogram => "histogram",
            }
            .to_string(),
            unit: i.unit().to_string(),
            description: i.description().to_string(),
        })
        .collect()
}

/// A sink that calls `callback` on the JS thread with each measurement. Weak: it does not keep
/// the process alive. The core's queue for it drops new measurements past 4096 (counted in
/// `droppedMeasurements()`), and its thread waits while napi's queue holds [`JS_QUEUE`], so a JS
/// thread that stops taking them costs a bounded amount of memory; lock operations never wait.
pub(crate) fn js_sink(
    callback: Function<'_, NativeMeasurement, ()>,
) -> Result<Arc<dyn MetricsSink>> {
    let deliver = callback
        .build_threadsafe_function::<NativeMeasurement>()
        .callee_handled::<false>()
        .weak::<true>()
        .max_queue_size::<JS_QUEUE>()
        .build()
        .map_err(from_napi)?;
    fencelock::metrics::on_own_thread("fencelock-metrics", move |batch: &[Measurement]| {
        for m in batch {
            let measurement = NativeMeasurement {
                instrument: m.instrument.name().to_string(),
                value: m.value,
                attributes: m
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            deliver.call(measurement, ThreadsafeFunctionCallMode::Blocking);
        }
    })
    .map_err(crate::error::to_js)
}

/// How many measurements were dropped, process-wide, because too many waited for the JS thread.
#[napi(js_name = "droppedMeasurements")]
pub fn dropped_measurements() -> f64 {
    fencelock::metrics::dropped_measurements() as f64
}
