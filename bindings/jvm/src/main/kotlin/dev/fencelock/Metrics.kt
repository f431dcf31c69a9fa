package dev.fencelock

import dev.fencelock.ffi.NativeMeasurement
import dev.fencelock.ffi.NativeMetricsSink
import dev.fencelock.ffi.metricInstruments
import io.opentelemetry.api.GlobalOpenTelemetry
import io.opentelemetry.api.common.Attributes
import io.opentelemetry.api.metrics.DoubleHistogram
import io.opentelemetry.api.metrics.LongCounter

/**
 * `ConnectOptions(metrics = true)`: the core's measurements recorded into OpenTelemetry's Java API.
 * The API is an optional dependency: this object checks for it before [OpenTelemetrySink] (the
 * only class that names its types) is loaded.
 */
internal object MetricsBridge {
    fun sink(): NativeMetricsSink {
        try {
            Class.forName("io.opentelemetry.api.GlobalOpenTelemetry", false, MetricsBridge::class.java.classLoader)
        } catch (e: ClassNotFoundException) {
            invalidArgument(
                "metrics = true records into OpenTelemetry's Java API, which is not on the class path: add " +
                    "io.opentelemetry:opentelemetry-api (and an SDK with an exporter to see the metrics)",
            )
        }
        return OpenTelemetrySink.fromGlobal()
    }
}

/** Records into the instruments of the core's table, made from `GlobalOpenTelemetry`'s meter "fencelock". */
internal class OpenTelemetrySink private constructor(
    private val counters: Map<String, LongCounter>,
    private val histograms: Map<String, DoubleHistogram>,
) : NativeMetricsSink {
    /** Called on fencelock's metrics thread; keys and values alternate in each measurement's attributes. */
    override fun record(measurements: List<NativeMeasurement>) {
        for (m in measurements) {
            // An instrument that throws loses that one measurement, never the lock.
            runCatching {
                val builder = Attributes.builder()
                for (i in 0 until m.attributes.size - 1 step 2) builder.put(m.attributes[i], m.attributes[i + 1])
                val recorded = builder.build()
                counters[m.instrument]?.add(m.value.toLong(), recorded)
                    ?: histograms[m.instrument]?.record(m.value, recorded)
            }
        }
    }

    companion object {
        fun fromGlobal(): OpenTelemetrySink {
            val meter = GlobalOpenTelemetry.getMeter("fencelock")
            val counters = HashMap<String, LongCounter>()
            val histograms = HashMap<String, DoubleHistogram>()
            for (instrument in metricInstruments()) {
                if (instrument.counter) {
                    counters[instrument.name] =
                        meter.counterBuilder(instrument.name).setDescription(instrument.description).build()
                } else {
                    histograms[instrument.name] = meter.histogramBuilder(instrument.name)
                        .setUnit(instrument.unit).setDescription(instrument.description).build()
                }
            }
            return OpenTelemetrySink(counters, histograms)
        }
    }
}
