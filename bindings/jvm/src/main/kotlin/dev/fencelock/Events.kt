package dev.fencelock

import dev.fencelock.ffi.NativeEventSubscription
import dev.fencelock.ffi.NativeLockEvent
import dev.fencelock.ffi.NativeLockEventKind
import java.time.Instant
import java.util.EnumSet
import java.util.concurrent.atomic.AtomicBoolean

/** What happened to a lease; [spelling] is the name every language uses (`renewal_retried`). */
enum class LockEventKind(val spelling: String) {
    /** The lock was taken. */
    ACQUIRED("acquired"),

    /** A renewal (or an `extend`) was confirmed. */
    RENEWED("renewed"),

    /** A renewal failed with a transient error; it is retried until the client deadline. */
    RENEWAL_RETRIED("renewal_retried"),

    /** The connection the lease depends on is down (ZooKeeper): stop writing. */
    SUSPENDED("suspended"),

    /** That connection is back and the lease is still held. */
    RESUMED("resumed"),

    /** The lease was lost: expired, taken over, force-released by an operator, session ended. */
    LOST("lost"),

    /** The holder released the lock. */
    RELEASED("released"),

    /**
     * A warning from a fence: it took this lease's token for one minted from other stored data
     * than its highest token's, and not above it (two servers behind one address; see
     * docs/design.md §3.7). The lease is still held.
     */
    DEPLOYMENT_MISMATCH("deployment_mismatch"),
    ;

    companion object {
        /** Every kind: what [Locker.onEvent] listens to unless told otherwise. */
        @JvmField
        val ALL: Set<LockEventKind> = EnumSet.allOf(LockEventKind::class.java)
    }
}

internal fun NativeLockEventKind.toPublic(): LockEventKind = when (this) {
    NativeLockEventKind.ACQUIRED -> LockEventKind.ACQUIRED
    NativeLockEventKind.RENEWED -> LockEventKind.RENEWED
    NativeLockEventKind.RENEWAL_RETRIED -> LockEventKind.RENEWAL_RETRIED
    NativeLockEventKind.SUSPENDED -> LockEventKind.SUSPENDED
    NativeLockEventKind.RESUMED -> LockEventKind.RESUMED
    NativeLockEventKind.LOST -> LockEventKind.LOST
    NativeLockEventKind.RELEASED -> LockEventKind.RELEASED
    NativeLockEventKind.DEPLOYMENT_MISMATCH -> LockEventKind.DEPLOYMENT_MISMATCH
}

/**
 * One thing that happened to one lease of a [Locker]. The events of one lease arrive in the
 * order they happened: [LockEventKind.ACQUIRED], then any renewals, retries, suspensions and
 * resumptions, and last [LockEventKind.RELEASED] or [LockEventKind.LOST].
 */
data class LockEvent(
    val kind: LockEventKind,
    /** The lock's name. */
    val name: String,
    /** The lease's fencing token: it tells the lock's successive leases apart. */
    val token: Long,
    /** `redis`, `redlock`, `zookeeper`, `postgres`, `mysql` or `sqlite`. */
    val backend: String,
    /** When it happened (the wall clock, for people and logs). */
    val at: Instant,
    /** Why, where the library knows: the error of a retried renewal, a suspension's or a loss's cause. */
    val reason: String?,
    /** Why a [LockEventKind.LOST] lease was lost. */
    val lossReason: LossReason?,
) {
    internal constructor(event: NativeLockEvent) : this(
        kind = event.kind.toPublic(),
        name = event.name,
        token = event.token,
        backend = event.backend,
        at = event.at,
        reason = event.reason,
        lossReason = event.loss?.toPublic(),
    )
}

/** Told each lifecycle event, on the subscription's own thread (see [Locker.onEvent]). */
fun interface LockEventListener {
    fun onEvent(event: LockEvent)
}

/**
 * A running [Locker.onEvent] subscription. [close] stops it: events already queued are still
 * delivered, then its thread ends. Closing the Locker ends it too.
 */
class EventSubscription internal constructor(
    private val native: NativeEventSubscription,
    private val listener: LockEventListener,
    private val kinds: Set<LockEventKind>,
) : AutoCloseable {
    private val closed = AtomicBoolean(false)

    // One daemon thread per subscription: a slow listener holds up only its own events.
    private val thread = Thread(::deliver, "fencelock-events").apply { isDaemon = true }

    internal fun start(): EventSubscription = apply { thread.start() }

    private fun deliver() {
        while (true) {
            val event = try {
                ffi { native.recvBlocking(null) }
            } catch (e: FencelockException) {
                LogBridge.logger.error("fencelock: the event subscription failed; no more events are delivered", e)
                return
            } ?: return
            val public = LockEvent(event)
            if (public.kind !in kinds) continue
            try {
                listener.onEvent(public)
            } catch (e: Exception) {
                LogBridge.logger.warn("fencelock: an onEvent listener threw (event {})", public, e)
            }
        }
    }

    /** How many events were dropped because too many waited unread (a listener too slow). */
    val dropped: Long get() = native.dropped().toLong()

    /** Whether the subscription ended (closed, or its Locker closed). */
    val isClosed: Boolean get() = native.isClosed()

    override fun close() {
        if (closed.compareAndSet(false, true)) native.unsubscribe()
    }

    /** Waits up to [timeout] for the delivery thread to end (after [close]); whether it did. */
    fun awaitTermination(timeout: java.time.Duration): Boolean {
        thread.join((timeoutNanos(timeout, "timeout") / 1_000_000).coerceAtLeast(1))
        return !thread.isAlive
    }
}
