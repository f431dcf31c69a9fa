package dev.fencelock

import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assumptions.assumeTrue
import java.nio.file.Files
import java.time.Duration
import java.util.UUID

/**
 * The backends the JVM tests run on: every backend the core has. URLs come from
 * `FENCELOCK_TEST_*_URL` (`tests/servers.sh env`), with the standard loopback ports as defaults;
 * SQLite uses a temporary file. A server that does not answer skips its tests, unless
 * `FENCELOCK_REQUIRE_SERVERS=1` (as in CI), where it fails them.
 */
object Backends {
    val required: Boolean = System.getenv("FENCELOCK_REQUIRE_SERVERS") == "1"

    /** The margin of every behavioural deadline: generous, since CI has two slow cores. */
    const val MARGIN_MS = 10_000L

    /** A ttl that renews every second, so a forced release is noticed within about that. */
    val RENEWING_TTL: Duration = Duration.ofSeconds(3)

    private val sqliteFile by lazy {
        val dir = Files.createTempDirectory("fencelock-jvm-test")
        dir.toFile().deleteOnExit()
        dir.resolve("locks.db").toAbsolutePath()
    }

    private fun env(name: String, default: String) = System.getenv(name)?.takeIf { it.isNotBlank() } ?: default

    /** Backend name to URL, in a stable order. */
    val all: Map<String, String> by lazy {
        linkedMapOf(
            "sqlite" to "sqlite://$sqliteFile",
            "redis" to env("FENCELOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
            "redlock" to env(
                "FENCELOCK_TEST_REDLOCK_URL",
                "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005?max_ttl=30s&max_skew=100ms",
            ),
            "zookeeper" to env("FENCELOCK_TEST_ZK_URL", "zk://127.0.0.1:2181"),
            "postgres" to
                env("FENCELOCK_TEST_POSTGRES_URL", "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test"),
            "mariadb" to
                env("FENCELOCK_TEST_MARIADB_URL", "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test"),
        )
    }

    /** Every backend's name, for `@MethodSource("dev.fencelock.Backends#names")`. */
    @JvmStatic
    fun names(): List<String> = all.keys.toList()

    /**
     * Backends the tests reach by name without running every test on them: Redis Cluster, where
     * the tests only check that semaphores and read-write locks are refused.
     */
    private val extra: Map<String, String> by lazy {
        mapOf(
            "redis-cluster" to
                env("FENCELOCK_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"),
        )
    }

    /** The backends that refuse semaphores with INVALID_ARGUMENT (docs/design.md §1.8). */
    private val noSemaphores = setOf("redlock")

    /** Whether `backend` offers semaphores. */
    @JvmStatic
    fun offersSemaphores(backend: String): Boolean = backend !in noSemaphores

    /** The backends that offer semaphores, Redis Cluster included. */
    @JvmStatic
    fun withSemaphores(): List<String> = (names() + extra.keys).filter(::offersSemaphores)

    /** The backends that refuse semaphores: Redlock. */
    @JvmStatic
    fun withoutSemaphores(): List<String> = (names() + extra.keys).filterNot(::offersSemaphores)

    /** Every backend offers read-write locks, Redis Cluster and Redlock included. */
    @JvmStatic
    fun withReadWriteLocks(): List<String> = names() + extra.keys

    /** Fence URLs: the backends a Fence can live on. */
    val fences: Map<String, String> by lazy {
        all.filterKeys { it in setOf("sqlite", "redis", "postgres", "mariadb") }
    }

    fun url(backend: String): String = all[backend] ?: extra[backend] ?: error("unknown backend $backend")

    /** Connects, or skips the test when the server is down and servers are not required. */
    fun connect(backend: String, options: ConnectOptions = ConnectOptions.DEFAULTS): Locker {
        try {
            return Locker.connect(url(backend), options)
        } catch (e: LockUnavailableException) {
            if (required) throw e
            assumeTrue(false, "$backend is not running: ${e.message}")
            throw e
        }
    }

    fun openFence(backend: String, resource: String): Fence {
        try {
            return Fence.open(url(backend), resource)
        } catch (e: LockUnavailableException) {
            if (required) throw e
            assumeTrue(false, "$backend is not running: ${e.message}")
            throw e
        }
    }

    /** A lock name no other test (or earlier run) uses. */
    fun uniqueName(prefix: String): String = "jvm-$prefix-${UUID.randomUUID()}"

    /** Polls [observer]'s `inspect(name)` until [shows] holds, for up to [MARGIN_MS]; the info that did. */
    suspend fun inspectUntil(observer: Locker, name: String, what: String, shows: (LockInfo) -> Boolean): LockInfo {
        var last: LockInfo? = null
        try {
            return withTimeout(MARGIN_MS) {
                while (true) {
                    val info = observer.inspect(name)
                    last = info
                    if (shows(info)) return@withTimeout info
                    delay(20)
                }
                @Suppress("UNREACHABLE_CODE")
                error("unreachable")
            }
        } catch (e: TimeoutCancellationException) {
            throw AssertionError("inspect never showed $what; last: $last", e)
        }
    }
}

/**
 * What [block] threw, which must be a [T] (suspend calls may run in it); an [AssertionError]
 * naming [what] when it returned or threw something else.
 */
inline fun <reified T : Throwable> thrownBy(what: String, block: () -> Any?): T {
    val outcome = runCatching(block)
    val error = outcome.exceptionOrNull()
    if (error !is T) {
        throw AssertionError("$what: expected ${T::class.simpleName}, got ${error ?: outcome.getOrNull()}", error)
    }
    return error
}

/**
 * Runs [block] in a coroutine of its own: another execution scope for re-entry (as another thread
 * would be), so one test can hold several leases of a name through one Locker, as several
 * workers would.
 */
suspend fun <T> elsewhere(block: suspend () -> T): T = coroutineScope { async { block() }.await() }
