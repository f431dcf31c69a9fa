package dev.fencelock

import io.opentelemetry.sdk.metrics.data.MetricDataType
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.parallel.Isolated
import java.io.File
import java.nio.file.Files
import java.time.Duration
import java.util.concurrent.TimeUnit

/**
 * Metrics (issue 13) on the JVM: `ConnectOptions(metrics = true)` records the core's instruments
 * into OpenTelemetry's Java API, so they reach the SDK and exporter the application set up. Read
 * back here through the SDK's in-memory reader, on SQLite.
 */
// Watches process-wide state (see junit-platform.properties): runs alone.
@Isolated
class MetricsTest {
    companion object {
        private val reader get() = TestTelemetry.reader

        /** "instrument|k=v,..." to a counter's sum or a histogram's count. */
        private fun snapshot(): Map<String, Long> {
            val seen = HashMap<String, Long>()
            for (metric in reader.collectAllMetrics()) {
                val points = when (metric.type) {
                    MetricDataType.LONG_SUM -> metric.longSumData.points.map { it.attributes to it.value }
                    MetricDataType.HISTOGRAM -> metric.histogramData.points.map { it.attributes to it.count }
                    else -> emptyList()
                }
                for ((attributes, value) in points) {
                    val labels = attributes.asMap().entries.map {
                        "${it.key.key}=${it.value}"
                    }.sorted().joinToString(",")
                    seen["${metric.name}|$labels"] = value
                }
            }
            return seen
        }

        private fun waitFor(key: String, atLeast: Long): Map<String, Long> {
            // Measurements reach OpenTelemetry on fencelock's metrics thread: soon, not at once.
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
            while (true) {
                val seen = snapshot()
                if ((seen[key] ?: 0) >= atLeast) return seen
                assertTrue(System.nanoTime() < deadline, "$key never reached $atLeast: $seen")
                Thread.sleep(50)
            }
        }

        private fun sqliteUrl() = "sqlite://" + Files.createTempDirectory("fencelock-jvm-metrics").resolve("locks.db")
    }

    @Test
    fun `a lock's life shows in the host's OpenTelemetry, with the core's instrument table`() {
        reader
        Locker.connect(sqliteUrl(), ConnectOptions(metrics = true)).use { locker ->
            repeat(3) { locker.withLockBlocking("jvm-metrics") { } }
            val lease = locker.acquireBlocking("jvm-metrics-lost", LockOptions(ttl = Duration.ofMillis(600)))
            locker.forceReleaseBlocking("jvm-metrics-lost")
            assertTrue(lease.waitLost(Duration.ofSeconds(30)))
            waitFor("fencelock.losses|backend=sqlite,reason=taken_over", 1)
            val seen = waitFor("fencelock.lease.hold|backend=sqlite,outcome=released", 3)
            assertTrue(seen.getValue("fencelock.acquisitions|backend=sqlite") >= 4, "$seen")
            assertTrue(seen.getValue("fencelock.acquire.duration|backend=sqlite") >= 4, "$seen")
            assertTrue(seen.getValue("fencelock.acquire.wait|backend=sqlite") >= 4, "$seen")
            for (metric in reader.collectAllMetrics()) {
                assertTrue(metric.name.startsWith("fencelock."), metric.name)
                if (metric.type == MetricDataType.HISTOGRAM) assertEquals("s", metric.unit)
            }
            assertTrue(seen.keys.all { it.contains("|backend=sqlite") }, "$seen")
        }
    }

    @Test
    fun `metrics are off by default`() {
        reader
        val key = "fencelock.acquisitions|backend=sqlite"
        val before = snapshot()[key] ?: 0
        Locker.connect(sqliteUrl()).use { locker -> locker.withLockBlocking("jvm-metrics-off") { } }
        Thread.sleep(300)
        assertEquals(before, snapshot()[key] ?: 0, "a Locker without metrics recorded metrics")
    }

    @Test
    fun `metrics without OpenTelemetry's API on the class path is a clear INVALID_ARGUMENT`() {
        val classPath = (System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path"))
            .split(File.pathSeparator).filterNot { it.contains("opentelemetry") }.joinToString(File.pathSeparator)
        val java = File(System.getProperty("java.home"), "bin/java").path
        val process = ProcessBuilder(java, "-cp", classPath, MetricsWithoutOpenTelemetry::class.java.name, sqliteUrl())
            .redirectErrorStream(true).start()
        assertTrue(process.waitFor(60, TimeUnit.SECONDS), "the child JVM did not finish")
        val out = process.inputStream.readAllBytes().decodeToString()
        assertEquals(0, process.exitValue(), out)
        assertTrue(out.contains("INVALID_ARGUMENT") && out.contains("io.opentelemetry:opentelemetry-api"), out)
    }
}

/** The child JVM of the last test: connects with metrics, without OpenTelemetry on its class path. */
object MetricsWithoutOpenTelemetry {
    @JvmStatic
    fun main(args: Array<String>) {
        try {
            Locker.connect(args[0], ConnectOptions(metrics = true)).close()
            println("connected")
        } catch (e: LockInvalidArgumentException) {
            println("${e.code}: ${e.message}")
        }
    }
}
