package dev.fencelock

import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.platform.launcher.LauncherSession
import org.junit.platform.launcher.LauncherSessionListener
import java.nio.file.Files
import java.time.Duration
import java.util.UUID
import java.util.concurrent.TimeUnit

/**
 * The backends the JVM tests run on: every backend the core has, or those `FENCELOCK_TEST_BACKENDS`
 * lists (comma-separated names of [KNOWN], as the Python and Node suites read it; unset or empty:
 * every one). CI lists SQLite and the backends the JVM reaches by a path of its own (Redis: I/O the
 * caller drives; ZooKeeper: sessions): the lock contract itself is the conformance suite's, which
 * CI runs on every backend (CONTRIBUTING.md, "Which tests run where"). A test of a backend left out
 * skips, saying so, even with `FENCELOCK_REQUIRE_SERVERS=1`: the exclusion is deliberate.
 *
 * URLs come from `FENCELOCK_TEST_*_URL` (`tests/servers.sh env`), with the standard loopback ports
 * as defaults; SQLite uses a temporary file. A server that does not answer skips its tests, unless
 * `FENCELOCK_REQUIRE_SERVERS=1` (as in CI), where it fails them. Tests that make a SQLite file of
 * their own, for what is no backend's (durations, metrics, secrets), run whatever the list.
 */
object Backends {
    val required: Boolean = System.getenv("FENCELOCK_REQUIRE_SERVERS") == "1"

    /** The margin of every behavioural deadline: generous, since CI has two slow cores. */
    const val MARGIN_MS = 10_000L

    /** A ttl that renews every second, so a forced release is noticed within about that. */
    val RENEWING_TTL: Duration = Duration.ofSeconds(3)

    /** Every backend name `FENCELOCK_TEST_BACKENDS` may list. */
    val KNOWN: List<String> = listOf("sqlite", "redis", "redis-cluster", "redlock", "zookeeper", "postgres", "mariadb")

    /** The matrix of most tests; Redis Cluster is in the lists below that name it. */
    private val MATRIX: List<String> = KNOWN - "redis-cluster"

    private const val SELECTION_VARIABLE = "FENCELOCK_TEST_BACKENDS"

    /**
     * The backends `FENCELOCK_TEST_BACKENDS` lists, null for every one; a name that is not a
     * backend's throws (again at each use: a misspelt name must not pass for a short list).
     */
    val selection: Set<String>? by lazy { parseSelection(System.getenv(SELECTION_VARIABLE)) }

    internal fun parseSelection(text: String?): Set<String>? {
        val names = text.orEmpty().split(',').map(String::trim).filter(String::isNotEmpty)
        if (names.isEmpty()) return null
        val unknown = names.filterNot(KNOWN::contains)
        require(unknown.isEmpty()) {
            "$SELECTION_VARIABLE=$text names no backend: ${unknown.joinToString()}; " +
                "the names are ${KNOWN.joinToString(",")} (unset or empty: every backend)"
        }
        return names.toSet()
    }

    /** Whether the tests of [backend] run: `FENCELOCK_TEST_BACKENDS` lists it, or is not set. */
    @JvmStatic
    fun isSelected(backend: String): Boolean = selection?.contains(backend) ?: true

    /** Skips the calling test unless [backend] is selected ([isSelected]). */
    @JvmStatic
    fun assumeSelected(backend: String) {
        assumeTrue(isSelected(backend)) {
            "$backend is not in $SELECTION_VARIABLE (the soak runs the full matrix: tests/faults/run.sh soak)"
        }
    }

    /**
     * The selected ones of [candidates], for a `@MethodSource`. JUnit fails a parameterized test
     * that gets no arguments, so a selection that leaves out every candidate gives them all back:
     * each of those invocations then skips at its first [url], [connect] or [openFence].
     */
    private fun selected(candidates: List<String>): List<String> =
        candidates.filter(::isSelected).ifEmpty { candidates }

    private val sqliteFile by lazy {
        val dir = Files.createTempDirectory("fencelock-jvm-test")
        dir.toFile().deleteOnExit()
        dir.resolve("locks.db").toAbsolutePath()
    }

    private fun env(name: String, default: String) = System.getenv(name)?.takeIf { it.isNotBlank() } ?: default

    /** Backend name to URL, every backend of [KNOWN]. */
    private val urls: Map<String, String> by lazy {
        mapOf(
            "sqlite" to "sqlite://$sqliteFile",
            "redis" to env("FENCELOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
            "redis-cluster" to
                env("FENCELOCK_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"),
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

    /** The matrix's backends, for `@MethodSource("dev.fencelock.Backends#names")`. */
    @JvmStatic
    fun names(): List<String> = selected(MATRIX)

    /** The backends that refuse semaphores with INVALID_ARGUMENT (docs/design.md §1.8). */
    private val noSemaphores = setOf("redlock")

    /** Whether `backend` offers semaphores. */
    @JvmStatic
    fun offersSemaphores(backend: String): Boolean = backend !in noSemaphores

    /** The backends that offer semaphores, Redis Cluster included. */
    @JvmStatic
    fun withSemaphores(): List<String> = selected(KNOWN.filter(::offersSemaphores))

    /** The backends that refuse semaphores: Redlock. */
    @JvmStatic
    fun withoutSemaphores(): List<String> = selected(KNOWN.filterNot(::offersSemaphores))

    /** Every backend offers read-write locks, Redis Cluster and Redlock included. */
    @JvmStatic
    fun withReadWriteLocks(): List<String> = selected(KNOWN)

    /** Every backend takes several names as one, Redis Cluster included: the parts are plain mutexes. */
    @JvmStatic
    fun withMultiLocks(): List<String> = selected(KNOWN)

    /** The backends with a ttl, where a lease that is not renewed is lost at its deadline: not ZooKeeper. */
    @JvmStatic
    fun withTtl(): List<String> = selected(MATRIX - "zookeeper")

    /** The backends a Fence can live on. */
    @JvmStatic
    fun withFences(): List<String> = selected(listOf("sqlite", "redis", "postgres", "mariadb"))

    /** The URL of [backend]; skips the calling test when it is not selected ([assumeSelected]). */
    @JvmStatic
    fun url(backend: String): String {
        val url = urls[backend] ?: error("unknown backend $backend: the names are ${KNOWN.joinToString()}")
        assumeSelected(backend)
        return url
    }

    /** Connects, or skips the test when the backend is not selected, or its server is down and not required. */
    fun connect(backend: String, options: ConnectOptions = ConnectOptions.DEFAULTS): Locker {
        val url = url(backend)
        try {
            return Locker.connect(url, options)
        } catch (e: LockUnavailableException) {
            if (required) throw e
            assumeTrue(false, "$backend is not running: ${e.message}")
            throw e
        }
    }

    fun openFence(backend: String, resource: String): Fence {
        val url = url(backend)
        try {
            return Fence.open(url, resource)
        } catch (e: LockUnavailableException) {
            if (required) throw e
            assumeTrue(false, "$backend is not running: ${e.message}")
            throw e
        }
    }

    /**
     * Polls until [thread] waits in a blocking call of fencelock's: an acquire whose first attempt
     * found the lock held, now waiting for its release, or a `waitLost`. An interrupt from then on
     * stops the wait itself, not the check on entry. (Only ZooKeeper shows a mutex's waiters to
     * inspect; a blocking call shows in its thread's stack, in the generated layer's wait.)
     */
    @JvmStatic
    fun awaitWaiting(thread: Thread, what: String) {
        val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(MARGIN_MS)
        while (true) {
            val stack = thread.stackTrace
            // Kotlin adds a suffix to the name of a method that takes an unsigned number: wait-….
            val waiting = stack.any {
                it.className.startsWith("dev.fencelock.ffi.") &&
                    it.methodName.substringBefore('-') in setOf("wait", "waitLostBlocking")
            }
            if (waiting) return
            if (!thread.isAlive) throw AssertionError("$what ended before it waited")
            if (System.nanoTime() - deadline > 0) {
                throw AssertionError("$what never waited in fencelock; its stack: ${stack.joinToString("\n  ")}")
            }
            Thread.sleep(5)
        }
    }

    /**
     * A SQLite database of its own, for a test whose backend under test is another (a fence's
     * locks, a lock's fence): it runs whatever `FENCELOCK_TEST_BACKENDS` lists.
     */
    fun scratchSqliteUrl(prefix: String): String =
        "sqlite://" + Files.createTempDirectory("fencelock-jvm-$prefix").resolve("$prefix.db").toAbsolutePath()

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
 * Reads `FENCELOCK_TEST_BACKENDS` before any test runs (registered in META-INF/services, so the
 * shedlock and spring modules, which run on this test jar, have it too): a name that is no
 * backend's fails the run at once, with the valid names, instead of every test that asks.
 */
class BackendSelectionCheck : LauncherSessionListener {
    override fun launcherSessionOpened(session: LauncherSession) {
        Backends.selection
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
