package dev.fencelock

import dev.fencelock.ffi.NativeLogLevel
import dev.fencelock.ffi.NativeLogRecord
import dev.fencelock.ffi.NativeLogSubscription
import dev.fencelock.ffi.subscribeLogs
import org.slf4j.Logger
import org.slf4j.LoggerFactory
import org.slf4j.MDC
import java.time.Duration

/**
 * fencelock's log records, into SLF4J: the logger `fencelock`, with the lock's name in the MDC
 * key `lock` when a record is about one lock.
 *
 * The native core queues its records; one daemon thread, `fencelock-logging`, started when the
 * first Locker connects, takes them out and logs them. The core queues only records at the
 * logger's level or above (a level that is off costs nothing), and the thread follows level
 * changes each time it wakes (at least every [LEVEL_CHECK]). No record holds a password.
 */
internal object LogBridge {
    val logger: Logger = LoggerFactory.getLogger("fencelock")

    /** How long the thread waits for a record before looking at the logger's level again. */
    private val LEVEL_CHECK: Duration = Duration.ofSeconds(2)

    @Volatile
    private var started = false

    fun ensureStarted() {
        if (started) return
        synchronized(this) {
            if (started) return
            val subscription = subscribeLogs(levelWanted())
            Thread({ forward(subscription) }, "fencelock-logging").apply {
                isDaemon = true
                start()
            }
            started = true
        }
    }

    /** The most verbose level the logger takes (ERROR when it takes none: errors are rare). */
    private fun levelWanted(): NativeLogLevel = when {
        logger.isTraceEnabled -> NativeLogLevel.TRACE
        logger.isDebugEnabled -> NativeLogLevel.DEBUG
        logger.isInfoEnabled -> NativeLogLevel.INFO
        logger.isWarnEnabled -> NativeLogLevel.WARN
        else -> NativeLogLevel.ERROR
    }

    private fun forward(subscription: NativeLogSubscription) {
        var level = levelWanted()
        while (true) {
            val record = try {
                ffi { subscription.recvBlocking(LEVEL_CHECK) }
            } catch (e: FencelockException) {
                logger.error("fencelock: the logging thread failed; no more records are forwarded", e)
                return
            }
            val now = levelWanted()
            if (now != level) {
                level = now
                subscription.setLevel(now)
            }
            if (record != null) log(record)
        }
    }

    private fun log(record: NativeLogRecord) {
        // Under the MDC of the call that produced it, when it came from one (a request id).
        val callers = Callers[record.caller]?.mdc
        if (callers != null) MDC.setContextMap(callers)
        val lock = record.lock
        if (lock != null) MDC.put("lock", lock)
        try {
            when (record.level) {
                NativeLogLevel.ERROR -> logger.error(record.message)
                NativeLogLevel.WARN -> logger.warn(record.message)
                NativeLogLevel.INFO -> logger.info(record.message)
                NativeLogLevel.DEBUG -> logger.debug(record.message)
                NativeLogLevel.TRACE -> logger.trace(record.message)
            }
        } finally {
            if (callers != null) {
                MDC.clear()
            } else if (lock != null) {
                MDC.remove("lock")
            }
        }
    }
}
