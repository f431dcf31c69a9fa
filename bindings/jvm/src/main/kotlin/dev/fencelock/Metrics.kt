package dev.fencelock

import dev.fencelock.ffi.NativeMeasurement
import dev.fencelock.ffi.NativeMetricsSink
import dev.fencelock.ffi.metricInstruments
import io.opentelemetry.api.GlobalOpenTelemetry
import io.opentelemetry.api.common.Attributes
import io.opentelemetry.api.metrics.DoubleHistogram
import io.opentelemetry.api.metrics.LongCounter

/**
 * One of the instruments a Locker records into: the same names, units and descriptions in every
 * language (counters count; histograms measure seconds).
 */
data class MetricInstrument(
    val name: String,
    val isCounter: Boolean,
    /** "s" for the histograms, "" for the counters. */
    val unit: String,
    val description: String,
) {
    companion object {
        private val table: List<MetricInstrument> by lazy {
            metricInstruments().map { MetricInstrument(it.name, it.counter, it.unit, it.description) }
        }

        /** Every instrument, in the core's order. */
        @JvmStatic
        fun all(): List<MetricInstrument> = table
    }
}

/**
 * One measurement: a counter's increment or a histogram's value in seconds, with its attributes
 * (`backend`, then `outcome` or `reason`).
 */
data class Measurement(val instrument: String, val value: Double, val attributes: Map<String, String>)

/**
 * Receives a Locker's measurements (`ConnectOptions(metricsRecorder = ...)`), in batches, on
 * fencelock's metrics thread, never on a thread that takes a lock. One that throws loses that
 * batch, never the lock.
 */
fun interface MetricsRecorder {
    fun record(measurements: List<Measurement>)
}

/**
 * A [MetricsRecorder] as the native library's sink: the one place the native measurements (keys
 * and values alternating in `attributes`) become [Measurement]s.
 */
internal class RecorderSink(private val recorder: MetricsRecorder) : NativeMetricsSink {
    override fun record(measurements: List<NativeMeasurement>) {
        val batch = measurements.map { m ->
            val attributes = LinkedHashMap<String, String>()
            for (i in 0 until m.attributes.size - 1 step 2) attributes[m.attributes[i]] = m.attributes[i + 1]
            Measurement(m.instrument, m.value, attributes)
        }
        runCatching { recorder.record(batch) }
    }
}

/**
 * `ConnectOptions(metrics = true)`: the core's measurements recorded into OpenTelemetry's Java API.
 * The API is an optional dependency: this object checks for it before [OpenTelemetryRecorder]
 * (the only class that names its types) is loaded.
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
        return RecorderSink(OpenTelemetryRecorder.fromGlobal())
    }
}

/**
 * Records into the instruments of the core's table, made from `GlobalOpenTelemetry`'s meter
 * "fencelock": the [MetricsRecorder] that `metrics = true` stands for.
 */
internal class OpenTelemetryRecorder private constructor(
    private val counters: Map<String, LongCounter>,
    private val histograms: Map<String, DoubleHistogram>,
) : MetricsRecorder {
    override fun record(measurements: List<Measurement>) {
        for (m in measurements) {
            // An instrument that throws loses that one measurement, never the lock.
            runCatching {
                val builder = Attributes.builder()
                for ((key, value) in m.attributes) builder.put(key, value)
                val recorded = builder.build()
                counters[m.instrument]?.add(m.value.toLong(), recorded)
                    ?: histograms[m.instrument]?.record(m.value, recorded)
            }
        }
    }

    companion object {
        fun fromGlobal(): OpenTelemetryRecorder {
            val meter = GlobalOpenTelemetry.getMeter("fencelock")
            val counters = HashMap<String, LongCounter>()
            val histograms = HashMap<String, DoubleHistogram>()
            for (instrument in MetricInstrument.all()) {
                if (instrument.isCounter) {
                    counters[instrument.name] =
                        meter.counterBuilder(instrument.name).setDescription(instrument.description).build()
                } else {
                    histograms[instrument.name] = meter.histogramBuilder(instrument.name)
                        .setUnit(instrument.unit).setDescription(instrument.description).build()
                }
            }
            return OpenTelemetryRecorder(counters, histograms)
        }
    }
}
