package dev.fencelock

import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.time.Duration
import java.util.concurrent.TimeUnit

/**
 * Semaphores (issue 29) on every backend that offers them: at most N permit leases at once, each
 * with its own token, in the suspend, blocking and `CompletableFuture` forms; inspect shows the
 * kind, the count and every holder; re-entry per thread and per coroutine; a forced release is
 * heard as a loss; and the backend without semaphores (Redlock) refuses them.
 */
class SemaphoreTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.withSemaphores()

        @JvmStatic
        fun refusing() = Backends.withoutSemaphores()

        private val TTL: Duration = Duration.ofSeconds(10)

        /** A wait that runs out: the permits stay taken meanwhile. */
        private val SHORT_WAIT: Duration = Duration.ofMillis(200)

        /** A wait that lasts until the test's deadline. */
        private val LONG_WAIT: Duration = Duration.ofMillis(Backends.MARGIN_MS)
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `N holders at once, the N+1-th times out, a waiter gets the freed permit, inspect shows them all`(
        backend: String,
    ): Unit = runBlocking {
        val n = 3
        Backends.connect(backend).use { locker ->
            Backends.connect(backend).use { other ->
                val name = Backends.uniqueName("sem-admits")
                val locks = listOf(locker.semaphore(name, n), other.semaphore(name, n))
                assertEquals(name, locks[0].name)
                assertEquals(LockMode.PERMIT, locks[0].mode)
                assertEquals(n, locks[0].permits)
                val options = LockOptions(ttl = TTL, holder = "report job")
                val leases = mutableListOf<Lease>()
                // Each permit is taken by a coroutine of its own, as by workers of their own (one
                // scope asking twice would be DEADLOCK).
                for (i in 0 until n) {
                    val lease = elsewhere { locks[i % 2].tryAcquire(options) }
                        ?: fail("permit ${i + 1} of $n was refused")
                    assertEquals(LockMode.PERMIT, lease.mode)
                    leases.lastOrNull()?.let { assertTrue(lease.token > it.token, "$lease after $it") }
                    leases += lease
                }
                for (lock in locks) assertNull(elsewhere { lock.tryAcquire() }, "a permit beyond $n")
                thrownBy<LockTimeoutException>("the permit beyond $n") {
                    elsewhere { locks[1].acquire(LockOptions(wait = SHORT_WAIT)) }
                }

                val tokens = leases.map { it.token }.toSet()
                val info = Backends.inspectUntil(other, name, "the $n permits") { i ->
                    i.leases.map { it.token }.toSet() == tokens
                }
                assertTrue(info.held)
                assertEquals(LockKind.SEMAPHORE, info.kind)
                assertEquals(n, info.permits)
                assertNull(info.holder, "a semaphore's holders are its leases")
                for (shown in info.leases) {
                    assertEquals(LockMode.PERMIT, shown.mode)
                    assertEquals("report job", shown.holder?.text)
                    assertEquals("jvm", shown.holder?.language)
                    if (backend == "zookeeper") {
                        assertNull(shown.timeLeft, "ZooKeeper has no ttl")
                    } else {
                        val left = shown.timeLeft ?: fail("no time left: $info")
                        assertTrue(left > Duration.ZERO && left <= TTL, "time left $left")
                    }
                }

                // Another count while the semaphore is in use is refused, naming the lock.
                val disagreeing = thrownBy<LockInvalidArgumentException>("2 permits while 3 are in use") {
                    other.semaphore(name, 2).tryAcquire()
                }
                assertTrue(name in disagreeing.message!!, disagreeing.message)

                // A waiter registers (inspect shows it) and gets the first permit freed.
                val waiting = async { other.semaphore(name, n).acquire(LockOptions(wait = LONG_WAIT)) }
                Backends.inspectUntil(locker, name, "the waiter") { it.waiters.isNotEmpty() }
                val freed = leases.removeAt(1)
                freed.release()
                val next = withTimeout(Backends.MARGIN_MS) { waiting.await() }
                assertEquals(LockMode.PERMIT, next.mode)
                assertTrue(next.token > tokens.max(), "the waiter's token ${next.token} after $tokens")
                leases += next
                for (lease in leases) lease.release()
                Backends.inspectUntil(locker, name, "the semaphore free") { !it.held && it.leases.isEmpty() }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `blocking and CompletableFuture forms, AutoCloseable permits, re-entry per thread and per coroutine`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { locker ->
            Backends.connect(backend).use { other ->
                val name = Backends.uniqueName("sem-forms")
                val reports = locker.semaphore(name, 2)
                val options = LockOptions(ttl = TTL)
                reports.acquireBlocking(options).use { outer ->
                    // The same thread re-enters its permit with reentrant: one permit, one token.
                    val nested = reports.acquireBlocking(LockOptions(reentrant = true))
                    assertEquals(outer.token, nested.token)
                    assertEquals(LockMode.PERMIT, nested.mode)
                    nested.close()
                    assertTrue(outer.isHeld, "the outer permit still holds")
                    // Without it, DEADLOCK at once, even though a permit is free.
                    thrownBy<LockDeadlockException>("a nested permit without reentrant") { reports.acquireBlocking() }
                    thrownBy<LockDeadlockException>("a nested try without reentrant") { reports.tryAcquireBlocking() }
                    // A future is a scope of its own: it takes the second permit.
                    val second = reports.acquireAsync(options).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                    assertTrue(second.token > outer.token)
                    assertNull(other.semaphore(name, 2).tryAcquireBlocking(), "a third permit of 2")
                    second.close()
                    assertEquals(
                        LockMode.PERMIT,
                        other.semaphore(name, 2).withLockBlocking { lease -> lease.mode },
                        "withLockBlocking holds the freed permit",
                    )
                }

                // Per coroutine: the block of withLock is one scope.
                val token = reports.withLock(options) { lease ->
                    val inner = reports.acquire(LockOptions(reentrant = true))
                    assertEquals(lease.token, inner.token)
                    inner.release()
                    thrownBy<LockDeadlockException>("a nested permit in withLock") { reports.tryAcquire() }
                    lease.token
                }
                val after = other.semaphore(name, 2).tryAcquire() ?: fail("withLock released its permit")
                assertTrue(after.token > token)
                after.release()
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a forced release frees every permit, and each holder hears it lost`(backend: String): Unit = runBlocking {
        Backends.connect(backend).use { holder ->
            Backends.connect(backend).use { operator ->
                val name = Backends.uniqueName("sem-forced")
                val lock = holder.semaphore(name, 2)
                // Renewed every second, so the loss is noticed within about that.
                val renewing = LockOptions(ttl = Backends.RENEWING_TTL)
                val old = listOf(
                    lock.acquire(renewing),
                    lock.acquireAsync(renewing).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS),
                )
                val heard = old.map { it.lostFuture() }
                operator.forceRelease(name)
                for ((lease, future) in old.zip(heard)) {
                    assertEquals(LossReason.TAKEN_OVER, future.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS))
                    assertTrue(lease.isLost)
                    assertFalse(lease.isHeld)
                    // Leaving its scope after the loss is not silent.
                    thrownBy<LockLostException>("closing a lost permit") { lease.close() }
                }
                val theirs = operator.semaphore(name, 2)
                val new = List(2) { elsewhere { theirs.tryAcquire() } ?: fail("a permit is still taken") }
                assertTrue(new.all { n -> old.all { n.token > it.token } }, "the fencing counter went back")
                new.forEach { it.release() }
            }
        }
    }

    @Test
    fun `permits outside 1 to 10000 and bad names are refused when the semaphore is made`() {
        Backends.connect("sqlite").use { locker ->
            val name = Backends.uniqueName("sem-range")
            for (permits in listOf(0, -1, 10_001, Int.MAX_VALUE, Int.MIN_VALUE)) {
                val error = thrownBy<LockInvalidArgumentException>("$permits permits") {
                    locker.semaphore(name, permits)
                }
                assertTrue("$permits" in error.message!!, error.message)
            }
            for (bad in listOf("", "a\u0000b", "n".repeat(256))) {
                thrownBy<LockInvalidArgumentException>("the name ${bad.take(8)}") { locker.semaphore(bad, 2) }
                thrownBy<LockInvalidArgumentException>("the name ${bad.take(8)}") { locker.readLock(bad) }
                thrownBy<LockInvalidArgumentException>("the name ${bad.take(8)}") { locker.writeLock(bad) }
            }
            for (permits in listOf(1, 10_000)) {
                locker.semaphore(name, permits).acquireBlocking().use { lease ->
                    assertEquals(LockMode.PERMIT, lease.mode)
                }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("refusing")
    fun `Redlock refuses semaphores with INVALID_ARGUMENT`(backend: String) {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("sem-refused")
            for (permits in listOf(1, 2)) {
                val error = thrownBy<LockInvalidArgumentException>("a semaphore") { locker.semaphore(name, permits) }
                assertTrue("semaphore" in error.message!!, error.message)
            }
            // The mutex is offered everywhere, as a Lock too.
            val mutex = locker.mutex(name)
            assertEquals(LockMode.EXCLUSIVE, mutex.mode)
            assertNull(mutex.permits)
            mutex.acquireBlocking().use { lease -> assertEquals(LockMode.EXCLUSIVE, lease.mode) }
        }
    }
}
