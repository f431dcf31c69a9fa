package dev.fencelock

import io.opentelemetry.api.GlobalOpenTelemetry
import io.opentelemetry.sdk.OpenTelemetrySdk
import io.opentelemetry.sdk.metrics.SdkMeterProvider
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter
import io.opentelemetry.sdk.trace.SdkTracerProvider
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor

/**
 * One OpenTelemetry SDK for the test JVM (`GlobalOpenTelemetry` is set once), made global before
 * any Locker with metrics or tracing connects: its in-memory metric reader and span exporter.
 */
object TestTelemetry {
    private class Installed(val reader: InMemoryMetricReader, val spans: InMemorySpanExporter)

    private val installed: Installed by lazy {
        val reader = InMemoryMetricReader.create()
        val spans = InMemorySpanExporter.create()
        GlobalOpenTelemetry.resetForTest()
        GlobalOpenTelemetry.set(
            OpenTelemetrySdk.builder()
                .setMeterProvider(SdkMeterProvider.builder().registerMetricReader(reader).build())
                .setTracerProvider(
                    SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(spans)).build(),
                ).build(),
        )
        Installed(reader, spans)
    }

    val reader: InMemoryMetricReader get() = installed.reader
    val spans: InMemorySpanExporter get() = installed.spans
}
