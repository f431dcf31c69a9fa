package dev.fencelock

import ch.qos.logback.classic.Logger
import ch.qos.logback.classic.spi.ILoggingEvent
import ch.qos.logback.core.read.ListAppender
import io.opentelemetry.api.common.AttributeKey
import io.opentelemetry.api.trace.SpanId
import io.opentelemetry.sdk.trace.data.SpanData
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import org.slf4j.LoggerFactory
import org.slf4j.MDC
import java.nio.file.Files
import java.time.Duration
import java.util.concurrent.TimeUnit

/**
 * Tracing on the JVM: `ConnectOptions(tracing = true)` and `FenceOptions(tracing = true)` make
 * spans of acquires (waiting included), extends, releases, renewals and fence writes through
 * OpenTelemetry's Java API, children of the `Context` current where each call was made (renewals:
 * root spans linked to their acquire's); and a log record produced during a call is logged under
 * that call's MDC. Read back through the SDK's in-memory exporter, on every backend.
 */
class TracingTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.names()

        private fun text(span: SpanData, key: String): String? = span.attributes.get(AttributeKey.stringKey(key))

        private fun spansOf(name: String): List<SpanData> = TestTelemetry.spans.finishedSpanItems.filter {
            text(it, "fencelock.lock") == name || text(it, "fencelock.resource") == name
        }

        /** Spans reach OpenTelemetry on fencelock's span thread when their operation ends: polled. */
        private fun spansOf(name: String, ready: (List<SpanData>) -> Boolean): List<SpanData> {
            val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS * 3)
            while (true) {
                val spans = spansOf(name)
                if (ready(spans) || System.nanoTime() > deadline) return spans
                Thread.sleep(20)
            }
        }

        private fun List<SpanData>.named(name: String) = filter { it.name == name }

        private fun dataUrl() = "sqlite://" + Files.createTempDirectory("fencelock-jvm-tracing").resolve("data.db")

        private val backendOfScheme = mapOf(
            "sqlite" to "sqlite",
            "redis" to "redis",
            "redlock" to "redlock",
            "zk" to "zookeeper",
            "postgres" to "postgres",
            "mariadb" to "mysql",
            "mysql" to "mysql",
        )
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a lock's life is spans under the caller's span`(backend: String) {
        TestTelemetry.spans
        val tracer = io.opentelemetry.api.GlobalOpenTelemetry.getTracer("fencelock-tests")
        val name = Backends.uniqueName("spans")
        val resource = Backends.uniqueName("fence")
        val rival = Backends.connect(backend)
        val request = tracer.spanBuilder("request").startSpan()
        lateinit var lease: Lease
        rival.use {
            Locker.connect(Backends.url(backend), ConnectOptions(tracing = true)).use { locker ->
                Fence.open(dataUrl(), resource, FenceOptions(tracing = true)).use { fence ->
                    request.makeCurrent().use {
                        lease = locker.acquireBlocking(name, LockOptions(ttl = Duration.ofMillis(1500)))
                        val renewed = spansOf(name) { it.named("fencelock.renew").size >= 2 }
                        assertTrue(renewed.named("fencelock.renew").size >= 2, renewed.toString())
                        lease.extendBlocking()
                        fence.fencedExecuteBlocking(lease, listOf(Statement.of("CREATE TABLE IF NOT EXISTS t (x)")))
                        // The suspend form, in a coroutine on this thread (the context is its).
                        runBlocking { lease.release() }
                        val newer = rival.acquireBlocking(name)
                        // Held by another client: a try-once acquire comes back empty.
                        assertNull(locker.tryAcquireBlocking(name))
                        fence.fencedExecuteBlocking(newer, emptyList())
                        thrownBy<StaleTokenException>("a stale write") {
                            fence.fencedExecuteBlocking(lease.token, emptyList())
                        }
                        newer.releaseBlocking()
                    }
                }
            }
        }
        request.end()
        val requestContext = request.spanContext
        val spans = spansOf(name) {
            it.named("fencelock.acquire").size >= 2 &&
                it.named("fencelock.release").isNotEmpty()
        }
        val acquires = spans.named("fencelock.acquire")
        assertEquals(listOf("acquired", "timeout"), acquires.map { text(it, "fencelock.outcome") })
        val first = acquires[0]
        assertEquals(lease.token, first.attributes.get(AttributeKey.longKey("fencelock.token")))
        assertEquals("exclusive", text(first, "fencelock.mode"))
        assertEquals(backendOfScheme[Backends.url(backend).substringBefore(':')], text(first, "fencelock.backend"))
        for (span in spans.filter { it.name != "fencelock.fence.write" }) {
            assertEquals(text(first, "fencelock.backend"), text(span, "fencelock.backend"))
            if (span.name == "fencelock.renew") continue
            assertEquals(requestContext.spanId, span.parentSpanId, span.name)
            assertEquals(requestContext.traceId, span.traceId)
        }
        for (renewal in spans.named("fencelock.renew")) {
            // A root span of its own trace, linked to the acquire that took the lease.
            assertEquals(SpanId.getInvalid(), renewal.parentSpanId)
            assertEquals("renewed", text(renewal, "fencelock.outcome"))
            assertEquals(listOf(first.spanId), renewal.links.map { it.spanContext.spanId })
        }
        assertEquals(listOf("extended"), spans.named("fencelock.extend").map { text(it, "fencelock.outcome") })
        assertEquals(listOf("released"), spans.named("fencelock.release").map { text(it, "fencelock.outcome") })
        val writes = spansOf(resource) { it.size >= 3 }
        assertEquals(listOf("accepted", "accepted", "stale"), writes.map { text(it, "fencelock.outcome") })
        // The stale write's token came bare: only the leases' tokens name their lock.
        assertEquals(listOf(name, name, null), writes.map { text(it, "fencelock.lock") })
        assertTrue(writes.all { text(it, "fencelock.backend") == "sqlite" && it.parentSpanId == requestContext.spanId })
    }

    @Test
    fun `tracing is off by default`() {
        TestTelemetry.spans
        val url = "sqlite://" + Files.createTempDirectory("fencelock-jvm-untraced").resolve("locks.db")
        val name = Backends.uniqueName("untraced")
        val marker = Backends.uniqueName("traced")
        Locker.connect(url).use { it.acquireBlocking(name).releaseBlocking() }
        Locker.connect(url, ConnectOptions(tracing = true)).use { it.acquireBlocking(marker).releaseBlocking() }
        // The traced Locker's spans, reported after the untraced one's would have been.
        assertEquals(2, spansOf(marker) { it.size >= 2 }.size)
        assertEquals(emptyList<SpanData>(), spansOf(name))
    }

    @Test
    fun `a call's log records are logged under its MDC`() {
        val url = "sqlite://" + Files.createTempDirectory("fencelock-jvm-logged").resolve("locks.db")
        // SLF4J hands out a stand-in while another test class's thread initialises it: polled.
        val deadline0 = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS)
        var found = LoggerFactory.getLogger("fencelock")
        while (found !is Logger && System.nanoTime() < deadline0) {
            Thread.sleep(20)
            found = LoggerFactory.getLogger("fencelock")
        }
        val logger = found as Logger
        val appender = ListAppender<ILoggingEvent>().apply { start() }
        logger.addAppender(appender)
        try {
            Locker.connect(url).use { locker ->
                Locker.connect(url).use { rival ->
                    val name = Backends.uniqueName("logged")
                    val lease = locker.acquireBlocking(name, LockOptions(autoRenew = false))
                    rival.forceReleaseBlocking(name)
                    MDC.put("request", "request-7")
                    try {
                        // The extend finds the lock gone: the core logs the loss during this call.
                        thrownBy<LockLostException>("the extend of a lost lease") { lease.extendBlocking() }
                    } finally {
                        MDC.remove("request")
                    }
                    val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS)

                    // The appender adds under its own lock (logback's AppenderBase.doAppend), not the list's.
                    fun losses() = synchronized(appender) {
                        appender.list.filter {
                            it.formattedMessage.contains("lease lost") &&
                                it.mdcPropertyMap["lock"] == name
                        }
                    }
                    while (losses().isEmpty() && System.nanoTime() < deadline) Thread.sleep(20)
                    assertEquals(listOf("request-7"), losses().map { it.mdcPropertyMap["request"] })
                }
            }
        } finally {
            logger.detachAppender(appender)
        }
    }
}
