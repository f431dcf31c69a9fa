package dev.fencelock

import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import dev.fencelock.ffi.uniffiRustFutureContinuationCallbackImpl
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.runBlocking
import java.util.WeakHashMap
import java.util.concurrent.CancellationException
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicLong
import kotlin.coroutines.AbstractCoroutineContextElement
import kotlin.coroutines.CoroutineContext

/**
 * How the Kotlin layer waits on the native library, and who the "execution scope" of re-entry is.
 *
 * Suspend calls await uniffi's futures; most blocking calls run the same suspend call in
 * `runBlocking` on the caller's thread (acquire, try-acquire and release block on the native call
 * directly instead, see `Locker.waitFor`: they are the hot path). Interrupting a thread
 * blocked in a call cancels the call (an acquire then leaves nothing behind) and throws
 * [CancellationException] with the interrupt flag set again.
 */
internal object Runtime {
    init {
        // The native runtime's threads call back into the JVM each time a future completes: keep
        // them attached to the JVM between calls instead of attaching and detaching each time.
        Native.setCallbackThreadInitializer(
            uniffiRustFutureContinuationCallbackImpl,
            CallbackThreadInitializer(true, false, "fencelock-rt"),
        )
    }

    /** Runs futures for the `CompletableFuture` faces; its threads never block on fencelock. */
    val futures = CoroutineScope(SupervisorJob() + Dispatchers.Default)

    /** Runs users' lost listeners, so a slow one never holds up the thread that noticed the loss. */
    val listeners: ExecutorService = Executors.newCachedThreadPool { task ->
        Thread(task, "fencelock-lost-listener").apply { isDaemon = true }
    }

    fun ensureLoaded() = Unit
}

/** Runs a suspend call from a plain thread, blocking it. */
internal fun <T> blocking(call: suspend () -> T): T {
    Runtime.ensureLoaded()
    if (Thread.interrupted()) {
        Thread.currentThread().interrupt()
        throw CancellationException("the calling thread was interrupted")
    }
    try {
        return runBlocking { call() }
    } catch (e: InterruptedException) {
        Thread.currentThread().interrupt()
        throw CancellationException("the calling thread was interrupted").apply { initCause(e) }
    }
}

/**
 * Re-entry (docs/design.md §1.5) belongs to an execution scope: a thread for the blocking calls, a coroutine
 * for the suspend ones. Ids are never reused in the process.
 */
internal object Scopes {
    private val next = AtomicLong(1)
    private val threads = ThreadLocal.withInitial { next.getAndIncrement() }
    private val jobs = WeakHashMap<Job, Long>()

    fun fresh(): Long = next.getAndIncrement()

    fun ofThread(): Long = threads.get()

    /**
     * The scope of the calling coroutine: the one `withLock` runs its block in (so code in the
     * block, including `withContext` and coroutines it starts, re-enters), else the coroutine's Job.
     */
    suspend fun ofCoroutine(): Long {
        val context = currentCoroutineContext()
        context[LockScope]?.let { return it.id }
        val job = context[Job] ?: return fresh()
        return synchronized(jobs) { jobs.getOrPut(job) { fresh() } }
    }
}

/** The execution scope `withLock` runs its block in. */
internal class LockScope(val id: Long) : AbstractCoroutineContextElement(LockScope) {
    companion object Key : CoroutineContext.Key<LockScope>
}
