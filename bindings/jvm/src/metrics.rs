//! `ConnectOptions(metrics = true)`: the core's measurements handed to the Kotlin layer, which
//! records them into OpenTelemetry's Java API (`Metrics.kt`). The instrument table is the
//! core's (`metricInstruments()`), so every language names and describes them alike. The sink
//! is called on a thread of its own, so lock operations never wait on the JVM's code.

use std::sync::Arc;

use fencelock::metrics::{Instrument, InstrumentKind, Measurement, MetricsSink, on_own_thread};

use crate::error::NativeError;

/// One instrument of the core's table.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeInstrument {
    pub name: String,
    pub counter: bool,
    /// "s" for the histograms, "" for the counters.
    pub unit: String,
    pub description: String,
}

/// The instruments a Locker with metrics records into.
#[uniffi::export]
pub fn metric_instruments() -> Vec<NativeInstrument> {
    Instrument::ALL
        .into_iter()
        .map(|i| NativeInstrument {
            name: i.name().to_string(),
            counter: i.kind() == InstrumentKind::Counter,
            unit: i.unit().to_string(),
            description: i.description().to_string(),
        })
        .collect()
}

/// One measurement: a counter increment or a histogram value in seconds, with its attributes as
/// alternating keys and values (`backend`, then `outcome` or `reason`).
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeMeasurement {
    pub instrument: String,
    pub value: f64,
    pub attributes: Vec<String>,
}

/// Receives the measurements that queued up since its last call (one JVM callback for the three
/// of an acquire, not three).
#[uniffi::export(callback_interface)]
pub trait NativeMetricsSink: Send + Sync {
    fn record(&self, measurements: Vec<NativeMeasurement>);
}

pub(crate) fn jvm_sink(
    sink: Box<dyn NativeMetricsSink>,
) -> Result<Arc<dyn MetricsSink>, NativeError> {
    Ok(on_own_thread(
        "fencelock-metrics",
        move |batch: &[Measurement]| {
            let measurements = batch
                .iter()
                .map(|m| NativeMeasurement {
                    instrument: m.instrument.name().to_string(),
                    value: m.value,
                    attributes: m
                        .attributes
                        .iter()
                        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
                        .collect(),
                })
                .collect();
            sink.record(measurements);
        },
    )?)
}
