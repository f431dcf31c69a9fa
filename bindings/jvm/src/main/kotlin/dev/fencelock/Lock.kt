package dev.fencelock

import dev.fencelock.ffi.NativeLockKind
import dev.fencelock.ffi.NativeLockMode
import java.util.concurrent.CompletableFuture
import java.util.function.Consumer
import java.util.function.Function

/** How a [Lease] holds its name (docs/design.md §1.8). */
enum class LockMode {
    /** The one holder of a mutex (`locker.acquire`, `locker.mutex`, an election). */
    EXCLUSIVE,

    /** One of at most N holders of a semaphore (`locker.semaphore(name, N)`). */
    PERMIT,

    /** One of the readers of a read-write lock (`locker.readLock`). */
    READ,

    /** The one writer of a read-write lock (`locker.writeLock`). */
    WRITE,
    ;

    /** Whether a lease of this mode is its name's only holder: only such leases can guard a [Fence]. */
    val isExclusive: Boolean get() = this == EXCLUSIVE || this == WRITE
}

/** What a lock name is used as, as [Locker.inspect] reads it (one name is one kind at a time). */
enum class LockKind {
    MUTEX,
    SEMAPHORE,
    READ_WRITE,
}

internal fun NativeLockMode.toPublic(): LockMode = when (this) {
    NativeLockMode.Exclusive -> LockMode.EXCLUSIVE
    is NativeLockMode.Permit -> LockMode.PERMIT
    NativeLockMode.Read -> LockMode.READ
    NativeLockMode.Write -> LockMode.WRITE
}

internal fun NativeLockKind.toPublic(): LockKind = when (this) {
    NativeLockKind.MUTEX -> LockKind.MUTEX
    NativeLockKind.SEMAPHORE -> LockKind.SEMAPHORE
    NativeLockKind.READ_WRITE -> LockKind.READ_WRITE
}

/**
 * One lock name in one mode, made by [Locker.semaphore], [Locker.readLock], [Locker.writeLock]
 * or [Locker.mutex]. It holds nothing itself: each acquire returns a [Lease], exactly like the
 * mutex's `locker.acquire(name)` (the same [LockOptions], errors, lost notification, re-entry
 * per thread or coroutine, and cancellation), whose [Lease.mode] says how it holds the name.
 *
 * - A **semaphore** of N permits admits at most N leases at once, each with its own token. Every
 *   participant must use the same N while the semaphore is held or waited on (another N is
 *   [LockInvalidArgumentException] at acquire); once it is idle a new N replaces the old.
 * - A **read-write lock** admits any number of read leases, or one write lease. Once a writer
 *   waits, new readers queue behind it. Only a write lease's token may guard a [Fence] (as a
 *   mutex's): a fence refuses a read or permit lease with [LockInvalidArgumentException].
 * - With `reentrant`, a thread (blocking calls) or coroutine (suspend calls) re-enters the mode it
 *   holds, and may take a read of a name whose write lease it holds (the nested lease shares the
 *   write lease); a scope holding a read lease that asks for the write lock gets
 *   [LockDeadlockException] at once. Without `reentrant`, a scope asking again for a name it holds
 *   through the same Locker gets [LockDeadlockException], even while permits are free: one thread
 *   or coroutine holds one lease of a name per Locker, so take several permits from several.
 *
 * Kotlin: `locker.semaphore("reports", 3).withLock { permit -> ... }`. Java:
 * `try (Lease permit = locker.semaphore("reports", 3).acquireBlocking()) { ... }`.
 */
class Lock internal constructor(
    private val locker: Locker,
    /** The lock's name. */
    val name: String,
    private val native: NativeLockMode,
) {
    /** The mode every lease of this handle holds its name in. */
    val mode: LockMode get() = native.toPublic()

    /** A semaphore's number of permits; null for the other modes. */
    val permits: Int? get() = (native as? NativeLockMode.Permit)?.permits

    /**
     * Acquires, waiting up to `options.wait` (forever by default). Throws [LockTimeoutException]
     * when the wait ends first. Cancelling the coroutine stops the wait and leaves nothing behind.
     */
    @JvmSynthetic
    suspend fun acquire(options: LockOptions = LockOptions.DEFAULTS): Lease =
        locker.acquireIn(name, native, options, Scopes.ofCoroutine())

    /**
     * Tries once: a [Lease], or null when the lock is not available in this mode now. Throws
     * [LockInvalidArgumentException] when `options.wait` is set: trying once does not wait.
     */
    @JvmSynthetic
    suspend fun tryAcquire(options: LockOptions = LockOptions.DEFAULTS): Lease? =
        locker.tryAcquireIn(name, native, options, Scopes.ofCoroutine())

    /**
     * Runs [block] while holding the lock and releases afterwards; throws [LockLostException] once
     * the block has returned if the lease was lost meanwhile, as [Locker.withLock].
     */
    @JvmSynthetic
    suspend fun <T> withLock(options: LockOptions = LockOptions.DEFAULTS, block: suspend (Lease) -> T): T =
        locker.withLockIn(name, native, options, block)

    /**
     * [acquire] for Java and other blocking code; re-entry counts per thread. Interrupting the
     * thread stops the wait, leaves nothing behind and throws [InterruptedException].
     */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun acquireBlocking(options: LockOptions = LockOptions.DEFAULTS): Lease =
        locker.acquireBlockingIn(name, native, options)

    /** [tryAcquire] for Java and other blocking code: a [Lease], or null when the lock is not available. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun tryAcquireBlocking(options: LockOptions = LockOptions.DEFAULTS): Lease? =
        locker.tryAcquireBlockingIn(name, native, options)

    /** [withLock] for Java: `lock.withLockBlocking(options, lease -> work(lease))`. */
    @Throws(InterruptedException::class)
    fun <T> withLockBlocking(options: LockOptions, body: Function<Lease, T>): T =
        locker.withLockBlockingIn(name, native, options, body)

    @Throws(InterruptedException::class)
    fun <T> withLockBlocking(body: Function<Lease, T>): T = withLockBlocking(LockOptions.DEFAULTS, body)

    /** [withLock] for Java with a body that returns nothing, as [Locker.runLocked]. */
    @Throws(InterruptedException::class)
    fun runLocked(options: LockOptions, body: Consumer<Lease>) {
        locker.withLockBlockingIn(name, native, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLocked(body: Consumer<Lease>) = runLocked(LockOptions.DEFAULTS, body)

    @Throws(InterruptedException::class)
    fun runLocked(options: LockOptions, body: Runnable) {
        locker.withLockBlockingIn(name, native, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLocked(body: Runnable) = runLocked(LockOptions.DEFAULTS, body)

    /** [acquire] as a `CompletableFuture`; cancelling the future cancels the acquire. */
    @JvmOverloads
    fun acquireAsync(options: LockOptions = LockOptions.DEFAULTS): CompletableFuture<Lease> =
        locker.acquireAsyncIn(name, native, options)

    override fun toString(): String = when (val given = permits) {
        null -> "Lock(name=$name, mode=$mode)"
        else -> "Lock(name=$name, mode=$mode, permits=$given)"
    }
}
