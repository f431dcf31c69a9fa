package dev.fencelock

import dev.fencelock.ffi.NativeSpan
import dev.fencelock.ffi.NativeSpanSink
import io.opentelemetry.api.GlobalOpenTelemetry
import io.opentelemetry.api.trace.SpanContext
import io.opentelemetry.api.trace.SpanKind
import io.opentelemetry.api.trace.StatusCode
import io.opentelemetry.api.trace.Tracer
import io.opentelemetry.context.Context
import java.util.concurrent.TimeUnit

/**
 * `ConnectOptions(tracing = true)`: the core's spans made through OpenTelemetry's Java API. The
 * API is an optional dependency: this object checks for it before [OpenTelemetrySpans] (the only
 * class that names its types) is loaded.
 */
internal object TracingBridge {
    fun sink(): NativeSpanSink {
        try {
            Class.forName("io.opentelemetry.api.GlobalOpenTelemetry", false, TracingBridge::class.java.classLoader)
        } catch (e: ClassNotFoundException) {
            invalidArgument(
                "tracing = true makes spans through OpenTelemetry's Java API, which is not on the class path: add " +
                    "io.opentelemetry:opentelemetry-api (and an SDK with an exporter to see them)",
            )
        }
        return OpenTelemetrySpans.fromGlobal().also { Callers.tracing = true }
    }
}

/**
 * Makes each span of the core (its name, attributes, start and end) with the tracer "fencelock"
 * of `GlobalOpenTelemetry`: a call's span a child of the `Context` current where the call was
 * made, a renewal a root span linked to its acquire's.
 */
internal class OpenTelemetrySpans private constructor(private val tracer: Tracer) : NativeSpanSink {
    /** The acquires that renewals link to, by lease id; the oldest are forgotten first. */
    private val acquires = object : LinkedHashMap<ULong, SpanContext>() {
        override fun removeEldestEntry(eldest: MutableMap.MutableEntry<ULong, SpanContext>) = size > REMEMBERED
    }

    override fun record(spans: List<NativeSpan>) {
        for (recorded in spans) {
            try {
                make(recorded)
            } catch (e: Exception) {
                // A tracer that throws loses that one span, never the lock.
            }
        }
    }

    private fun make(recorded: NativeSpan) {
        val builder = tracer.spanBuilder(recorded.name)
            .setSpanKind(SpanKind.CLIENT)
            .setStartTimestamp(recorded.startNanos, TimeUnit.NANOSECONDS)
        val parent = if (recorded.renewal) null else Callers[recorded.caller]?.otelContext as? Context
        if (parent != null) builder.setParent(parent) else builder.setNoParent()
        if (recorded.renewal) acquires[recorded.lease]?.let { builder.addLink(it) }
        for (i in 0 until recorded.attributes.size - 1 step 2) {
            builder.setAttribute(recorded.attributes[i], recorded.attributes[i + 1])
        }
        recorded.token?.let { builder.setAttribute("fencelock.token", it) }
        val span = builder.startSpan()
        recorded.errorCode?.let { span.setStatus(StatusCode.ERROR, it) }
        synchronized(acquires) {
            if (recorded.takesLease) {
                acquires[recorded.lease] = span.spanContext
            } else if (recorded.endsLease) {
                acquires.remove(recorded.lease)
            }
        }
        span.end(recorded.endNanos, TimeUnit.NANOSECONDS)
    }

    companion object {
        private const val REMEMBERED = 4096

        fun fromGlobal() = OpenTelemetrySpans(GlobalOpenTelemetry.getTracer("fencelock"))

        /** The calling thread's current context. */
        fun currentContext(): Any = Context.current()
    }
}
