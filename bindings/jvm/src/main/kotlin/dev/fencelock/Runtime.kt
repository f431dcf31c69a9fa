package dev.fencelock

import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import dev.fencelock.ffi.NativeHandoff
import dev.fencelock.ffi.uniffiRustFutureContinuationCallbackImpl
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.Job
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.future.future
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeoutOrNull
import java.lang.invoke.MethodHandle
import java.lang.invoke.MethodHandles
import java.lang.invoke.MethodType
import java.time.Duration
import java.util.WeakHashMap
import java.util.concurrent.CompletableFuture
import java.util.concurrent.CompletionException
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicLong
import kotlin.coroutines.AbstractCoroutineContextElement
import kotlin.coroutines.ContinuationInterceptor
import kotlin.coroutines.CoroutineContext

/** The name of the native runtime's threads (bindings/jvm/src/runtime.rs names them so too). */
internal const val RUNTIME_THREAD = "fencelock-rt"

/**
 * How the Kotlin layer waits on the native library, and who the "execution scope" of re-entry is.
 *
 * Suspend calls await uniffi's futures; most blocking calls run the same suspend call in
 * `runBlocking` on the caller's thread (acquire, try-acquire and release on a platform thread
 * block on the native call directly instead, see `Locker.waitFor`: they are the hot path).
 * Interrupting a thread blocked in a call that waits cancels the call (an acquire then leaves
 * nothing behind) and throws [InterruptedException], the interrupt flag cleared as Java's own
 * blocking calls do; releases and `close` always finish, keeping the flag set. A virtual thread
 * never waits inside a native call, which would hold its carrier thread: it parks on the
 * coroutine or future the native callback completes (see [Threads.currentIsVirtual]).
 */
internal object Runtime {
    init {
        // The native runtime's threads call back into the JVM each time a future completes: keep
        // them attached to the JVM between calls instead of attaching and detaching each time.
        Native.setCallbackThreadInitializer(
            uniffiRustFutureContinuationCallbackImpl,
            CallbackThreadInitializer(true, false, RUNTIME_THREAD),
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

/**
 * Runs a suspend call from a plain thread, blocking it; interrupting the thread cancels the call
 * and throws [InterruptedException].
 */
@Throws(InterruptedException::class)
internal fun <T> blocking(call: suspend () -> T): T {
    Runtime.ensureLoaded()
    if (Thread.interrupted()) throw interruptedWaiting()
    // runBlocking parks the thread (a virtual thread unmounts) and, on an interrupt, cancels the
    // call and throws InterruptedException with the flag cleared.
    return runBlocking { call() }
}

/**
 * Runs a suspend call that must finish (a release, a close) from a plain thread: an interrupt
 * neither stops it nor is lost (the flag stays set for the caller's next wait).
 */
internal fun <T> uninterruptibly(call: suspend () -> T): T {
    Runtime.ensureLoaded()
    // join() waits without answering interrupts, parking a virtual thread rather than pinning it.
    val pending = Runtime.futures.future { withContext(NonCancellable) { call() } }
    try {
        return pending.join()
    } catch (e: CompletionException) {
        throw e.cause ?: e
    }
}

/**
 * A release from blocking code: on a platform thread the native call that blocks ([onPlatform],
 * one wake-up), on a virtual thread the suspend one ([onVirtual]) with the thread parked. Either
 * way it always finishes.
 */
internal fun releaseFromBlockingCode(onPlatform: () -> Unit, onVirtual: suspend () -> Unit) {
    Runtime.ensureLoaded()
    if (Threads.currentIsVirtual()) uninterruptibly { onVirtual() } else onPlatform()
}

/**
 * A call that must finish (a release) as a future of null: cancelling the future completes it
 * as cancelled at once, but the call goes on to its end.
 */
internal fun finishingAsync(call: suspend () -> Unit): CompletableFuture<Void?> = Runtime.futures.future {
    withContext(NonCancellable) { call() }
    null
}

/**
 * [ffi] for a native suspend call, whose caller goes on on a dispatcher, never on the fencelock
 * runtime thread that completed it. A coroutine without a dispatcher (`suspend fun main`, `Dispatchers.Unconfined`)
 * would otherwise go on running there: blocking code after the call (a JDBC statement,
 * `Locker.close()` in a `use {}`) would stall every lock of the process, or wait for that same
 * thread for ever. Such a coroutine moves to `Dispatchers.Default`; one with a dispatcher is
 * resumed on it as always and pays nothing.
 */
internal suspend inline fun <T> ffiSuspend(crossinline call: suspend () -> T): T {
    val interceptor = currentCoroutineContext()[ContinuationInterceptor]
    if (interceptor != null && interceptor !== Dispatchers.Unconfined) return ffi { call() }
    // Made inside a coroutine of Dispatchers.Default, the call's continuation is dispatched
    // there; its caller goes on where that coroutine ends, or where it started if it never
    // suspended. The caller's MDC and span context are read here, on its own thread.
    val caller = Callers.capture()
    try {
        return withContext(Dispatchers.Default) {
            Callers.carry(caller)
            translated { call() }
        }
    } finally {
        Callers.exit(caller)
    }
}

/**
 * Runs an async native acquire that puts what it got in a [NativeHandoff] (the Rust side's
 * `handoff.rs` says why), and takes it out with [take]. What is not taken, a lease granted just
 * as the coroutine was cancelled, is dropped on the native side at once and so released in the
 * background; returned the usual way, uniffi would leak it, held and renewed, for good.
 */
internal suspend inline fun <T> handedOff(acquire: (NativeHandoff) -> Unit, take: (NativeHandoff) -> T): T {
    val handoff = NativeHandoff()
    try {
        acquire(handoff)
        return take(handoff)
    } finally {
        handoff.discard()
        handoff.close()
    }
}

/** What a native acquire that succeeded must have put in its handoff. */
internal fun <T : Any> handedOver(taken: T?): T =
    taken ?: throw LockInternalException("a bug in fencelock: an acquire answered without its lease; please report it")

/**
 * An acquire as a `CompletableFuture` that never loses what it acquired. Cancelling the future
 * (or completing it otherwise, `orTimeout` say) cancels the acquire; one that got its lease
 * anyway, in the moment between the native answer and the future's completion, hands it to
 * [giveBack] at once. (kotlinx-coroutines' `future {}` drops such a result, and its lease stays
 * held, renewing, until the JVM collects its wrapper.)
 */
internal fun <T : Any> acquiringFuture(giveBack: suspend (T) -> Unit, acquire: suspend () -> T): CompletableFuture<T> {
    val result = CompletableFuture<T>()
    val job =
        Runtime.futures.launch {
            val acquired =
                try {
                    acquire()
                } catch (e: Throwable) {
                    result.completeExceptionally(e)
                    return@launch
                }
            if (!result.complete(acquired)) {
                withContext(NonCancellable) { runCatching { giveBack(acquired) } }
            }
        }
    result.whenComplete { _, _ -> if (!job.isCompleted) job.cancel() }
    return result
}

/** A suspend call that returns nothing as a `CompletableFuture` of null, for Java's `*Async` forms. */
internal fun voidFuture(call: suspend () -> Unit): CompletableFuture<Void?> = Runtime.futures.future {
    call()
    null
}

/** What an interrupted blocking call throws (the flag already cleared, as Java's own calls do). */
internal fun interruptedWaiting() =
    InterruptedException("interrupted while waiting: the call was cancelled and left nothing behind")

/**
 * Blocks until [awaitLost] answers or [timeout] passes (forever when null): whether it answered.
 * On a platform thread it waits in the native [nativeWait] in slices, so an interrupt is seen
 * within one; a virtual thread parks on [awaitLost] instead.
 */
@Throws(InterruptedException::class)
internal fun waitLostBlocking(
    timeout: Duration?,
    nativeWait: (Duration) -> Boolean,
    awaitLost: suspend () -> Unit,
): Boolean {
    val deadline = timeout?.let { System.nanoTime() + timeoutNanos(it, "timeout") }
    if (Threads.currentIsVirtual()) {
        return blocking {
            if (deadline == null) {
                awaitLost()
                true
            } else {
                withTimeoutOrNull((deadline - System.nanoTime()).coerceAtLeast(0) / 1_000_000) { awaitLost() } != null
            }
        }
    }
    while (true) {
        val left = deadline?.let { Duration.ofNanos((it - System.nanoTime()).coerceAtLeast(0)) }
        val slice = if (left == null || left > WAIT_SLICE) WAIT_SLICE else left
        if (nativeWait(slice)) return true
        if (Thread.interrupted()) throw interruptedWaiting()
        if (left != null && left <= slice) return false
    }
}

/** How long a platform thread waits in a native call between checks for an interrupt. */
private val WAIT_SLICE: Duration = Duration.ofMillis(100)

/** Which kind of thread calls: JDK 21's virtual threads wait differently (see [Runtime]). */
internal object Threads {
    // Thread.isVirtual() exists from JDK 21; the library is compiled for 17, where no thread is.
    private val isVirtual: MethodHandle? = runCatching {
        MethodHandles.publicLookup().findVirtual(
            Thread::class.java,
            "isVirtual",
            MethodType.methodType(Boolean::class.javaPrimitiveType),
        )
    }.getOrNull()

    fun currentIsVirtual(): Boolean = isVirtual?.let { it.invoke(Thread.currentThread()) as Boolean } ?: false
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

/** A Java body that takes nothing, as the `Function` the blocking `withLock` forms run. */
internal fun <A> Runnable.asFunction(): java.util.function.Function<A, Unit> = java.util.function.Function { run() }

/** A Java body that takes its argument and returns nothing, as a `Function`. */
internal fun <A> java.util.function.Consumer<A>.asFunction(): java.util.function.Function<A, Unit> =
    java.util.function.Function { accept(it) }
