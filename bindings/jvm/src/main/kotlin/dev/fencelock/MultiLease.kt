package dev.fencelock

import dev.fencelock.ffi.NativeLossReason
import dev.fencelock.ffi.NativeLostListener
import dev.fencelock.ffi.NativeMultiLease
import java.time.Duration
import java.time.Instant
import java.util.Collections
import java.util.concurrent.CompletableFuture
import java.util.concurrent.atomic.AtomicBoolean

/**
 * The mutexes of several lock names held as one, taken by [Locker.lockMany] (docs/design.md §1.9):
 * all of them or none, in one canonical order (sorted by name, byte for byte, whatever order they
 * were given in), so two callers taking overlapping sets never deadlock.
 *
 * Each part is an ordinary [Lease] of its name, with its own [token][tokens], renewal and
 * deadline: [part] gives it to a [Fence] exactly as a single lease. The whole is held while every
 * part is, and lost the moment any part is: [isLost] turns true, [onLost] listeners run (told which
 * part), [awaitLost] returns, and using the whole throws [LockLostException].
 *
 * [close] releases every part, so `try (MultiLease locks = ...)` and `locks.use { }` hold the names
 * for a block. As with [Lease], leaving such a block after an explicit [release] is quiet, and
 * leaving it after a part was lost throws [LockLostException].
 */
class MultiLease internal constructor(private val native: NativeMultiLease) : AutoCloseable {
    private val released = AtomicBoolean(false)

    /** Every part, one [Lease] per name, in the canonical order. */
    val parts: List<Lease> =
        Collections.unmodifiableList(native.parts().map { Lease(it.lease, it.name, it.token) })

    /** The names, in the canonical order they were acquired in (not necessarily the order given). */
    val names: List<String> = Collections.unmodifiableList(parts.map { it.name })

    /** Each name's fencing token, in the canonical order (an insertion-ordered map). */
    val tokens: Map<String, Long> =
        Collections.unmodifiableMap(parts.associateTo(LinkedHashMap()) { it.name to it.token })

    private val byName: Map<String, Lease> = parts.associateBy { it.name }

    /** The lease of [name], to fence writes to what that name guards; null for a name that is not a part. */
    fun part(name: String): Lease? = byName[name]

    /** Every part is held: none released, none lost. */
    val isHeld: Boolean
        get() = native.isHeld()

    /** Some part is lost: work guarded by the whole must stop. */
    val isLost: Boolean
        get() = native.isLost()

    /** Why the first part lost was lost, or null while none is. */
    val lostReason: LossReason?
        get() = native.lostReason()?.toPublic()

    /** The earliest part's client deadline, on the wall clock, read now: the whole is valid until then. */
    val validUntil: Instant
        get() = native.validUntil()

    /** The earliest part's server expiry as this client estimates it; null on ZooKeeper. */
    val expiresAt: Instant?
        get() = native.expiresAtMillis()?.let(Instant::ofEpochMilli)

    /**
     * Throws [LockLostException], [LockNotHeldException] or [LockClosedException] (the first part's,
     * in the canonical order) unless every part is held.
     */
    fun ensureHeld() = ffi { native.ensureHeld() }

    /**
     * Sets a new ttl from now on every part (the current ttl when null). Throws the first part's
     * error (LOST for a part that was lost); the parts after it are extended all the same.
     */
    @JvmSynthetic
    suspend fun extend(ttl: Duration? = null) {
        ttl?.let { if (it.isNegative) invalidArgument("ttl must not be negative, got $it") }
        ffiSuspend { native.extend(ttl) }
    }

    /** [extend] for Java and other blocking code; an interrupt stops the wait for the answer. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun extendBlocking(ttl: Duration? = null) = blocking { extend(ttl) }

    /** [extend] as a `CompletableFuture` (of null). */
    @JvmOverloads
    fun extendAsync(ttl: Duration? = null): CompletableFuture<Void?> = voidFuture { extend(ttl) }

    /**
     * Releases every part, last acquired first, whatever happens to the others. Throws
     * [LockLostException] if any part was lost first (the work may have run without that lock),
     * else [LockNotHeldException] if any part was already released (a second release).
     */
    @JvmSynthetic
    suspend fun release() {
        released.set(true)
        ffiSuspend { native.release() }
    }

    /** [release] for Java and other blocking code; it always finishes, as [Lease.releaseBlocking]. */
    fun releaseBlocking() {
        released.set(true)
        releaseFromBlockingCode({ ffi { native.releaseBlocking() } }) { ffi { native.release() } }
    }

    /** [release] as a `CompletableFuture` (of null); cancelling the future does not stop the release. */
    fun releaseAsync(): CompletableFuture<Void?> {
        released.set(true)
        return finishingAsync { ffi { native.release() } }
    }

    /**
     * Calls [listener] once when the first part is lost (soon after, if one already is), on a
     * thread of fencelock's own, with a message naming that part; a listener that throws is ignored.
     */
    fun onLost(listener: LostListener) {
        ffi {
            native.onLost(object : NativeLostListener {
                override fun onLost(reason: NativeLossReason, message: String) {
                    Runtime.listeners.execute {
                        runCatching { listener.onLost(reason.toPublic(), message) }
                    }
                }
            })
        }
    }

    /** Suspends until some part is lost and returns why; cancelling the caller stops only the wait. */
    @JvmSynthetic
    suspend fun awaitLost(): LossReason = ffiSuspend { native.waitLost() }.toPublic()

    /** A future completed when some part is lost (for Java); cancelling it changes nothing else. */
    fun lostFuture(): CompletableFuture<LossReason> {
        val future = CompletableFuture<LossReason>()
        onLost { reason, _ -> future.complete(reason) }
        return future
    }

    /**
     * Blocks until some part is lost or [timeout] passes (forever when null); whether one is lost.
     * Interrupting the thread throws [InterruptedException].
     */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun waitLost(timeout: Duration? = null): Boolean =
        waitLostBlocking(timeout, native::waitLostBlocking) { awaitLost() }

    /** Releases every part unless released explicitly; throws [LockLostException] if a part was lost. */
    override fun close() {
        if (released.get()) return
        releaseBlocking()
    }

    override fun toString(): String = "MultiLease(tokens=$tokens, held=$isHeld)"
}
