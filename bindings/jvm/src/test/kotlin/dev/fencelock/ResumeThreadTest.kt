package dev.fencelock

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.ValueSource
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit
import kotlin.coroutines.Continuation
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.coroutines.startCoroutine

/**
 * A coroutine without a dispatcher (`suspend fun main`, `Dispatchers.Unconfined`) goes on after a
 * fencelock call on a thread of its own choosing, never on the fencelock runtime thread that
 * completed the call: blocking there (a `use {}` that closes the Locker) waited for that same
 * thread for ever. Redis stands for the backends whose calls complete on the runtime.
 */
class ResumeThreadTest {
    /** Runs [body] as `suspend fun main` runs it: no dispatcher, no job. */
    private fun <T> withoutDispatcher(body: suspend () -> T): CompletableFuture<T> {
        val done = CompletableFuture<T>()
        body.startCoroutine(Continuation(EmptyCoroutineContext) { done.complete(it.getOrThrow()) })
        return done
    }

    private suspend fun acquireAndClose(backend: String): List<String> {
        val threads = mutableListOf<String>()
        Backends.connect(backend).use { locker ->
            val lease = locker.acquire("resume-${System.nanoTime()}")
            threads += Thread.currentThread().name
            lease.release()
            threads += Thread.currentThread().name
            locker.inspect("resume-nothing")
            threads += Thread.currentThread().name
        } // close(), blocking, on whatever thread the last call left this coroutine on
        return threads
    }

    @ParameterizedTest
    @ValueSource(strings = ["sqlite", "redis"])
    fun `a coroutine without a dispatcher goes on off the runtime and can close its Locker`(backend: String) {
        val threads = withoutDispatcher { acquireAndClose(backend) }.get(30, TimeUnit.SECONDS)
        assertEquals(3, threads.size)
        threads.forEach { assertFalse(it.startsWith("fencelock-rt"), "went on on $it") }
    }

    @ParameterizedTest
    @ValueSource(strings = ["sqlite", "redis"])
    fun `an unconfined coroutine goes on off the runtime and can close its Locker`(backend: String) {
        val threads =
            withoutDispatcher { withContext(Dispatchers.Unconfined) { acquireAndClose(backend) } }
                .get(30, TimeUnit.SECONDS)
        threads.forEach { assertFalse(it.startsWith("fencelock-rt"), "went on on $it") }
    }
}
