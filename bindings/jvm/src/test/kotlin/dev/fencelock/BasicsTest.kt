package dev.fencelock

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.time.Duration
import java.time.Instant
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference

/** The API's shape on every backend: acquire, tokens, try-acquire, release, timeouts, cancellation. */
class BasicsTest {
    companion object {
        @JvmStatic
        fun backends() = Backends.names()
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `acquire, tokens increase, another client's try-acquire sees the holder, release frees`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                Backends.connect(backend).use { other ->
                    val name = Backends.uniqueName("basics")
                    val first = locker.acquire(name, LockOptions(ttl = Duration.ofSeconds(10)))
                    assertEquals(name, first.name)
                    assertTrue(first.token > 0)
                    assertTrue(first.isHeld)
                    assertFalse(first.isLost)
                    assertNull(other.tryAcquire(name), "a second holder while the first holds")
                    val info = other.inspect(name)
                    assertTrue(info.held)
                    assertEquals(first.token, info.token)
                    assertEquals("jvm", info.holder?.language)
                    first.release()
                    assertFalse(first.isHeld)
                    assertThrows(LockNotHeldException::class.java) { first.releaseBlocking() }
                    val second = other.tryAcquire(name) ?: fail("the lock is free after release")
                    assertTrue(second.token > first.token, "tokens strictly increase: ${second.token} > ${first.token}")
                    second.close()
                    second.close() // quiet: already released
                }
            }
        }

    @ParameterizedTest
    @MethodSource("backends")
    fun `validUntil is the client deadline, ahead by about the ttl, not after expiresAt`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                val name = Backends.uniqueName("valid-until")
                val lease = locker.acquire(name, LockOptions(ttl = Duration.ofSeconds(10)))
                val validUntil = lease.validUntil
                val expiresAt = lease.expiresAt
                val now = Instant.now()
                // About the ttl ahead (on ZooKeeper the session timeout's: 10 s by default), less
                // the time acquire took and the drift allowance; never more than it from now.
                assertTrue(validUntil > now.plusSeconds(5), "valid until $validUntil, now $now")
                assertTrue(validUntil <= now.plusSeconds(10), "valid until $validUntil, now $now")
                // The client gives up before the server could let another holder in.
                expiresAt?.let { assertTrue(validUntil <= it, "valid until $validUntil, expires $it") }
                lease.release()
                assertNotNull(lease.validUntil, "still there once released")
                assertTrue(lease.validUntil <= Instant.now().plusSeconds(10))
            }
        }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a wait that runs out throws LockTimeoutException, and a cancelled acquire leaves nothing behind`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { holder ->
            Backends.connect(backend).use { waiter ->
                val name = Backends.uniqueName("timeout")
                val lease = holder.acquireBlocking(name, LockOptions(ttl = Duration.ofSeconds(20)))
                val started = System.nanoTime()
                assertThrows(LockTimeoutException::class.java) {
                    waiter.acquireBlocking(name, LockOptions.builder().wait(Duration.ofMillis(300)).build())
                }
                val waited = Duration.ofNanos(System.nanoTime() - started)
                assertTrue(waited >= Duration.ofMillis(250), "gave up after $waited, before the 300 ms wait")
                assertNull(waiter.tryAcquireBlocking(name))

                // A coroutine cancelled while waiting: its place in any queue goes away with it.
                assertThrows(TimeoutCancellationException::class.java) {
                    runBlocking { withTimeout(300) { waiter.acquire(name) } }
                }
                // A thread interrupted while waiting: the same, as Java's InterruptedException with
                // the interrupt flag cleared (as Java's own blocking calls leave it).
                val outcome = AtomicReference<Throwable?>()
                val flagAfter = AtomicReference<Boolean>()
                val thread = Thread {
                    try {
                        waiter.acquireBlocking(name)
                    } catch (e: Throwable) {
                        outcome.set(e)
                        flagAfter.set(Thread.currentThread().isInterrupted)
                    }
                }
                thread.start()
                Backends.awaitWaiting(thread, "the acquire of a held lock")
                thread.interrupt()
                thread.join(10_000)
                assertTrue(outcome.get() is InterruptedException, "interrupt gave ${outcome.get()}")
                assertEquals(
                    false,
                    flagAfter.get(),
                    "the interrupt flag is cleared, as InterruptedException's convention",
                )

                lease.release()
                // Nothing left behind: a third client gets the lock. Not always at once: a waiter's
                // attempt already sent when it was cancelled may still take the lock for its
                // owner id, which the in-flight guard then releases in the background.
                Backends.connect(backend).use { third ->
                    val deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos()
                    var next = third.tryAcquire(name)
                    while (next == null && System.nanoTime() < deadline) {
                        delay(20)
                        next = third.tryAcquire(name)
                    }
                    val free = next ?: fail("a cancelled waiter kept the lock or its place")
                    assertTrue(free.token > lease.token)
                    free.release()
                }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `withLock releases, re-entry counts per coroutine and per thread, DEADLOCK without reentrant`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("scope")
            val token = locker.withLock(name, LockOptions(ttl = Duration.ofSeconds(10))) { lease ->
                val inner = locker.acquire(name, LockOptions(reentrant = true))
                assertEquals(lease.token, inner.token, "re-entry shares the lease")
                inner.release()
                assertTrue(lease.isHeld, "the outer acquisition still holds")
                val deadlock = runCatching { locker.tryAcquire(name) }.exceptionOrNull()
                assertTrue(deadlock is LockDeadlockException, "non-reentrant re-acquire in the block gave $deadlock")
                // Code in withContext inside the block is still the block's scope.
                val nested = withContext(Dispatchers.Default) { locker.acquire(name, LockOptions(reentrant = true)) }
                assertEquals(lease.token, nested.token)
                nested.release()
                // Another client contends.
                Backends.connect(backend).use { other -> assertNull(other.tryAcquire(name)) }
                lease.token
            }
            val after = locker.tryAcquireBlocking(name) ?: fail("withLock released")
            assertTrue(after.token > token)
            val nested = locker.acquireBlocking(name, LockOptions(reentrant = true))
            assertEquals(after.token, nested.token)
            assertThrows(LockDeadlockException::class.java) { locker.acquireBlocking(name) }
            nested.close()
            after.close()
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `Java's blocking and CompletableFuture faces`(backend: String) {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("java-faces")
            val lease = locker.acquireAsync(name).get(30, TimeUnit.SECONDS)
            val released = CountDownLatch(1)
            val future = locker.acquireAsync(name, LockOptions.builder().ttl(Duration.ofSeconds(10)).build())
            Thread.sleep(100)
            assertFalse(future.isDone, "the lock is held")
            lease.releaseBlocking()
            released.countDown()
            val next = future.get(30, TimeUnit.SECONDS)
            assertTrue(next.token > lease.token)
            assertEquals(42, locker.withLockBlocking(Backends.uniqueName("with")) { 42 })
            next.close()
        }
    }
}
