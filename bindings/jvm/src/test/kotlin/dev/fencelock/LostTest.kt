package dev.fencelock

import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.time.Duration
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit

/** The lost notification (listener, coroutine, future) and fences. */
class LostTest {
    companion object {
        /** Backends with a ttl: there a lease that is not renewed is lost at its deadline. */
        @JvmStatic
        fun ttlBackends() = Backends.withTtl()

        @JvmStatic
        fun fenceBackends() = Backends.withFences()
    }

    @ParameterizedTest
    @MethodSource("ttlBackends")
    fun `a lease that is not renewed is lost - listener, awaitLost, future, LOST on use and on leaving its block`(
        backend: String,
    ) {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("lost")
            val lease = locker.acquireBlocking(name, LockOptions(ttl = Duration.ofSeconds(2), autoRenew = false))
            val heard = CompletableFuture<Pair<LossReason, String>>()
            lease.onLost { reason, message -> heard.complete(reason to message) }
            val future = lease.lostFuture()
            val awaited = runBlocking { withTimeout(10_000) { lease.awaitLost() } }
            assertEquals(LossReason.EXPIRED, awaited)
            val (reason, message) = heard.get(10, TimeUnit.SECONDS)
            assertEquals(LossReason.EXPIRED, reason)
            assertTrue(message.contains(name), message)
            assertEquals(LossReason.EXPIRED, future.get(10, TimeUnit.SECONDS))
            assertTrue(lease.isLost)
            assertTrue(lease.waitLost(Duration.ZERO))
            assertEquals(LossReason.EXPIRED, lease.lostReason)
            assertThrows(LockLostException::class.java) { lease.ensureHeld() }
            assertThrows(LockLostException::class.java) { lease.extendBlocking() }
            // Leaving try-with-resources after the loss is loud.
            assertThrows(LockLostException::class.java) { lease.close() }
            // A listener added after the loss runs too.
            val late = CompletableFuture<LossReason>()
            lease.onLost { r, _ -> late.complete(r) }
            assertEquals(LossReason.EXPIRED, late.get(10, TimeUnit.SECONDS))
        }
    }

    @ParameterizedTest
    @MethodSource("ttlBackends")
    fun `withLock throws LOST after a block that outlived its lease`(backend: String) {
        Backends.connect(backend).use { locker ->
            val name = Backends.uniqueName("lost-block")
            val thrown = runCatching {
                runBlocking {
                    locker.withLock(name, LockOptions(ttl = Duration.ofSeconds(2), autoRenew = false)) { lease ->
                        lease.awaitLost()
                    }
                }
            }.exceptionOrNull()
            assertTrue(thrown is LockLostException, "got $thrown")
        }
    }

    @ParameterizedTest
    @MethodSource("fenceBackends")
    fun `a fence refuses an older token and a lost lease`(backend: String) {
        Locker.connect(Backends.scratchSqliteUrl("fence-locks")).use { locker ->
            val name = Backends.uniqueName("fence")
            Backends.openFence(backend, name).use { fence ->
                val first = locker.acquireBlocking(name)
                first.releaseBlocking()
                val second = locker.acquireBlocking(name, LockOptions(ttl = Duration.ofSeconds(2), autoRenew = false))
                if (backend == "redis") {
                    fence.fencedSetBlocking(second, "$name-key", "v2")
                    assertThrows(StaleTokenException::class.java) {
                        fence.fencedSetBlocking(first.token, "$name-key", "v1".toByteArray())
                    }
                } else {
                    val rows = fence.fencedExecuteBlocking(second, listOf(Statement.of("SELECT 1")))
                    assertEquals(1, rows.size)
                    assertThrows(StaleTokenException::class.java) {
                        fence.fencedExecuteBlocking(first.token, listOf(Statement.of("SELECT 1")))
                    }
                }
                assertThrows(StaleTokenException::class.java) { fence.checkBlocking(first.token) }
                fence.checkBlocking(second)
                assertEquals(second.token, fence.highestBlocking())
                assertTrue(second.waitLost(Duration.ofSeconds(10)))
                assertThrows(LockLostException::class.java) { fence.checkBlocking(second) }
            }
        }
    }
}
