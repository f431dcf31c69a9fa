//! `connect(url, metrics=True)`: the core's measurements recorded into OpenTelemetry's Python
//! API (`opentelemetry.metrics.get_meter("fencelock")`), so they reach whatever provider and
//! exporter the application set up. The instruments are the core's table (`Instrument::ALL`);
//! measurements are recorded on a thread of their own, a batch per GIL acquisition, so lock
//! operations never wait for the GIL.

use std::sync::Arc;

use fencelock::metrics::{Instrument, InstrumentKind, Measurement, MetricsSink, on_own_thread};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{invalid, to_py};

/// A sink that records into the host's OpenTelemetry instruments, made now (with the GIL).
pub(crate) fn host_sink(py: Python<'_>) -> PyResult<Arc<dyn MetricsSink>> {
    let api = py.import("opentelemetry.metrics").map_err(|_| {
        invalid(
            "metrics=True records into OpenTelemetry's Python API, which is not installed: \
             pip install opentelemetry-api (and an SDK with an exporter to see the metrics)",
        )
    })?;
    let meter = api.call_method1("get_meter", ("fencelock",))?;
    let mut instruments: Vec<(Instrument, Py<PyAny>)> = Vec::with_capacity(Instrument::ALL.len());
    for instrument in Instrument::ALL {
        let kwargs = PyDict::new(py);
        kwargs.set_item("unit", instrument.unit())?;
        kwargs.set_item("description", instrument.description())?;
        let create = match instrument.kind() {
            InstrumentKind::Histogram => "create_histogram",
            InstrumentKind::Counter => "create_counter",
        };
        instruments.push((
            instrument,
            meter
                .call_method(create, (instrument.name(),), Some(&kwargs))?
                .unbind(),
        ));
    }
    on_own_thread("fencelock-metrics", move |batch: &[Measurement]| {
        // One GIL acquisition for everything that queued up meanwhile; none once the
        // interpreter exits, when the batch is dropped.
        let _ = crate::exit::attach(|py| {
            for m in batch {
                let Some((instrument, host)) = instruments.iter().find(|(i, _)| *i == m.instrument)
                else {
                    continue;
                };
                let recorded = (|| -> PyResult<()> {
                    let attributes = PyDict::new(py);
                    for (key, value) in &m.attributes {
                        attributes.set_item(*key, *value)?;
                    }
                    match instrument.kind() {
                        InstrumentKind::Histogram => {
                            host.call_method1(py, "record", (m.value, attributes))?
                        }
                        InstrumentKind::Counter => {
                            host.call_method1(py, "add", (m.value as u64, attributes))?
                        }
                    };
                    Ok(())
                })();
                // An instrument that raises loses that one measurement, and the next ones still go.
                drop(recorded);
            }
        });
    })
    .map_err(to_py)
}
