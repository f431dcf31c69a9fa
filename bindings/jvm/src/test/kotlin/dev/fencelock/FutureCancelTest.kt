package dev.fencelock

import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.ValueSource
import java.time.Duration
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit
import java.util.concurrent.TimeoutException
import kotlin.random.Random

/**
 * A `CompletableFuture` of an acquire that is cancelled, or times out (`orTimeout`), around the
 * moment the lock is granted never leaves a lease behind: what it got is released at once, not
 * when the JVM collects the lease. The futures of every mode share one path in the binding, so
 * SQLite and Redis (two latencies) stand for every backend.
 */
class FutureCancelTest {
    private val rounds = 60

    /** Each form of an acquire as a future, and how to let go of what it returns. */
    private enum class Form { ACQUIRE, LOCK_MANY, CAMPAIGN }

    private fun start(locker: Locker, form: Form, name: String): CompletableFuture<out Any> = when (form) {
        Form.ACQUIRE -> locker.acquireAsync(name)
        Form.LOCK_MANY -> locker.lockManyAsync(listOf(name))
        Form.CAMPAIGN -> locker.campaignAsync(name)
    }

    private fun letGo(acquired: Any) = when (acquired) {
        is Lease -> acquired.releaseBlocking()
        is MultiLease -> acquired.releaseBlocking()
        is Leadership -> acquired.resignBlocking()
        else -> error("unexpected $acquired")
    }

    /** How long one uncontended acquire of [form] takes here: the cancellations aim around it. */
    private fun typicalLatencyNanos(locker: Locker, form: Form): Long {
        val samples = (1..5).map {
            val started = System.nanoTime()
            letGo(start(locker, form, Backends.uniqueName("latency")).get(30, TimeUnit.SECONDS))
            System.nanoTime() - started
        }
        return samples.sorted()[2]
    }

    @ParameterizedTest
    @ValueSource(strings = ["sqlite", "redis"])
    fun `a future cancelled or timed out around the grant leaves no lease held`(backend: String): Unit = runBlocking {
        Backends.connect(backend).use { locker ->
            Backends.connect(backend).use { other ->
                for (form in Form.values()) {
                    val latency = typicalLatencyNanos(locker, form)
                    val names = (1..rounds).map { Backends.uniqueName("future-cancel-$it") }
                    for ((i, name) in names.withIndex()) {
                        val future = start(locker, form, name)
                        // Anywhere from at once to past the usual grant.
                        val until = System.nanoTime() + Random.nextLong(latency * 3 / 2 + 1)
                        while (System.nanoTime() < until) Thread.onSpinWait()
                        if (i % 2 == 0) {
                            future.cancel(true)
                        } else {
                            future.completeExceptionally(TimeoutException("as orTimeout does"))
                        }
                        // Completed before it could be stopped: the caller has it and lets go.
                        if (!future.isCompletedExceptionally) future.getNow(null)?.let(::letGo)
                    }
                    // Every name is free soon: a grant nobody received was given back at once
                    // (in the background), not kept renewing.
                    val deadline = System.nanoTime() + Duration.ofMillis(Backends.MARGIN_MS).toNanos()
                    var stillHeld = names.filter { other.inspect(it).held }
                    while (stillHeld.isNotEmpty() && System.nanoTime() < deadline) {
                        delay(50)
                        stillHeld = stillHeld.filter { other.inspect(it).held }
                    }
                    assertEquals(emptyList<String>(), stillHeld, "$form: held by a future nobody received")
                }
            }
        }
    }
}
