package dev.fencelock

import dev.fencelock.ffi.NativeAcquireManyStart
import dev.fencelock.ffi.NativeAcquireOutcome
import dev.fencelock.ffi.NativeAcquireStart
import dev.fencelock.ffi.NativeHolder
import dev.fencelock.ffi.NativeLeaseInfo
import dev.fencelock.ffi.NativeLockInfo
import dev.fencelock.ffi.NativeLockList
import dev.fencelock.ffi.NativeLockMode
import dev.fencelock.ffi.NativeLocker
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import kotlinx.coroutines.future.future
import kotlinx.coroutines.withContext
import java.time.Duration
import java.util.concurrent.CompletableFuture
import java.util.function.Consumer
import java.util.function.Function
import dev.fencelock.ffi.connect as nativeConnect

/**
 * A client bound to one backend, made from a URL: `Locker.connect("redis://127.0.0.1:6379")`.
 *
 * Kotlin calls the suspend functions ([acquire], [tryAcquire], [withLock]; [campaign],
 * [withLeadership] and [leader] for leader election); Java and other blocking code calls the
 * `…Blocking` ones (and [runAsLeader]), or the `…Async` ones for a `CompletableFuture`.
 * [semaphore], [readLock] and [writeLock] make a [Lock] with the same acquire forms for a
 * semaphore's permits and a read-write lock's two sides; [lockMany] (with `lockManyBlocking` and
 * `lockManyAsync`) takes several names as one [MultiLease].
 * One Locker is meant to be shared by the whole process: its connections serve every lock,
 * waiter and renewal. [close] releases what it still holds and closes the connections.
 */
class Locker private constructor(private val native: NativeLocker) : AutoCloseable {
    init {
        // The library's log records go to SLF4J from the first connection on.
        LogBridge.ensureStarted()
    }

    /** The URL, with any password redacted. */
    val url: String get() = native.url()

    val isClosed: Boolean get() = native.isClosed()

    /**
     * Acquires [name], waiting up to `options.wait` (forever by default). Throws
     * [LockTimeoutException] when the wait ends first. Cancelling the coroutine stops the wait
     * and leaves nothing behind on the server.
     */
    @JvmSynthetic
    suspend fun acquire(name: String, options: LockOptions = LockOptions.DEFAULTS): Lease =
        acquireIn(name, EXCLUSIVE, options, Scopes.ofCoroutine())

    /**
     * Tries once: a [Lease], or null when somebody else holds the lock. Throws
     * [LockInvalidArgumentException] when `options.wait` is set: trying once does not wait.
     */
    @JvmSynthetic
    suspend fun tryAcquire(name: String, options: LockOptions = LockOptions.DEFAULTS): Lease? =
        tryAcquireIn(name, EXCLUSIVE, options, Scopes.ofCoroutine())

    /**
     * Runs [block] while holding [name] and releases afterwards. If the lease was lost meanwhile,
     * throws [LockLostException] once the block has returned (unless the block threw: its
     * exception wins, the release's is added as suppressed).
     */
    @JvmSynthetic
    suspend fun <T> withLock(
        name: String,
        options: LockOptions = LockOptions.DEFAULTS,
        block: suspend (Lease) -> T,
    ): T = withLockIn(name, EXCLUSIVE, options, block)

    /**
     * The semaphore [name] with [permits] permits (1 to 10,000): at most that many leases at once,
     * fleet-wide, each with its own token; acquire them through the returned [Lock]. Every
     * participant must use the same number while the semaphore is held or waited on. Throws
     * [LockInvalidArgumentException] for a bad name or count, or on a backend without semaphores
     * (Redlock).
     */
    fun semaphore(name: String, permits: Int): Lock = lock(name, NativeLockMode.Permit(permits))

    /**
     * The read side of the read-write lock [name]: any number of readers at once while no writer
     * holds it; a reader arriving while a writer waits queues behind the writer. Throws
     * [LockInvalidArgumentException] for a bad name, or on a backend without read-write locks
     * (Redlock).
     */
    fun readLock(name: String): Lock = lock(name, NativeLockMode.Read)

    /**
     * The write side of the read-write lock [name]: one writer, while no reader holds it. Its token
     * is larger than every earlier read or write token of the name, so it may guard a [Fence].
     * Throws as [readLock].
     */
    fun writeLock(name: String): Lock = lock(name, NativeLockMode.Write)

    /** The mutex [name] as a [Lock]: the same as [acquire] and its siblings with the name. */
    fun mutex(name: String): Lock = lock(name, EXCLUSIVE)

    private fun lock(name: String, mode: NativeLockMode): Lock {
        ffi { native.checkLock(name, mode) }
        return Lock(this, name, mode)
    }

    @JvmSynthetic
    internal suspend fun <T> withLockIn(
        name: String,
        mode: NativeLockMode,
        options: LockOptions,
        block: suspend (Lease) -> T,
    ): T {
        val scope = Scopes.ofCoroutine()
        val lease = acquireIn(name, mode, options, scope)
        return holding(lease) { withContext(LockScope(scope)) { block(lease) } }
    }

    /**
     * Acquires the mutexes of every name in [names] as one [MultiLease] (docs/design.md §1.9): all
     * of them or none. The names are taken one after another in their canonical order (sorted by
     * name, byte for byte, whatever order they were given in), so two callers taking overlapping
     * sets never deadlock; `options.wait` bounds the whole, and [options] applies to every part.
     * Throws [LockInvalidArgumentException] for no names, more than 64, a name given twice, a bad
     * name or an element that is not a `String` (before anything is taken); otherwise the first
     * part's error ([LockTimeoutException] naming the name that stayed busy) after the parts
     * already taken were released. Re-entry counts per coroutine, each part as [acquire]'s
     * ([LockDeadlockException] for a name this coroutine holds, unless `reentrant`). Cancelling
     * the coroutine stops the wait and leaves nothing behind.
     */
    @JvmSynthetic
    suspend fun lockMany(names: List<String>, options: LockOptions = LockOptions.DEFAULTS): MultiLease =
        lockManyIn(names, options, Scopes.ofCoroutine())

    /**
     * Campaigns for leadership of the election [name]: waits up to `options.wait` (forever by
     * default) to acquire its lock, and returns the [Leadership], whose term is larger than every
     * earlier leader's. `options.ttl` bounds how long a leader that died unannounced keeps the
     * role ([CampaignOptions] has no `reentrant`: a leader never campaigns again). Throws
     * [LockTimeoutException] when the wait ends first. Cancelling the coroutine stops the
     * campaign and leaves nothing behind.
     */
    @JvmSynthetic
    suspend fun campaign(name: String, options: CampaignOptions = CampaignOptions.DEFAULTS): Leadership =
        handedOver(handedOff({ ffiSuspend { native.campaign(name, options.toNative(), it) } }) { it.takeLease() })
            .let { Leadership(Lease(it, name, it.token())) }

    /**
     * Campaigns for [name], runs [block] once leading, and resigns when it returns. [block]
     * should stop once leadership is lost (watch [Leadership.isLeader], or call
     * [Leadership.ensureLeader] between steps); if it was lost meanwhile, throws
     * [LockLostException] after the block returns (unless the block threw: its exception wins).
     */
    @JvmSynthetic
    suspend fun <T> withLeadership(
        name: String,
        options: CampaignOptions = CampaignOptions.DEFAULTS,
        block: suspend (Leadership) -> T,
    ): T {
        val leadership = campaign(name, options)
        return holding(leadership.lease) { block(leadership) }
    }

    /** Who leads the election [name] now and in which term, or null; read without campaigning. */
    @JvmSynthetic
    suspend fun leader(name: String): Leader? = ffiSuspend { native.leader(name) }?.let(::Leader)

    /**
     * Runs [block] while [lease] is held, then releases it unless the block did; the block's
     * exception wins over the release's, which is added to it as suppressed.
     */
    private suspend fun <T> holding(lease: Lease, block: suspend () -> T): T {
        val result = try {
            block()
        } catch (e: Throwable) {
            try {
                withContext(NonCancellable) { lease.exitScope() }
            } catch (releaseError: Throwable) {
                e.addSuppressed(releaseError)
            }
            throw e
        }
        withContext(NonCancellable) { lease.exitScope() }
        return result
    }

    /** Who holds [name] now, as the backend says, without acquiring it. */
    @JvmSynthetic
    suspend fun inspect(name: String): LockInfo = LockInfo(ffiSuspend { native.inspect(name) })

    /**
     * The locks held now whose names start with [prefix] (empty: every lock), by name, read
     * without acquiring. At most 1000; [LockList.truncated] says when more matched. Throws
     * [LockInvalidArgumentException] for a prefix over 255 bytes (UTF-8) or containing NUL.
     */
    @JvmSynthetic
    suspend fun list(prefix: String = ""): LockList = LockList(ffiSuspend { native.list(prefix) })

    /**
     * Frees [name] whoever holds it: for an operator clearing a lock whose holder is stuck.
     *
     * DANGEROUS: the holder may still be working. It learns of the loss at its next renewal
     * (within a third of its ttl; on ZooKeeper at once, from the watch on its node), and until
     * then two holders may run. Writes guarded by a [Fence] stay safe: the next holder's token
     * is larger. Throws [LockNotHeldException] when nobody held the lock (nothing changed).
     */
    @JvmSynthetic
    suspend fun forceRelease(name: String): Unit = ffiSuspend { native.forceRelease(name) }

    /**
     * This Locker's lifecycle events (acquired, renewed, renewal retried, suspended, resumed,
     * lost, released) as a cold flow: each collector subscribes when it starts collecting, and
     * unsubscribes when it stops or is cancelled. The flow completes when the Locker is closed.
     * Events of one lease arrive in order; events that happen before collection starts are not
     * seen. Collecting on a closed Locker throws [LockClosedException].
     */
    fun events(): Flow<LockEvent> = flow {
        val subscription = ffi { native.subscribe() }
        try {
            while (true) {
                val event = ffiSuspend { subscription.recv() } ?: break
                emit(LockEvent(event))
            }
        } finally {
            subscription.unsubscribe()
            subscription.destroy()
        }
    }

    /**
     * Calls [listener] for each lifecycle event of the [kinds] given (all by default), in order,
     * on a daemon thread of the subscription's own, from now until the returned subscription is
     * closed (or this Locker is). A listener that throws is logged, and told the next event.
     * Throws [LockInvalidArgumentException] for an empty set of kinds, [LockClosedException] on
     * a closed Locker.
     */
    @JvmOverloads
    fun onEvent(listener: LockEventListener, kinds: Set<LockEventKind> = LockEventKind.ALL): EventSubscription {
        if (kinds.isEmpty()) {
            invalidArgument(
                "onEvent needs at least one event kind; the kinds are ${LockEventKind.entries}",
            )
        }
        return EventSubscription(ffi { native.subscribe() }, listener, kinds.toSet()).start()
    }

    /**
     * [acquire] for Java and other blocking code; re-entry counts per thread. Interrupting the
     * thread stops the wait, leaves nothing behind and throws [InterruptedException].
     */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun acquireBlocking(name: String, options: LockOptions = LockOptions.DEFAULTS): Lease =
        acquireBlockingIn(name, EXCLUSIVE, options)

    /** [tryAcquire] for Java and other blocking code: a [Lease], or null when the lock is taken. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun tryAcquireBlocking(name: String, options: LockOptions = LockOptions.DEFAULTS): Lease? =
        tryAcquireBlockingIn(name, EXCLUSIVE, options)

    internal fun acquireBlockingIn(name: String, mode: NativeLockMode, options: LockOptions): Lease =
        waitFor(name, mode, options, tryOnce = false)
            ?: throw LockInternalException("an acquire that waits answered busy")

    internal fun tryAcquireBlockingIn(name: String, mode: NativeLockMode, options: LockOptions): Lease? =
        waitFor(name, mode, triedOnce(options), tryOnce = true)

    /**
     * On a platform thread, blocks on the native acquire directly (one thread wake-up, where
     * `runBlocking` over the suspend call costs several), in slices so that an interrupt cancels
     * it; an uncontended acquire answers within the first slice: one call into Rust, the token
     * included. A virtual thread parks on the suspend call instead, so that its carrier thread
     * serves other virtual threads while it waits.
     */
    private fun waitFor(name: String, mode: NativeLockMode, options: LockOptions, tryOnce: Boolean): Lease? {
        Runtime.ensureLoaded()
        val scope = Scopes.ofThread()
        if (Threads.currentIsVirtual()) {
            return blocking {
                if (tryOnce) tryAcquireIn(name, mode, options, scope) else acquireIn(name, mode, options, scope)
            }
        }
        if (Thread.interrupted()) throw interruptedWaiting()
        val pending = when (
            val start = ffi {
                native.startAcquire(name, mode, options.toNative(), scope, tryOnce, SLICE_MILLIS)
            }
        ) {
            is NativeAcquireStart.Acquired -> return Lease(start.lease, name, start.token)
            NativeAcquireStart.Busy -> return null
            is NativeAcquireStart.Waiting -> start.pending
        }
        try {
            while (true) {
                if (Thread.interrupted()) {
                    pending.cancel()
                    throw interruptedWaiting()
                }
                when (val outcome = ffi { pending.wait(SLICE_MILLIS) }) {
                    is NativeAcquireOutcome.Acquired -> return Lease(outcome.lease, name, outcome.token)
                    NativeAcquireOutcome.Busy -> return null
                    NativeAcquireOutcome.Pending -> {}
                }
            }
        } finally {
            pending.destroy()
        }
    }

    /**
     * [lockMany] for Java and other blocking code; re-entry counts per thread. Interrupting the
     * thread stops the wait, leaves nothing behind and throws [InterruptedException].
     */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun lockManyBlocking(names: List<String>, options: LockOptions = LockOptions.DEFAULTS): MultiLease {
        // Waited for as [waitFor] waits for one name: on the native call, in interruptible slices,
        // or parked on the suspend call on a virtual thread.
        Runtime.ensureLoaded()
        val scope = Scopes.ofThread()
        if (Threads.currentIsVirtual()) return blocking { lockManyIn(names, options, scope) }
        if (Thread.interrupted()) throw interruptedWaiting()
        val pending = when (
            val start = ffi {
                native.startAcquireMany(textNames(names), options.toNative(), scope, SLICE_MILLIS)
            }
        ) {
            is NativeAcquireManyStart.Acquired -> return MultiLease(start.multi)
            is NativeAcquireManyStart.Waiting -> start.pending
        }
        try {
            while (true) {
                if (Thread.interrupted()) {
                    pending.cancel()
                    throw interruptedWaiting()
                }
                ffi { pending.wait(SLICE_MILLIS) }?.let { return MultiLease(it) }
            }
        } finally {
            pending.destroy()
        }
    }

    /** [lockMany] as a `CompletableFuture`; cancelling the future cancels the acquire. */
    @JvmOverloads
    fun lockManyAsync(
        names: List<String>,
        options: LockOptions = LockOptions.DEFAULTS,
    ): CompletableFuture<MultiLease> {
        val scope = Scopes.fresh()
        return acquiringFuture({ it.release() }) { lockManyIn(names, options, scope) }
    }

    /** The multi-name acquire of the suspend and future forms: the core's `acquire_many_in`. */
    private suspend fun lockManyIn(names: List<String>, options: LockOptions, scope: Long): MultiLease = MultiLease(
        handedOver(
            handedOff({ ffiSuspend { native.acquireMany(textNames(names), options.toNative(), scope, it) } }) {
                it.takeMultiLease()
            },
        ),
    )

    /**
     * [names] checked to be strings: Java may hand over a raw list holding other things (or nulls),
     * which are refused rather than left to a `ClassCastException` inside the binding.
     */
    private fun textNames(names: List<String>): List<String> {
        val given: List<Any?> = names
        return given.mapIndexed { i, name ->
            name as? String
                ?: invalidArgument(
                    "lockMany takes lock names as strings; element $i is ${name?.javaClass?.name ?: "null"}",
                )
        }
    }

    /**
     * [withLock] for Java: `locker.withLockBlocking("name", lease -> work(lease.getToken()))`.
     * Interrupting the thread while it waits for the lock throws [InterruptedException].
     */
    @Throws(InterruptedException::class)
    fun <T> withLockBlocking(name: String, options: LockOptions, body: Function<Lease, T>): T =
        withLockBlockingIn(name, EXCLUSIVE, options, body)

    @Throws(InterruptedException::class)
    fun <T> withLockBlocking(name: String, body: Function<Lease, T>): T =
        withLockBlocking(name, LockOptions.DEFAULTS, body)

    /**
     * [withLock] for Java with a body that returns nothing:
     * `locker.runLocked("name", lease -> write(lease.getToken()))`, or `() -> work()` when it
     * needs no lease. (A `Consumer` or `Runnable` overload of [withLockBlocking] beside the
     * `Function` one would make `lease -> lease.getToken()` ambiguous to javac, and a Kotlin
     * `{ 42 }` a `Runnable`, hence the name.)
     */
    @Throws(InterruptedException::class)
    fun runLocked(name: String, options: LockOptions, body: Consumer<Lease>) {
        withLockBlockingIn(name, EXCLUSIVE, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLocked(name: String, body: Consumer<Lease>) = runLocked(name, LockOptions.DEFAULTS, body)

    @Throws(InterruptedException::class)
    fun runLocked(name: String, options: LockOptions, body: Runnable) {
        withLockBlockingIn(name, EXCLUSIVE, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLocked(name: String, body: Runnable) = runLocked(name, LockOptions.DEFAULTS, body)

    internal fun <T> withLockBlockingIn(
        name: String,
        mode: NativeLockMode,
        options: LockOptions,
        body: Function<Lease, T>,
    ): T {
        val lease = acquireBlockingIn(name, mode, options)
        return holdingBlocking(lease) { body.apply(lease) }
    }

    /** [campaign] for Java and other blocking code; interrupting the thread stops the campaign. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun campaignBlocking(name: String, options: CampaignOptions = CampaignOptions.DEFAULTS): Leadership =
        blocking { campaign(name, options) }

    /** [campaign] as a `CompletableFuture`; cancelling the future stops the campaign. */
    @JvmOverloads
    fun campaignAsync(
        name: String,
        options: CampaignOptions = CampaignOptions.DEFAULTS,
    ): CompletableFuture<Leadership> = acquiringFuture({ it.resign() }) { campaign(name, options) }

    /**
     * [withLeadership] for Java, like Curator's `LeaderSelector`:
     * `locker.runAsLeader("reports", leadership -> work(leadership.getTerm()))` campaigns, runs
     * the body once leading, resigns, and returns the body's result.
     */
    @Throws(InterruptedException::class)
    fun <T> runAsLeader(name: String, options: CampaignOptions, body: Function<Leadership, T>): T {
        val leadership = campaignBlocking(name, options)
        return holdingBlocking(leadership.lease) { body.apply(leadership) }
    }

    @Throws(InterruptedException::class)
    fun <T> runAsLeader(name: String, body: Function<Leadership, T>): T =
        runAsLeader(name, CampaignOptions.DEFAULTS, body)

    /**
     * [runAsLeader] with a body that returns nothing (named apart for the reason [runLocked] is):
     * `locker.runLeading("reports", leadership -> work(leadership))`, or `() -> work()`.
     */
    @Throws(InterruptedException::class)
    fun runLeading(name: String, options: CampaignOptions, body: Consumer<Leadership>) {
        runAsLeader(name, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLeading(name: String, body: Consumer<Leadership>) = runLeading(name, CampaignOptions.DEFAULTS, body)

    @Throws(InterruptedException::class)
    fun runLeading(name: String, options: CampaignOptions, body: Runnable) {
        runAsLeader(name, options, body.asFunction())
    }

    @Throws(InterruptedException::class)
    fun runLeading(name: String, body: Runnable) = runLeading(name, CampaignOptions.DEFAULTS, body)

    /** [leader] for Java and other blocking code. */
    @Throws(InterruptedException::class)
    fun leaderBlocking(name: String): Leader? = blocking { leader(name) }

    /** [holding] for blocking code. */
    private fun <T> holdingBlocking(lease: Lease, body: () -> T): T {
        // lease.close() is exitScope's blocking form: the native release on the calling thread
        // (parked on a virtual one), never cut short by an interrupt.
        val result = try {
            body()
        } catch (e: Throwable) {
            try {
                lease.close()
            } catch (releaseError: Throwable) {
                e.addSuppressed(releaseError)
            }
            throw e
        }
        lease.close()
        return result
    }

    @Throws(InterruptedException::class)
    fun inspectBlocking(name: String): LockInfo = blocking { inspect(name) }

    /** [inspect] as a `CompletableFuture`. */
    fun inspectAsync(name: String): CompletableFuture<LockInfo> = Runtime.futures.future { inspect(name) }

    /** [list] for Java and other blocking code. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun listBlocking(prefix: String = ""): LockList = blocking { list(prefix) }

    /** [forceRelease] for Java and other blocking code. Dangerous: read [forceRelease]. */
    @Throws(InterruptedException::class)
    fun forceReleaseBlocking(name: String): Unit = blocking { forceRelease(name) }

    /** [acquire] as a `CompletableFuture`; cancelling the future cancels the acquire. */
    @JvmOverloads
    fun acquireAsync(name: String, options: LockOptions = LockOptions.DEFAULTS): CompletableFuture<Lease> =
        acquireAsyncIn(name, EXCLUSIVE, options)

    internal fun acquireAsyncIn(name: String, mode: NativeLockMode, options: LockOptions): CompletableFuture<Lease> {
        val scope = Scopes.fresh()
        return acquiringFuture({ it.release() }) { acquireIn(name, mode, options, scope) }
    }

    /** The one acquire path of the suspend faces, for every mode (the mutex's is [EXCLUSIVE]). */
    @JvmSynthetic
    internal suspend fun acquireIn(name: String, mode: NativeLockMode, options: LockOptions, scope: Long): Lease =
        handedOver(
            handedOff({
                ffiSuspend { native.acquire(name, mode, options.toNative(), scope, it) }
            }) { it.takeLease() },
        )
            .let { Lease(it, name, it.token()) }

    @JvmSynthetic
    internal suspend fun tryAcquireIn(name: String, mode: NativeLockMode, options: LockOptions, scope: Long): Lease? =
        handedOff({ ffiSuspend { native.tryAcquire(name, mode, triedOnce(options).toNative(), scope, it) } }) {
            it.takeLease()
        }?.let { Lease(it, name, it.token()) }

    /**
     * The options of a try, which the core makes with a wait of zero: a wait given here would be
     * ignored, so it is refused, as Python's `try_acquire(wait=...)` is (docs/design.md §9.3).
     */
    private fun triedOnce(options: LockOptions): LockOptions {
        if (options.wait != null) {
            invalidArgument("tryAcquire tries once and never waits: leave out wait, or call acquire to wait")
        }
        return options
    }

    /**
     * Releases every lease this Locker still holds and closes its connections. It always
     * finishes: an interrupt neither stops it nor is lost.
     */
    override fun close() = uninterruptibly { ffi { native.shutdown() } }

    override fun toString(): String = "Locker($url)"

    companion object {
        init {
            Runtime.ensureLoaded()
        }

        /** How long a blocking acquire waits between checks for an interrupt. */
        private const val SLICE_MILLIS: UInt = 100u

        /** The mode of the mutex's acquires. */
        private val EXCLUSIVE: NativeLockMode = NativeLockMode.Exclusive

        /**
         * Connects to the backend [url] selects (`redis://`, `redlock://`, `zk://`, `postgres://`,
         * `mysql://`, `sqlite://`; see the README). Throws [LockInvalidArgumentException] for a bad
         * URL, [LockUnavailableException] when the backend cannot be reached, [LockAuthException]
         * when credentials are refused.
         */
        @JvmStatic
        @JvmOverloads
        @Throws(InterruptedException::class)
        fun connect(url: String, options: ConnectOptions = ConnectOptions.DEFAULTS): Locker =
            blocking { connectSuspending(url, options) }

        /** [connect] as a suspend function, for coroutines. */
        @JvmSynthetic
        suspend fun connectSuspending(url: String, options: ConnectOptions = ConnectOptions.DEFAULTS): Locker {
            val metrics = when {
                options.metricsRecorder != null -> RecorderSink(options.metricsRecorder)
                options.metrics -> MetricsBridge.sink()
                else -> null
            }
            val spans = if (options.tracing) TracingBridge.sink() else null
            return Locker(ffiSuspend { nativeConnect(url, options.toNative(), metrics, spans) })
        }

        /** [connect] as a `CompletableFuture`. */
        @JvmStatic
        @JvmOverloads
        fun connectAsync(url: String, options: ConnectOptions = ConnectOptions.DEFAULTS): CompletableFuture<Locker> =
            Runtime.futures.future { connectSuspending(url, options) }
    }
}

/** Who holds a lock, as [Locker.inspect] and [Locker.list] read it. */
data class LockInfo @JvmOverloads constructor(
    val name: String,
    /** Somebody holds it, in any mode. */
    val held: Boolean,
    /** The last token minted for this lock (a mutex holder's, while held). */
    val token: Long?,
    /** A mutex's holder; a semaphore's or read-write lock's holders are in [leases]. */
    val holder: Holder?,
    /** A held mutex's time left on the server's clock (TTL backends). */
    val timeLeft: Duration?,
    /**
     * The waiters queued behind the holders, first in line first: ZooKeeper's queue, and the
     * registered waiters of a semaphore or read-write lock on TTL backends (a mutex's waiters
     * register nowhere there). At most 100.
     */
    val waiters: List<Waiter> = emptyList(),
    /** What the name is used as: [LockKind.MUTEX] for a name nobody uses. */
    val kind: LockKind = LockKind.MUTEX,
    /** A semaphore's number of permits, as its holders and waiters stored it; null for the other kinds. */
    val permits: Int? = null,
    /** Every holder of a semaphore or read-write lock, with its mode (empty for a mutex: see [holder]). */
    val leases: List<LeaseInfo> = emptyList(),
) {
    /** The holder's description: host, pid, language, and the text passed as `holder`. */
    data class Holder(val host: String?, val pid: Long?, val language: String?, val text: String?) {
        internal constructor(h: NativeHolder) : this(h.host, h.pid?.toLong(), h.language, h.text)
    }

    /**
     * A waiter: in a ZooKeeper lock's queue (its queue node), or registered by a semaphore's or
     * read-write lock's waiter on a TTL backend (its mode and the start of its owner id); with its
     * description when it has one.
     */
    data class Waiter(val node: String, val holder: Holder?)

    /** One holder of a semaphore or read-write lock. */
    data class LeaseInfo(
        val mode: LockMode,
        val token: Long?,
        val holder: Holder?,
        /** Time left on the server's clock (TTL backends). */
        val timeLeft: Duration?,
    ) {
        internal constructor(lease: NativeLeaseInfo) : this(
            mode = lease.mode.toPublic(),
            token = lease.token,
            holder = lease.holder?.let(::Holder),
            timeLeft = lease.timeLeft,
        )
    }

    internal constructor(info: NativeLockInfo) : this(
        name = info.name,
        held = info.held,
        token = info.token,
        holder = info.holder?.let(::Holder),
        timeLeft = info.timeLeft,
        waiters = info.waiters.map { Waiter(it.node, it.holder?.let(::Holder)) },
        kind = info.kind.toPublic(),
        permits = info.permits,
        leases = info.leases.map(::LeaseInfo),
    )
}

/** What [Locker.list] found: the held locks, by name. */
data class LockList(
    val locks: List<LockInfo>,
    /** More locks matched than the 1000 returned: narrow the prefix to see the rest. */
    val truncated: Boolean,
) {
    internal constructor(list: NativeLockList) : this(list.locks.map(::LockInfo), list.truncated)
}
