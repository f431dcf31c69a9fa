package dev.fencelock

import dev.fencelock.ffi.setCaller
import org.slf4j.MDC
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * The caller of each native call, while something wants it (a Locker or Fence with `tracing`,
 * or an MDC to log under): OpenTelemetry's current `Context`, the parent of the call's span, and
 * a copy of the MDC, which the log records the call produced are logged under.
 *
 * Kept by number: [enter] numbers the calling thread's context and hands the number to the next
 * native call (the native side carries it with the operation and gives it back with its span and
 * log records); [exit] forgets it a while after the call ended (its records come back within
 * milliseconds; one later than that is logged without it).
 */
internal object Callers {
    /** Set once a Locker or Fence traces: from then on every call captures its context. */
    @Volatile
    var tracing = false

    class Captured(val otelContext: Any?, val mdc: Map<String, String>?)

    private val byNumber = ConcurrentHashMap<Int, Captured>()
    private val ended = ConcurrentLinkedQueue<Pair<Int, Long>>()
    private val next = AtomicInteger(1)
    private val KEPT_NANOS = TimeUnit.SECONDS.toNanos(10)

    /** The number of the calling thread's context, handed to the next native call; 0 for none. */
    fun enter(): Int {
        val mdc = MDC.getCopyOfContextMap()?.takeIf { it.isNotEmpty() }
        if (!tracing && mdc == null) return 0
        forgetOld()
        val number = next.getAndUpdate { if (it >= 0x7fff_fff0) 1 else it + 1 }
        byNumber[number] = Captured(if (tracing) OpenTelemetrySpans.currentContext() else null, mdc)
        setCaller(number.toUInt())
        return number
    }

    /** [enter] for a call made on another thread: the number, with nothing left set on this one. */
    fun capture(): Int {
        val number = enter()
        if (number != 0) setCaller(0u)
        return number
    }

    /** Hands [number] (from [capture]) to the next native call on this thread; 0 hands nothing. */
    fun carry(number: Int) {
        if (number != 0) setCaller(number.toUInt())
    }

    /** The call numbered [number] ended. */
    fun exit(number: Int) {
        if (number == 0) return
        setCaller(0u)
        ended.add(number to System.nanoTime() + KEPT_NANOS)
    }

    operator fun get(number: UInt): Captured? = if (number == 0u) null else byNumber[number.toInt()]

    private fun forgetOld() {
        val now = System.nanoTime()
        while (true) {
            val (number, until) = ended.peek() ?: return
            if (until - now > 0) return
            if (ended.remove(number to until)) byNumber.remove(number)
        }
    }
}
