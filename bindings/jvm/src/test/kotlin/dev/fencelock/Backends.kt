package dev.fencelock

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

    /** Fence URLs: the backends a Fence can live on. */
    val fences: Map<String, String> by lazy {
        all.filterKeys { it in setOf("sqlite", "redis", "postgres", "mariadb") }
    }

    fun url(backend: String): String = all[backend] ?: error("unknown backend $backend")

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
}
