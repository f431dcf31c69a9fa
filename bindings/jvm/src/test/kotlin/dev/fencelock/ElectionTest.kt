package dev.fencelock

import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.io.File
import java.nio.file.Files
import java.time.Duration
import java.util.Collections
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * Leader election (issue 12) on every backend, from the JVM: one leader at a time with terms
 * that increase, observers, resign, a deposed leader told within one renewal and refused by a
 * fence, and a killed leader replaced within its ttl.
 */
class ElectionTest {
    private val ttl: Duration = Backends.RENEWING_TTL

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `three candidates never lead at once, each term is larger, and observers see the leader`(backend: String) {
        val election = Backends.uniqueName("election")
        val lockers = List(3) { Backends.connect(backend) }
        val observer = Backends.connect(backend)
        val leading = AtomicInteger(0)
        val terms = Collections.synchronizedList(mutableListOf<Long>())
        val pool = Executors.newFixedThreadPool(3)
        try {
            val work = lockers.mapIndexed { i, locker ->
                pool.submit {
                    repeat(3) {
                        locker.runAsLeader(
                            election,
                            CampaignOptions(ttl = ttl, holder = "candidate $i"),
                        ) { leadership ->
                            assertEquals(1, leading.incrementAndGet(), "two candidates led at once")
                            terms.add(leadership.term)
                            val seen = observer.leaderBlocking(election) ?: fail("the observer saw no leader")
                            assertEquals(leadership.term, seen.term)
                            assertEquals("candidate $i", seen.holder?.text)
                            assertEquals(ProcessHandle.current().pid(), seen.holder?.pid)
                            Thread.sleep(5)
                            leading.decrementAndGet()
                        }
                    }
                }
            }
            work.forEach { it.get(120, TimeUnit.SECONDS) }
            assertEquals(9, terms.size)
            assertEquals(terms.sorted().distinct(), terms.toList(), "terms did not increase with every leader: $terms")
            assertNull(observer.leaderBlocking(election), "nobody leads after the last resign")
        } finally {
            pool.shutdownNow()
            observer.close()
            lockers.forEach { it.close() }
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `resign hands over to a waiting candidate, and misuse gets typed errors`(backend: String): Unit = runBlocking {
        Backends.connect(backend).use { first ->
            Backends.connect(backend).use { second ->
                val election = Backends.uniqueName("resign")
                val leadership = first.campaign(election, CampaignOptions(ttl = ttl))
                assertTrue(leadership.isLeader)
                assertEquals(election, leadership.name)
                assertThrows(LockTimeoutException::class.java) {
                    second.campaignBlocking(election, CampaignOptions(ttl = ttl, wait = Duration.ofMillis(200)))
                }
                val waiting = second.campaignAsync(election, CampaignOptions(ttl = ttl, wait = Duration.ofSeconds(30)))
                delay(300)
                assertFalse(waiting.isDone, "a second candidate led while the first still did")
                val resigned = System.nanoTime()
                leadership.resign()
                val next = waiting.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                val handover = Duration.ofNanos(System.nanoTime() - resigned)
                assertTrue(handover < Duration.ofMillis(Backends.MARGIN_MS), "handover took $handover")
                assertTrue(next.term > leadership.term, "terms increase: ${leadership.term} then ${next.term}")
                assertFalse(leadership.isLeader)
                assertThrows(LockNotHeldException::class.java) { leadership.resignBlocking() }
                leadership.close() // quiet after an explicit resign
                next.close()
                assertNull(second.leader(election))
                val result = first.withLeadership(election, CampaignOptions(ttl = ttl)) { it.term }
                assertTrue(result > next.term)
            }
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `a deposed leader is told within one renewal and a fence refuses its writes`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { candidate ->
                Backends.connect(backend).use { operator ->
                    val election = Backends.uniqueName("deposed")
                    Fence.open(ContentionTest.fenceUrl, election).use { fence ->
                        val deposed = candidate.campaign(election, CampaignOptions(ttl = ttl))
                        fence.fencedExecuteBlocking(deposed.lease, listOf(Statement.of("SELECT 1")))
                        val lost = deposed.lostFuture()
                        operator.forceRelease(election)
                        val reason = lost.get(ttl.toMillis() / 3 + Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                        assertTrue(
                            reason == LossReason.TAKEN_OVER || reason == LossReason.SESSION_EXPIRED,
                            "lost as $reason",
                        )
                        assertFalse(deposed.isLeader)
                        assertThrows(LockLostException::class.java) { deposed.ensureLeader() }
                        val next = operator.campaign(
                            election,
                            CampaignOptions(ttl = ttl, wait = Duration.ofSeconds(30)),
                        )
                        assertTrue(next.term > deposed.term)
                        fence.fencedExecuteBlocking(next.lease, listOf(Statement.of("SELECT 1")))
                        assertThrows(StaleTokenException::class.java) {
                            fence.fencedExecuteBlocking(deposed.term, listOf(Statement.of("SELECT 1")))
                        }
                        // Leaving withLeadership after the loss is never silent.
                        next.resign()
                        assertThrows(LockLostException::class.java) {
                            runBlocking {
                                candidate.withLeadership(election, CampaignOptions(ttl = ttl)) {
                                    operator.forceRelease(election)
                                    withTimeout(ttl.toMillis() / 3 + Backends.MARGIN_MS) { it.awaitLost() }
                                }
                            }
                        }
                    }
                }
            }
        }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    fun `a killed leader's process is replaced within its ttl by a candidate with a larger term`(backend: String) {
        Backends.connect(backend).close() // skips when the server is down
        val election = Backends.uniqueName("killed")
        // A short ZooKeeper session plays the part of the ttl.
        val url = Backends.url(backend).let {
            if (backend ==
                "zookeeper"
            ) {
                "$it?session_timeout_ms=2000&tick_ms=500"
            } else {
                it
            }
        }
        val ttl = Duration.ofSeconds(2)
        val dir = Files.createTempDirectory("fencelock-jvm-election").toFile()
        val classPath = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val java = File(System.getProperty("java.home"), "bin/java").path
        val out = File(dir, "leader.out")
        val leader = ProcessBuilder(
            java,
            "-cp",
            classPath,
            ElectionLeader::class.java.name,
            url,
            election,
            ttl.toMillis().toString(),
        )
            .redirectError(File(dir, "leader.err")).redirectOutput(out).start()
        try {
            val started = System.nanoTime()
            while (!out.readText().contains("\n")) {
                assertTrue(leader.isAlive, "the leader process died: " + File(dir, "leader.err").readText())
                assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(60), "the leader never led")
                Thread.sleep(20)
            }
            val term = out.readText().trim().toLong()
            Locker.connect(url).use { standby ->
                assertEquals(term, standby.leaderBlocking(election)?.term)
                leader.destroyForcibly().waitFor()
                val killed = System.nanoTime()
                standby.campaignBlocking(
                    election,
                    CampaignOptions(ttl = ttl, wait = Duration.ofSeconds(30)),
                ).use { next ->
                    val took = Duration.ofNanos(System.nanoTime() - killed)
                    assertTrue(took < ttl.plusMillis(Backends.MARGIN_MS), "the next leader took $took after the kill")
                    assertTrue(next.term > term, "the next term ${next.term} is not larger than $term")
                }
            }
        } finally {
            leader.destroyForcibly()
        }
    }
}

/** The leader process of the kill test: `url election ttlMillis`; prints its term, then leads until killed. */
object ElectionLeader {
    @JvmStatic
    fun main(args: Array<String>) {
        val (url, election, ttlMillis) = args
        val locker = Locker.connect(url)
        val leadership = locker.campaignBlocking(election, CampaignOptions(ttl = Duration.ofMillis(ttlMillis.toLong())))
        println(leadership.term)
        System.out.flush()
        Thread.sleep(Long.MAX_VALUE)
    }
}
