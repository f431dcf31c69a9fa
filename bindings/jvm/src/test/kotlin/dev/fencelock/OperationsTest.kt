package dev.fencelock

import ch.qos.logback.classic.Level
import ch.qos.logback.classic.Logger
import ch.qos.logback.classic.spi.ILoggingEvent
import ch.qos.logback.core.read.ListAppender
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.parallel.Isolated
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import org.slf4j.LoggerFactory
import java.time.Duration
import java.util.Collections
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/** Inspection, administration and observability (issue 13) on every backend. */
// Watches process-wide state (see junit-platform.properties): runs alone.
@Isolated
class OperationsTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.names()

        private const val MARGIN_MS = Backends.MARGIN_MS
        private val TTL: Duration = Backends.RENEWING_TTL
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `inspect and list show the holder and its token while held, and nothing after release`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                Backends.connect(backend).use { operator ->
                    val prefix = Backends.uniqueName("ops-list") + "/"
                    val name = prefix + "a"
                    val lease = locker.acquire(name, LockOptions(ttl = TTL, holder = "nightly report"))
                    val info = operator.inspect(name)
                    assertTrue(info.held)
                    assertEquals(name, info.name)
                    assertEquals(lease.token, info.token)
                    val holder = info.holder ?: fail("no holder while held")
                    assertEquals("nightly report", holder.text)
                    assertEquals("jvm", holder.language)
                    assertEquals(ProcessHandle.current().pid(), holder.pid)
                    assertFalse(holder.host.isNullOrEmpty())
                    if (backend == "zookeeper") {
                        assertNull(info.timeLeft, "ZooKeeper has no ttl")
                    } else {
                        val left = info.timeLeft ?: fail("no time left while held")
                        assertTrue(left > Duration.ZERO && left <= TTL, "time left $left")
                    }

                    val listed = operator.list(prefix)
                    assertFalse(listed.truncated)
                    assertEquals(listOf(name), listed.locks.map { it.name })
                    assertEquals(lease.token, listed.locks.single().token)
                    assertEquals(listOf(name), operator.listBlocking(prefix).locks.map { it.name }, "the blocking face")

                    lease.release()
                    val after = operator.inspect(name)
                    assertFalse(after.held)
                    assertNull(after.holder)
                    assertNull(after.timeLeft)
                    assertTrue(after.waiters.isEmpty())
                    assertEquals(emptyList<LockInfo>(), operator.list(prefix).locks)
                }
            }
        }

    @Test
    fun `inspect on ZooKeeper shows the waiters queued behind the holder`(): Unit = runBlocking {
        Backends.connect("zookeeper").use { locker ->
            Backends.connect("zookeeper").use { other ->
                val name = Backends.uniqueName("ops-waiters")
                val lease = locker.acquire(name)
                val waiting = async { other.acquire(name, LockOptions(holder = "second in line")) }
                val info = withTimeout(MARGIN_MS) {
                    while (true) {
                        val info = locker.inspect(name)
                        if (info.waiters.isNotEmpty()) return@withTimeout info
                        delay(50)
                    }
                    @Suppress("UNREACHABLE_CODE")
                    error("unreachable")
                }
                assertEquals(lease.token, info.token)
                assertEquals("second in line", info.waiters.single().holder?.text)
                waiting.cancelAndJoin()
                lease.release()
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `force release - the holder hears it lost, events of a lost and a released lease in order, SLF4J warned`(
        backend: String,
    ): Unit = runBlocking {
        val logger = LoggerFactory.getLogger("fencelock") as Logger
        val records = ListAppender<ILoggingEvent>().apply { start() }
        logger.addAppender(records)
        try {
            Backends.connect(backend).use { locker ->
                Backends.connect(backend).use { operator ->
                    val name = Backends.uniqueName("ops-force")
                    val events = Collections.synchronizedList(mutableListOf<LockEvent>())
                    // UNDISPATCHED: the flow subscribes before launch returns, so no event is missed.
                    val collecting = launch(start = CoroutineStart.UNDISPATCHED) {
                        locker.events().collect { if (it.name == name) events += it }
                    }

                    val lost = locker.acquire(name, LockOptions(ttl = TTL))
                    operator.forceRelease(name)
                    // The holder learns it at its next renewal (ttl/3), ZooKeeper from its watch.
                    val reason = withTimeout(TTL.toMillis() / 3 + MARGIN_MS) { lost.awaitLost() }
                    assertTrue(lost.isLost)
                    assertEquals(reason, lost.lostReason)
                    assertThrows(LockNotHeldException::class.java) { operator.forceReleaseBlocking(name) }

                    val released = locker.acquire(name, LockOptions(ttl = TTL))
                    assertTrue(released.token > lost.token, "the next token is larger")
                    released.release()

                    withTimeout(MARGIN_MS) {
                        while (events.none {
                                it.token == released.token && it.kind == LockEventKind.RELEASED
                            }
                        ) {
                            delay(20)
                        }
                    }
                    collecting.cancelAndJoin()

                    val seen = synchronized(events) { events.toList() }
                    val first = seen.filter { it.token == lost.token }.map { it.kind }
                    assertEquals(LockEventKind.ACQUIRED, first.first(), "$first")
                    assertEquals(LockEventKind.LOST, first.last(), "$first")
                    assertTrue(
                        first.drop(1).dropLast(1).all {
                            it == LockEventKind.RENEWED ||
                                it == LockEventKind.RENEWAL_RETRIED
                        },
                        "$first",
                    )
                    assertEquals(reason, seen.last { it.token == lost.token }.lossReason)
                    val second = seen.filter { it.token == released.token }.map { it.kind }
                    assertEquals(LockEventKind.ACQUIRED, second.first(), "$second")
                    assertEquals(LockEventKind.RELEASED, second.last(), "$second")
                    assertEquals(
                        seen.map {
                            it.token
                        }.sorted(),
                        seen.map { it.token },
                        "the first lease's events come first",
                    )
                    assertTrue(seen.all { it.backend.isNotEmpty() && it.name == name })

                    // The core's warning about the force release, through SLF4J with the lock in the MDC (on
                    // ZooKeeper the holder's own "lease lost" warning may come first).
                    val warning = withTimeout(MARGIN_MS) {
                        while (true) {
                            val found = synchronized(records) { records.list.toList() }
                                .firstOrNull {
                                    it.mdcPropertyMap["lock"] == name &&
                                        "force-released" in it.formattedMessage
                                }
                            if (found != null) return@withTimeout found
                            delay(20)
                        }
                        @Suppress("UNREACHABLE_CODE")
                        error("unreachable")
                    }
                    assertEquals(Level.WARN, warning.level)
                    assertEquals("fencelock-logging", warning.threadName)
                }
            }
            val leaked = synchronized(records) { records.list.toList() }.filter {
                "fencelock-test" in
                    it.formattedMessage
            }
            assertEquals(emptyList<ILoggingEvent>(), leaked, "a record shows the test servers' password")
        } finally {
            logger.detachAppender(records)
        }
    }

    @Test
    fun `Java listeners - onEvent filters by kind, a throwing listener is survived, close stops the thread`() {
        Backends.connect("sqlite").use { locker ->
            val name = Backends.uniqueName("ops-listener")
            val heard = LinkedBlockingQueue<LockEvent>()
            val all = locker.onEvent({ if (it.name == name) heard += it })
            val onlyReleases = LinkedBlockingQueue<LockEventKind>()
            val throwing = locker.onEvent({ event ->
                onlyReleases += event.kind
                throw IllegalStateException("a listener that throws")
            }, setOf(LockEventKind.RELEASED))
            repeat(2) { locker.acquireBlocking(name).releaseBlocking() }
            val kinds = List(4) { heard.poll(MARGIN_MS, TimeUnit.MILLISECONDS)?.kind }
            val expected =
                listOf(LockEventKind.ACQUIRED, LockEventKind.RELEASED, LockEventKind.ACQUIRED, LockEventKind.RELEASED)
            assertEquals(expected, kinds)
            assertEquals(LockEventKind.RELEASED, onlyReleases.poll(MARGIN_MS, TimeUnit.MILLISECONDS))
            assertEquals(
                LockEventKind.RELEASED,
                onlyReleases.poll(MARGIN_MS, TimeUnit.MILLISECONDS),
                "the listener threw, and still hears",
            )
            all.close()
            throwing.close()
            assertTrue(all.awaitTermination(Duration.ofMillis(MARGIN_MS)))
            assertTrue(throwing.awaitTermination(Duration.ofMillis(MARGIN_MS)))
            assertTrue(all.isClosed)
            assertEquals(0L, all.dropped)
        }
    }

    @Test
    fun `the events flow completes when its Locker closes, and a closed Locker has none`(): Unit = runBlocking {
        val locker = Backends.connect("sqlite")
        val ended = async(start = CoroutineStart.UNDISPATCHED) { locker.events().collect {} }
        locker.close()
        withTimeout(MARGIN_MS) { ended.await() }
        assertThrows(LockClosedException::class.java) { runBlocking { locker.events().collect {} } }
    }
}
