package dev.fencelock

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.io.File
import java.nio.file.Files
import java.time.Duration
import java.util.Collections
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

/**
 * Contention on every backend: several threads sharing one Locker and several Lockers, then two
 * JVM processes (this one and a worker). Each holder increments a counter by an unprotected
 * read-modify-write (lost updates would show an overlap) and through a fence (a stale token would
 * be refused), and records its token; tokens must strictly increase in the order the holders ran.
 */
class ContentionTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.names()

        /** The fence every contention test counts in: SQLite, independent of the lock's backend. */
        val fenceUrl: String by lazy {
            val dir = Files.createTempDirectory("fencelock-jvm-fence")
            "sqlite://${dir.resolve("fence.db").toAbsolutePath()}"
        }

        fun fencedCount(fence: Fence, lease: Lease, counter: String) {
            fence.fencedExecuteBlocking(
                lease,
                listOf(
                    Statement.of("CREATE TABLE IF NOT EXISTS jvm_counter (name TEXT PRIMARY KEY, n INTEGER NOT NULL)"),
                    Statement.of("INSERT OR IGNORE INTO jvm_counter (name, n) VALUES (?, 0)", counter),
                    Statement.of("UPDATE jvm_counter SET n = n + 1 WHERE name = ?", counter),
                ),
            )
        }

        /** Whether the fenced counter equals [expected], asked through the fence itself. */
        private fun fencedCountIs(fence: Fence, lease: Lease, counter: String, expected: Int): Boolean =
            fence.fencedExecuteBlocking(
                lease,
                listOf(Statement.of("UPDATE jvm_counter SET n = n WHERE name = ? AND n = ?", counter, expected)),
            ) == listOf(1L)
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `threads of one process take turns, with strictly increasing tokens`(backend: String) {
        val threads = 4
        val rounds = 8
        val name = Backends.uniqueName("threads")
        val counter = name
        val lockers = listOf(Backends.connect(backend), Backends.connect(backend))
        val fence = Fence.open(fenceUrl, name)
        var unprotected = 0
        val tokens = Collections.synchronizedList(mutableListOf<Long>())
        val pool = Executors.newFixedThreadPool(threads)
        try {
            val work = (0 until threads).map { t ->
                pool.submit {
                    val locker = lockers[t % lockers.size]
                    repeat(rounds) {
                        locker.acquireBlocking(name, LockOptions(ttl = Duration.ofSeconds(15))).use { lease ->
                            tokens.add(lease.token)
                            val seen = unprotected
                            Thread.sleep(2)
                            unprotected = seen + 1
                            fencedCount(fence, lease, counter)
                        }
                    }
                }
            }
            work.forEach { it.get(120, TimeUnit.SECONDS) }
            assertEquals(threads * rounds, unprotected, "an update was lost: two holders overlapped")
            assertEquals(tokens.sorted().distinct(), tokens.toList(), "tokens did not strictly increase: $tokens")
            lockers[0].acquireBlocking(name).use { lease ->
                assertTrue(
                    fencedCountIs(fence, lease, counter, threads * rounds),
                    "the fenced counter is not ${threads * rounds}",
                )
            }
        } finally {
            pool.shutdownNow()
            fence.close()
            lockers.forEach { it.close() }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `two JVM processes take turns, with strictly increasing tokens`(backend: String) {
        // This JVM is one of the two: one more JVM to start per backend, not two.
        Backends.connect(backend).use { locker ->
            val rounds = 10
            val name = Backends.uniqueName("processes")
            val dir = Files.createTempDirectory("fencelock-jvm-two-processes").toFile()
            val counterFile = File(dir, "counter").apply { writeText("0") }
            val (out, err) = File(dir, "worker.out") to File(dir, "worker.err")
            val classPath = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
            val java = File(System.getProperty("java.home"), "bin/java").path
            val worker = ProcessBuilder(
                java, "-cp", classPath, ContentionWorker::class.java.name,
                Backends.url(backend), name, fenceUrl, counterFile.path, rounds.toString(),
            ).redirectError(err).redirectOutput(out).start()
            try {
                // Both start their turns together, or the one that started first could be done before
                // the other JVM has even connected: the worker says it is ready, then waits for "go".
                val started = System.nanoTime()
                while (!out.readText().startsWith(ContentionWorker.READY)) {
                    assertTrue(worker.isAlive, "the worker died: " + err.readText())
                    assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(60), "the worker never got ready")
                    Thread.sleep(20)
                }
                worker.outputStream.bufferedWriter().apply {
                    write("go\n")
                    flush()
                }
                val mine = mutableListOf<String>()
                Fence.open(fenceUrl, name).use { fence ->
                    ContentionWorker.takeTurns(locker, fence, name, counterFile, rounds) { mine += it }
                }
                assertTrue(worker.waitFor(180, TimeUnit.SECONDS), "the worker did not finish")
                assertEquals(0, worker.exitValue(), "the worker failed: " + err.readText())
                // Each line: the counter value the holder wrote, and its token.
                val turns = (mine + out.readLines().drop(1)).filter { it.isNotBlank() }.map { line ->
                    val (value, token) = line.trim().split(" ").map(String::toLong)
                    value to token
                }.sortedBy { it.first }
                assertEquals(
                    (1..2 * rounds).map(Int::toLong),
                    turns.map { it.first },
                    "an update was lost: two holders overlapped",
                )
                val tokens = turns.map { it.second }
                assertEquals(
                    tokens.sorted().distinct(),
                    tokens,
                    "tokens did not strictly increase across processes: $tokens",
                )
                assertEquals((2 * rounds).toString(), counterFile.readText().trim())
                Fence.open(fenceUrl, name).use { fence ->
                    locker.acquireBlocking(name).use { lease ->
                        assertTrue(
                            fencedCountIs(fence, lease, name, 2 * rounds),
                            "the fenced counter is not ${2 * rounds}",
                        )
                    }
                }
            } finally {
                worker.destroyForcibly()
            }
        }
    }
}

/**
 * The other JVM of the two-process test: `url name fenceUrl counterFile rounds`. It connects,
 * prints [READY], waits for a line on its standard input, then takes its turns ([takeTurns]).
 */
object ContentionWorker {
    const val READY = "ready"

    @JvmStatic
    fun main(args: Array<String>) {
        val (url, name, fenceUrl, counterPath) = args
        val rounds = args[4].toInt()
        Locker.connect(url).use { locker ->
            Fence.open(fenceUrl, name).use { fence ->
                println(READY)
                System.out.flush()
                checkNotNull(readlnOrNull()) { "the test ended before it said go" }
                takeTurns(locker, fence, name, File(counterPath), rounds) { println(it) }
            }
        }
    }

    /**
     * [rounds] turns: each acquires, increments the file counter and the fenced counter, reports
     * "value token", releases.
     */
    fun takeTurns(
        locker: Locker,
        fence: Fence,
        name: String,
        counterFile: File,
        rounds: Int,
        report: (String) -> Unit,
    ) {
        repeat(rounds) {
            locker.acquireBlocking(name, LockOptions(ttl = Duration.ofSeconds(15))).use { lease ->
                val value = counterFile.readText().trim().toLong() + 1
                Thread.sleep(2)
                counterFile.writeText(value.toString())
                ContentionTest.fencedCount(fence, lease, name)
                report("$value ${lease.token}")
            }
        }
    }
}
