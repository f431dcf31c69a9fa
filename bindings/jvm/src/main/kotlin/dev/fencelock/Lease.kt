package dev.fencelock

import dev.fencelock.ffi.NativeLease
import dev.fencelock.ffi.NativeLossReason
import dev.fencelock.ffi.NativeLostListener
import java.time.Duration
import java.time.Instant
import java.util.concurrent.CompletableFuture
import java.util.concurrent.atomic.AtomicBoolean

/** Why a lease was lost. */
enum class LossReason {
    /** The client deadline passed without a confirmed renewal. */
    EXPIRED,

    /** A renewal or release found the lock was not ours any more. */
    TAKEN_OVER,

    /** The backend session ended (ZooKeeper). */
    SESSION_EXPIRED,
}

internal fun NativeLossReason.toPublic(): LossReason = when (this) {
    NativeLossReason.EXPIRED -> LossReason.EXPIRED
    NativeLossReason.TAKEN_OVER -> LossReason.TAKEN_OVER
    NativeLossReason.SESSION_EXPIRED -> LossReason.SESSION_EXPIRED
}

/** Told once when a lease is lost; runs on a fencelock thread of its own, so it may block. */
fun interface LostListener {
    fun onLost(reason: LossReason, message: String)
}

/**
 * Proof of holding one lock, with its fencing [token].
 *
 * While held it renews itself every ttl/3 (unless `autoRenew` is off). If a renewal finds the lock
 * is no longer ours, or the client deadline passes first, the lease is lost: [isLost] turns true,
 * [onLost] listeners run, [awaitLost] returns, and using the lease throws [LockLostException].
 *
 * [close] releases, so `try (Lease lease = ...)` and `lease.use { }` hold the lock for a block.
 * Leaving such a block after an explicit [release] is quiet; leaving it after the lease was lost
 * throws [LockLostException], so work done without the lock is never silent. A lease may be
 * released from any thread. One that becomes garbage without release is released in the
 * background, best effort.
 */
class Lease internal constructor(
    private val native: NativeLease,
    /** The lock's name. */
    val name: String,
    /** The fencing token: strictly increasing per lock name, below 2^63. */
    val token: Long,
) : AutoCloseable {
    private val released = AtomicBoolean(false)

    /**
     * How the lease holds its name: [LockMode.EXCLUSIVE] for a mutex's, [LockMode.PERMIT],
     * [LockMode.READ] or [LockMode.WRITE] for a [Lock]'s (a read re-entered under the scope's own
     * write lease shares that lease: [LockMode.WRITE]). Only exclusive and write leases can guard
     * a [Fence].
     */
    val mode: LockMode by lazy { native.mode().toPublic() }

    /** When the server will expire the lease unless renewed (the client's estimate); null on ZooKeeper. */
    val expiresAt: Instant?
        get() = native.expiresAtMillis()?.let(Instant::ofEpochMilli)

    /**
     * The client deadline, on the wall clock, read now: after it this client counts the lease lost
     * unless a renewal succeeds first. It moves forward with each renewal and stays where it was
     * once the lease is lost or released. On TTL backends it comes earlier than [expiresAt] (by
     * the clock-drift allowance), so work that checks it stops before the server could hand the
     * lock to someone else; on ZooKeeper, where [expiresAt] is null, it is still there.
     */
    val validUntil: Instant
        get() = native.validUntil()

    /** Whether the lease is lost; computed from the client deadline on every read. */
    val isLost: Boolean
        get() = native.isLost()

    /** Neither released nor lost. */
    val isHeld: Boolean
        get() = native.isHeld()

    /** Held, but in doubt (connection down, or the last renewal failed): stop writing until it clears. */
    val isSuspended: Boolean
        get() = native.isSuspended()

    /** Why the lease was lost, or null while it is not. */
    val lostReason: LossReason?
        get() = native.lostReason()?.toPublic()

    internal val handle: NativeLease get() = native

    /** Throws [LockLostException], [LockNotHeldException] or [LockClosedException] unless held. */
    fun ensureHeld() = ffi { native.ensureHeld() }

    /** Releases the lock. Throws NOT_HELD on a second release, LOST if the lease was lost first. */
    @JvmSynthetic
    suspend fun release() {
        released.set(true)
        ffiSuspend { native.release() }
    }

    /**
     * [release] for Java and other blocking code. It always finishes: an interrupt neither stops
     * it nor is lost (the thread's flag stays set).
     */
    fun releaseBlocking() {
        released.set(true)
        releaseFromBlockingCode({ ffi { native.releaseBlocking() } }) { ffi { native.release() } }
    }

    /**
     * [release] as a `CompletableFuture` (of null), completed once the lock is released or with
     * the release's error. Cancelling the future does not stop the release.
     */
    fun releaseAsync(): CompletableFuture<Void?> {
        released.set(true)
        return finishingAsync { ffi { native.release() } }
    }

    /** Sets a new ttl from now (the current ttl when null). */
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
     * Calls [listener] once when the lease is lost (soon after, if it already is), on a thread
     * of fencelock's own; a listener that throws is ignored.
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

    /** Suspends until the lease is lost and returns why; cancelling the caller stops only the wait. */
    @JvmSynthetic
    suspend fun awaitLost(): LossReason = ffiSuspend { native.waitLost() }.toPublic()

    /** A future completed when the lease is lost (for Java); cancelling it changes nothing else. */
    fun lostFuture(): CompletableFuture<LossReason> {
        val future = CompletableFuture<LossReason>()
        onLost { reason, _ -> future.complete(reason) }
        return future
    }

    /**
     * Blocks until the lease is lost or [timeout] passes (forever when null); whether it is lost.
     * Interrupting the thread throws [InterruptedException].
     */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun waitLost(timeout: Duration? = null): Boolean =
        waitLostBlocking(timeout, native::waitLostBlocking) { awaitLost() }

    /** Leaving a `use` / try-with-resources / `withLock` block: see the class docs. */
    @JvmSynthetic
    internal suspend fun exitScope() {
        if (released.get()) return
        release()
    }

    /** Releases the lock unless it was released explicitly; throws LOST if the lease was lost. */
    override fun close() {
        if (released.get()) return
        releaseBlocking()
    }

    override fun toString(): String = "Lease(name=$name, mode=$mode, token=$token, held=$isHeld)"
}
