package dev.fencelock

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.nio.file.Files
import java.time.Duration

/**
 * Read-write locks (issue 29) on every backend that offers them: readers share, a writer excludes
 * readers and writers, as inspect shows; re-entry per thread and coroutine by the core's rules; a
 * write lease guards a fence and a read or permit lease cannot; one name is one kind at a time.
 * (A waiting writer going before later readers is the core's own behaviour, the conformance
 * suite's: rwlock.rs, a_waiting_writer_goes_before_readers_that_arrive_after_it.)
 */
class ReadWriteLockTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.withReadWriteLocks()

        private val TTL: Duration = Duration.ofSeconds(10)

        /** A wait that runs out: the lock stays taken meanwhile. */
        private val SHORT_WAIT: Duration = Duration.ofMillis(200)

        /** The fence of the fence test: SQLite, independent of the lock's backend. */
        private val fenceUrl: String by lazy {
            val dir = Files.createTempDirectory("fencelock-jvm-rw-fence")
            "sqlite://${dir.resolve("fence.db").toAbsolutePath()}"
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `readers share, a writer excludes readers and writers, inspect shows every lease`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                Backends.connect(backend).use { other ->
                    val name = Backends.uniqueName("rw-share")
                    val (read, write) = locker.readLock(name) to locker.writeLock(name)
                    assertEquals(LockMode.READ, read.mode)
                    assertEquals(LockMode.WRITE, write.mode)
                    assertNull(read.permits)
                    val options = LockOptions(ttl = TTL, holder = "catalog")
                    val readers = listOf(
                        elsewhere { read.acquire(options) },
                        other.readLock(name).tryAcquire(options) ?: fail("a second reader was refused"),
                    )
                    assertTrue(readers.all { it.mode == LockMode.READ }, "$readers")
                    for (writer in listOf(write, other.writeLock(name))) {
                        assertNull(elsewhere { writer.tryAcquire() }, "a writer beside readers")
                    }
                    thrownBy<LockTimeoutException>("a writer beside readers") {
                        elsewhere { write.acquire(LockOptions(wait = SHORT_WAIT)) }
                    }
                    val readTokens = readers.map { it.token }.toSet()
                    val shared = Backends.inspectUntil(other, name, "both readers") { i ->
                        i.leases.map { it.token }.toSet() == readTokens
                    }
                    assertEquals(LockKind.READ_WRITE, shared.kind)
                    assertNull(shared.permits)
                    assertTrue(shared.held)
                    for (lease in shared.leases) {
                        assertEquals(LockMode.READ, lease.mode, "$shared")
                        assertEquals("catalog", lease.holder?.text, "$shared")
                    }
                    readers.forEach { it.release() }

                    val writing = elsewhere { write.tryAcquire(options) }
                        ?: fail("the writer was refused once the readers left")
                    assertEquals(LockMode.WRITE, writing.mode)
                    assertTrue(writing.token > readTokens.max(), "a write token outranks earlier reads")
                    for (lock in listOf(read, other.readLock(name), other.writeLock(name))) {
                        assertNull(elsewhere { lock.tryAcquire() }, "$lock beside the writer")
                    }
                    val exclusive = Backends.inspectUntil(other, name, "the writer") { i ->
                        i.leases.map { it.token } == listOf(writing.token)
                    }
                    assertEquals(LockMode.WRITE, exclusive.leases.single().mode)
                    writing.release()
                    Backends.inspectUntil(other, name, "the lock free") { !it.held && it.leases.isEmpty() }
                }
            }
        }

    @ParameterizedTest
    @MethodSource("backends")
    fun `re-entry - a writer re-enters and reads under its write lease, a reader asking to write is DEADLOCK`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("rw-reentry")
            val (read, write) = locker.readLock(name) to locker.writeLock(name)
            val reentrant = LockOptions(reentrant = true)
            // Per thread (the blocking forms).
            write.acquireBlocking(LockOptions(ttl = TTL)).use { outer ->
                write.acquireBlocking(reentrant).use { nested -> assertEquals(outer.token, nested.token) }
                val underWrite = read.acquireBlocking(reentrant)
                assertEquals(outer.token, underWrite.token, "a read under the scope's write lease shares it")
                assertEquals(LockMode.WRITE, underWrite.mode)
                underWrite.close()
                assertTrue(outer.isHeld)
                thrownBy<LockDeadlockException>("a nested write without reentrant") { write.acquireBlocking() }
                thrownBy<LockDeadlockException>("a nested read without reentrant") { read.tryAcquireBlocking() }
            }
            read.acquireBlocking().use { outer ->
                read.acquireBlocking(reentrant).use { nested ->
                    assertEquals(outer.token, nested.token)
                    assertEquals(LockMode.READ, nested.mode)
                }
                // Its write would wait for its own read forever: DEADLOCK at once, reentrant or not.
                thrownBy<LockDeadlockException>("a write under the scope's read") { write.acquireBlocking(reentrant) }
            }
            // Per coroutine (the suspend forms).
            read.withLock { lease ->
                assertEquals(LockMode.READ, lease.mode)
                thrownBy<LockDeadlockException>("a write in a read's withLock") { write.tryAcquire() }
                val nested = read.acquire(reentrant)
                assertEquals(lease.token, nested.token)
                nested.release()
            }
            val after = write.tryAcquire() ?: fail("withLock released its read lease")
            after.release()
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a write lease guards a fence and a read or permit lease cannot, one name is one kind`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                Fence.open(fenceUrl, Backends.uniqueName("rw-fence")).use { fence ->
                    val name = Backends.uniqueName("rw-fenced")
                    val write = listOf(Statement.of("CREATE TABLE IF NOT EXISTS rw_fenced (token INTEGER)"))
                    val reading = locker.readLock(name).acquire()
                    val permit = if (Backends.offersSemaphores(backend)) {
                        elsewhere { locker.semaphore(Backends.uniqueName("rw-permit"), 2).acquire() }
                    } else {
                        null
                    }
                    for (shared in listOfNotNull(reading, permit)) {
                        assertFalse(shared.mode.isExclusive)
                        val refused = thrownBy<LockInvalidArgumentException>("a fenced write, ${shared.mode}") {
                            fence.fencedExecute(shared, write)
                        }
                        assertTrue("cannot guard a fence" in refused.message!!, refused.message)
                        thrownBy<LockInvalidArgumentException>("a fence check, ${shared.mode}") {
                            fence.check(shared)
                        }
                        assertTrue(shared.isHeld)
                    }
                    assertNull(fence.highest(), "a shared lease's token was recorded")

                    // The name is a read-write lock while it is in use: not a mutex, nor a semaphore.
                    thrownBy<LockInvalidArgumentException>("a mutex of a read-locked name") {
                        elsewhere { locker.tryAcquire(name) }
                    }
                    if (permit != null) {
                        val conflict = thrownBy<LockInvalidArgumentException>("a semaphore of a read-locked name") {
                            elsewhere { locker.semaphore(name, 2).tryAcquire() }
                        }
                        assertTrue(name in conflict.message!!, conflict.message)
                    }
                    reading.release()
                    permit?.release()

                    val writing = locker.writeLock(name).acquire()
                    assertTrue(writing.mode.isExclusive)
                    fence.fencedExecute(writing, write)
                    assertEquals(writing.token, fence.highest())
                    fence.check(writing)
                    writing.release()

                    // Idle, the name may be a mutex again.
                    val mutex = locker.mutex(name).acquire()
                    assertEquals(LockMode.EXCLUSIVE, mutex.mode)
                    assertTrue(mutex.token > writing.token, "one counter for every kind of the name")
                    mutex.release()
                }
            }
        }
}
