package dev.fencelock

import dev.fencelock.ffi.NativeFence
import dev.fencelock.ffi.NativeSqlValue
import dev.fencelock.ffi.NativeStatement
import kotlinx.coroutines.future.future
import java.util.concurrent.CompletableFuture
import dev.fencelock.ffi.openFence as nativeOpenFence

/**
 * The resource side: accepts an operation only if its token is at least the highest it has
 * accepted for its resource, so a holder that paused past its lease is refused
 * ([StaleTokenException]). Opened on its own URL (Redis or SQL), independent of the lock's backend.
 *
 * Every operation takes a [Lease] (preferred: a lease past its client deadline is refused with
 * [LockLostException] before anything is sent, and tokens of another lock are refused) or a bare
 * token. Only a mutex's or a write lease's token guards a fence: a semaphore's permit or a read
 * lease is refused with [LockInvalidArgumentException], since several of them hold the name at
 * once (docs/design.md §1.8). [check] is advisory: a check followed by a separate write protects
 * nothing.
 */
class Fence private constructor(private val native: NativeFence) : AutoCloseable {
    val resource: String get() = native.resource()

    /** Sets [key] to [value] if the lease's token is accepted (Redis fences). */
    @JvmSynthetic
    suspend fun fencedSet(lease: Lease, key: String, value: ByteArray) =
        ffiSuspend { native.fencedSet(lease.handle, null, key, value) }

    @JvmSynthetic
    suspend fun fencedSet(token: Long, key: String, value: ByteArray) =
        ffiSuspend { native.fencedSet(null, token, key, value) }

    @JvmSynthetic
    suspend fun fencedSet(lease: Lease, key: String, value: String) = fencedSet(lease, key, value.toByteArray())

    /**
     * Runs [statements] in one transaction if the lease's token is accepted (SQL fences); the
     * rows each statement changed.
     */
    @JvmSynthetic
    suspend fun fencedExecute(lease: Lease, statements: List<Statement>): List<Long> =
        ffiSuspend { native.fencedExecute(lease.handle, null, statements.map(Statement::toNative)) }.map { it.toLong() }

    @JvmSynthetic
    suspend fun fencedExecute(token: Long, statements: List<Statement>): List<Long> =
        ffiSuspend { native.fencedExecute(null, token, statements.map(Statement::toNative)) }.map { it.toLong() }

    /** Advisory: returns if the token would be accepted now, throws [StaleTokenException] if not. */
    @JvmSynthetic
    suspend fun check(lease: Lease) = ffiSuspend { native.check(lease.handle, null) }

    @JvmSynthetic
    suspend fun check(token: Long) = ffiSuspend { native.check(null, token) }

    /**
     * Reads the fence's database: runs [sql] with [params] read-only, outside any fenced write,
     * and returns its rows, each value null, a Long, a Double, a String or a ByteArray. For a
     * SQLite fence, read your data this way, never with sqlite-jdbc in the same process: a second
     * SQLite library drops fencelock's file locks when it closes the file, and SQLite may then
     * delete a live WAL file (docs/sqlite.md). A statement that writes is refused with
     * [LockInvalidArgumentException] and writes nothing; write with [fencedExecute].
     */
    @JvmSynthetic
    suspend fun query(sql: String, vararg params: Any?): List<List<Any?>> =
        ffiSuspend { native.query(Statement(sql, params.toList()).toNative()) }.map { row -> row.map(::fromNative) }

    /** The highest token accepted so far, or null. */
    @JvmSynthetic
    suspend fun highest(): Long? = ffiSuspend { native.highest() }

    @Throws(InterruptedException::class)
    fun fencedSetBlocking(lease: Lease, key: String, value: ByteArray) = blocking { fencedSet(lease, key, value) }

    @Throws(InterruptedException::class)
    fun fencedSetBlocking(token: Long, key: String, value: ByteArray) = blocking { fencedSet(token, key, value) }

    @Throws(InterruptedException::class)
    fun fencedSetBlocking(lease: Lease, key: String, value: String) = blocking { fencedSet(lease, key, value) }

    @Throws(InterruptedException::class)
    fun fencedExecuteBlocking(lease: Lease, statements: List<Statement>): List<Long> =
        blocking { fencedExecute(lease, statements) }

    @Throws(InterruptedException::class)
    fun fencedExecuteBlocking(token: Long, statements: List<Statement>): List<Long> =
        blocking { fencedExecute(token, statements) }

    @Throws(InterruptedException::class)
    fun checkBlocking(lease: Lease) = blocking { check(lease) }

    @Throws(InterruptedException::class)
    fun checkBlocking(token: Long) = blocking { check(token) }

    @Throws(InterruptedException::class)
    fun highestBlocking(): Long? = blocking { highest() }

    @Throws(InterruptedException::class)
    fun queryBlocking(sql: String, vararg params: Any?): List<List<Any?>> = blocking { query(sql, *params) }

    /** [query] as a `CompletableFuture` of its rows. */
    fun queryAsync(sql: String, vararg params: Any?): CompletableFuture<List<List<Any?>>> =
        Runtime.futures.future { query(sql, *params) }

    /** [fencedSet] as a `CompletableFuture` (of null). */
    fun fencedSetAsync(lease: Lease, key: String, value: ByteArray): CompletableFuture<Void?> =
        voidFuture { fencedSet(lease, key, value) }

    fun fencedSetAsync(token: Long, key: String, value: ByteArray): CompletableFuture<Void?> = voidFuture {
        fencedSet(token, key, value)
    }

    fun fencedSetAsync(lease: Lease, key: String, value: String): CompletableFuture<Void?> =
        fencedSetAsync(lease, key, value.toByteArray())

    /** [fencedExecute] as a `CompletableFuture` of the rows each statement changed. */
    fun fencedExecuteAsync(lease: Lease, statements: List<Statement>): CompletableFuture<List<Long>> =
        Runtime.futures.future { fencedExecute(lease, statements) }

    fun fencedExecuteAsync(token: Long, statements: List<Statement>): CompletableFuture<List<Long>> =
        Runtime.futures.future { fencedExecute(token, statements) }

    /** [check] as a `CompletableFuture` (of null), failed with [StaleTokenException] when refused. */
    fun checkAsync(lease: Lease): CompletableFuture<Void?> = voidFuture { check(lease) }

    fun checkAsync(token: Long): CompletableFuture<Void?> = voidFuture { check(token) }

    /** [highest] as a `CompletableFuture`. */
    fun highestAsync(): CompletableFuture<Long?> = Runtime.futures.future { highest() }

    /** Closes the fence's connections; it always finishes, as [Locker.close]. */
    override fun close() = uninterruptibly { ffi { native.shutdown() } }

    override fun toString(): String = "Fence($resource)"

    private fun fromNative(value: NativeSqlValue): Any? = when (value) {
        is NativeSqlValue.Null -> null
        is NativeSqlValue.Integer -> value.value
        is NativeSqlValue.Real -> value.value
        is NativeSqlValue.Text -> value.value
        is NativeSqlValue.Blob -> value.value
    }

    companion object {
        init {
            Runtime.ensureLoaded()
        }

        /** Opens the fence of [resource] in the database at [url] (Redis, PostgreSQL, MariaDB, SQLite). */
        @JvmStatic
        @JvmOverloads
        @Throws(InterruptedException::class)
        fun open(url: String, resource: String, options: FenceOptions = FenceOptions.DEFAULTS): Fence =
            blocking { openSuspending(url, resource, options) }

        @JvmSynthetic
        suspend fun openSuspending(
            url: String,
            resource: String,
            options: FenceOptions = FenceOptions.DEFAULTS,
        ): Fence {
            val spans = if (options.tracing) TracingBridge.sink() else null
            return Fence(ffiSuspend { nativeOpenFence(url, resource, options.toNative(), spans) })
        }

        @JvmStatic
        @JvmOverloads
        fun openAsync(
            url: String,
            resource: String,
            options: FenceOptions = FenceOptions.DEFAULTS,
        ): CompletableFuture<Fence> = Runtime.futures.future { openSuspending(url, resource, options) }
    }
}

/**
 * One SQL statement for [Fence.fencedExecute], with positional parameters (`?` on MariaDB and
 * SQLite, `$1` on PostgreSQL). Parameters: null, Long/Int/Short/Byte, Boolean (1/0),
 * Double/Float, String, ByteArray.
 */
class Statement(val sql: String, params: List<Any?>) {
    val params: List<Any?> = params.toList()

    internal fun toNative() = NativeStatement(sql, params.mapIndexed { i, p -> sqlValue(p, i + 1) })

    private fun sqlValue(p: Any?, position: Int): NativeSqlValue = when (p) {
        null -> NativeSqlValue.Null
        is Long -> NativeSqlValue.Integer(p)
        is Int -> NativeSqlValue.Integer(p.toLong())
        is Short -> NativeSqlValue.Integer(p.toLong())
        is Byte -> NativeSqlValue.Integer(p.toLong())
        is Boolean -> NativeSqlValue.Integer(if (p) 1 else 0)
        is Double -> NativeSqlValue.Real(p)
        is Float -> NativeSqlValue.Real(p.toDouble())
        is String -> NativeSqlValue.Text(p)
        is ByteArray -> NativeSqlValue.Blob(p)
        else -> invalidArgument("parameter $position of \"$sql\": unsupported type ${p.javaClass.name}")
    }

    /**
     * The SQL and how many parameters it binds, never their values: statements end up in logs
     * and exception messages, and their parameters are the application's data, secrets included.
     */
    override fun toString(): String {
        val count = when (params.size) {
            0 -> "no parameters"
            1 -> "1 parameter"
            else -> "${params.size} parameters"
        }
        return "Statement($sql, $count)"
    }

    companion object {
        @JvmStatic
        fun of(sql: String, vararg params: Any?): Statement = Statement(sql, params.toList())
    }
}
