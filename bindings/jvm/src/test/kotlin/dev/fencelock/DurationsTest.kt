package dev.fencelock

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.nio.file.Path
import java.time.Duration

/**
 * Every duration or timeout the API takes, with every odd value a java.time.Duration can hold:
 * each call either works (then is undone) or throws [LockInvalidArgumentException]; never
 * INTERNAL (a panic caught in Rust), never an exception of another type.
 */
class DurationsTest {
    @TempDir
    lateinit var dir: Path

    private val odd =
        listOf(
            Duration.ZERO,
            Duration.ofNanos(1),
            Duration.ofNanos(-1),
            Duration.ofSeconds(-1),
            Duration.ofDays(365L * 10_000),
            Duration.ofMillis(Long.MAX_VALUE),
            Duration.ofSeconds(Long.MAX_VALUE, 999_999_999),
            Duration.ofSeconds(Long.MIN_VALUE),
        )

    @Test
    fun `no duration or timeout reaches a panic`() {
        val url = "sqlite://${dir.resolve("locks.db")}"
        val locker = Locker.connect(url)
        val lease = locker.acquireBlocking("odd-durations")
        // Lost already: waitLost answers at once whatever its timeout.
        val lost = locker.acquireBlocking(
            "odd-lost",
            LockOptions.builder().ttl(Duration.ofMillis(200)).autoRenew(false).build(),
        )
        val until = System.nanoTime() + Duration.ofSeconds(30).toNanos()
        while (!lost.isLost) {
            check(System.nanoTime() < until) { "the lease was never lost" }
            Thread.sleep(20)
        }
        var n = 0
        fun fresh() = "odd-${n++}"
        fun opts(build: LockOptions.Builder.() -> Unit) = LockOptions.builder().apply(build).build()

        val calls: Map<String, (Duration) -> Any?> =
            mapOf(
                "connect operationTimeout" to { d -> Locker.connect(url, ConnectOptions(operationTimeout = d)) },
                "connect pollInterval" to { d -> Locker.connect(url, ConnectOptions(pollInterval = d)) },
                "Fence.open operationTimeout" to { d ->
                    Fence.open("sqlite://${dir.resolve("fence.db")}", "odd", FenceOptions(operationTimeout = d))
                },
                "acquire ttl" to { d -> locker.acquireBlocking(fresh(), opts { ttl(d) }) },
                "acquire wait" to { d -> locker.acquireBlocking(fresh(), opts { wait(d) }) },
                "acquire maxHold" to { d -> locker.acquireBlocking(fresh(), opts { maxHold(d) }) },
                "tryAcquire ttl" to { d -> locker.tryAcquireBlocking(fresh(), opts { ttl(d) }) },
                "campaign wait" to { d -> locker.campaignBlocking(fresh(), CampaignOptions(wait = d)) },
                "extend" to { d -> lease.extendBlocking(d) },
                "waitLost of a lost lease" to { d -> lost.waitLost(d) },
                "awaitTermination of a closed subscription" to { d ->
                    locker.onEvent({ }).let {
                        it.close()
                        it.awaitTermination(d)
                    }
                },
            )
        var accepted = 0
        var refused = 0
        try {
            for ((what, call) in calls) {
                for (d in odd) {
                    val result =
                        try {
                            call(d)
                        } catch (e: LockInvalidArgumentException) {
                            assertEquals(ErrorCode.INVALID_ARGUMENT, e.code, "$what($d)")
                            refused++
                            continue
                        } catch (e: Throwable) {
                            fail<Unit>("$what($d) threw ${e::class.qualifiedName}: ${e.message}", e)
                            continue
                        }
                    accepted++
                    when (result) {
                        is Locker -> result.close()
                        is Fence -> result.close()
                        is Lease -> result.releaseBlocking()
                        is Leadership -> result.resignBlocking()
                    }
                }
            }
        } finally {
            lease.releaseBlocking()
            locker.close()
        }
        assertTrue(accepted > 0 && refused > 0, "accepted $accepted, refused $refused")
        assertEquals(calls.size * odd.size, accepted + refused)
    }
}
