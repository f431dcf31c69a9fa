package dev.fencelock

import dev.fencelock.ffi.NativeConnectOptions
import dev.fencelock.ffi.NativeLockOptions
import java.time.Duration

/**
 * Options of one acquisition, one meaning in every language (docs/design.md §4.1).
 *
 * Kotlin: `LockOptions(ttl = Duration.ofSeconds(10), wait = Duration.ZERO)` or
 * `options.copy(...)`. Java: `LockOptions.builder().ttl(Duration.ofSeconds(10)).build()`.
 * Negative durations are refused at once with [LockInvalidArgumentException]; the ranges (ttl
 * at least 100 ms, at most 7 days; wait at most a year) are checked by the core at acquire.
 */
data class LockOptions(
    /** Lease length on TTL backends (default 30 s); ZooKeeper's liveness is its session. */
    val ttl: Duration = DEFAULT_TTL,
    /** How long acquire may block: `null` (the default) waits forever, [Duration.ZERO] tries once. */
    val wait: Duration? = null,
    /** Renew every ttl/3 while held (default on). */
    val autoRenew: Boolean = true,
    /** Stop renewing after this long, so a stuck holder cannot keep the lock forever (default none). */
    val maxHold: Duration? = null,
    /** Re-entry by the same thread (blocking calls) or coroutine (suspend calls); default off. */
    val reentrant: Boolean = false,
    /** Free text stored with the holder's description (host and pid are added). */
    val holder: String? = null,
    /** `release()` returns once the release is sent; its reply is still checked (docs/design.md §8.4). */
    val pipelinedRelease: Boolean = false,
) {
    init {
        requireNotNegative(ttl, "ttl")
        wait?.let { requireNotNegative(it, "wait") }
        maxHold?.let { requireNotNegative(it, "maxHold") }
    }

    fun toBuilder(): Builder = Builder(this)

    internal fun toNative() = NativeLockOptions(
        ttl = ttl,
        wait = wait,
        autoRenew = autoRenew,
        maxHold = maxHold,
        reentrant = reentrant,
        holder = holder,
        pipelinedRelease = pipelinedRelease,
    )

    /** Builds [LockOptions] from Java; every setter's default is the field's. */
    class Builder internal constructor(private var options: LockOptions) {
        fun ttl(ttl: Duration?) = apply {
            options =
                options.copy(ttl = ttl ?: invalidArgument("ttl must not be null; leave it out for the default of 30 s"))
        }

        /** `null` waits forever; [Duration.ZERO] tries once. */
        fun wait(wait: Duration?) = apply { options = options.copy(wait = wait) }
        fun autoRenew(on: Boolean) = apply { options = options.copy(autoRenew = on) }
        fun maxHold(maxHold: Duration?) = apply { options = options.copy(maxHold = maxHold) }
        fun reentrant(on: Boolean) = apply { options = options.copy(reentrant = on) }
        fun holder(holder: String?) = apply { options = options.copy(holder = holder) }
        fun pipelinedRelease(on: Boolean) = apply { options = options.copy(pipelinedRelease = on) }
        fun build(): LockOptions = options
    }

    companion object {
        @JvmField
        val DEFAULT_TTL: Duration = Duration.ofSeconds(30)

        /** Every option at its default: ttl 30 s, wait forever, auto-renew on. */
        @JvmField
        val DEFAULTS = LockOptions()

        @JvmStatic
        fun builder(): Builder = Builder(DEFAULTS)
    }
}

/**
 * Options of a campaign for leadership ([Locker.campaign], [Locker.withLeadership],
 * [Locker.runAsLeader]): the election lock's options, without `reentrant`, since a leader never
 * campaigns again (docs/design.md §1.6). `options.ttl` bounds how long a leader that died
 * unannounced keeps the role.
 *
 * Kotlin: `CampaignOptions(ttl = Duration.ofSeconds(10))`. Java:
 * `CampaignOptions.builder().ttl(Duration.ofSeconds(10)).build()`.
 */
data class CampaignOptions(
    /** Lease length of the election's lock on TTL backends (default 30 s). */
    val ttl: Duration = LockOptions.DEFAULT_TTL,
    /** How long to campaign: `null` (the default) waits forever, [Duration.ZERO] tries once. */
    val wait: Duration? = null,
    /** Renew every ttl/3 while leading (default on). */
    val autoRenew: Boolean = true,
    /** Stop renewing after this long of leadership: the term then ends at its next deadline. */
    val maxHold: Duration? = null,
    /** Free text stored with the leader's description; observers see it in [Locker.leader]. */
    val holder: String? = null,
    /** Resigning returns once the release is sent; its reply is still checked (docs/design.md §8.4). */
    val pipelinedRelease: Boolean = false,
) {
    init {
        requireNotNegative(ttl, "ttl")
        wait?.let { requireNotNegative(it, "wait") }
        maxHold?.let { requireNotNegative(it, "maxHold") }
    }

    fun toBuilder(): Builder = Builder(this)

    internal fun toNative() = NativeLockOptions(
        ttl = ttl,
        wait = wait,
        autoRenew = autoRenew,
        maxHold = maxHold,
        reentrant = false,
        holder = holder,
        pipelinedRelease = pipelinedRelease,
    )

    /** Builds [CampaignOptions] from Java; every setter's default is the field's. */
    class Builder internal constructor(private var options: CampaignOptions) {
        fun ttl(ttl: Duration?) = apply {
            options =
                options.copy(ttl = ttl ?: invalidArgument("ttl must not be null; leave it out for the default of 30 s"))
        }

        /** `null` waits forever; [Duration.ZERO] tries once. */
        fun wait(wait: Duration?) = apply { options = options.copy(wait = wait) }
        fun autoRenew(on: Boolean) = apply { options = options.copy(autoRenew = on) }
        fun maxHold(maxHold: Duration?) = apply { options = options.copy(maxHold = maxHold) }
        fun holder(holder: String?) = apply { options = options.copy(holder = holder) }
        fun pipelinedRelease(on: Boolean) = apply { options = options.copy(pipelinedRelease = on) }
        fun build(): CampaignOptions = options
    }

    companion object {
        /** Every option at its default: ttl 30 s, campaign forever, auto-renew on. */
        @JvmField
        val DEFAULTS = CampaignOptions()

        @JvmStatic
        fun builder(): Builder = Builder(DEFAULTS)
    }
}

/** Options of a [Locker]; `null` means the core's default. A [Fence] takes [FenceOptions]. */
data class ConnectOptions(
    /** Base interval of the fallback poll while waiting (default 50 ms, jittered). */
    val pollInterval: Duration? = null,
    /** How long one backend operation may take before it is UNAVAILABLE (default 10 s). */
    val operationTimeout: Duration? = null,
    /**
     * Record the Locker's metrics into OpenTelemetry's Java API (`io.opentelemetry:opentelemetry-api`
     * must be on the class path), on the meter "fencelock" of `GlobalOpenTelemetry`: set it up
     * before connecting. Default off.
     */
    val metrics: Boolean = false,
    /**
     * Hand the Locker's metrics to this recorder instead (Micrometer's, in fencelock-spring's
     * `FencelockMeterBinder`, or one of your own); not together with [metrics]. Default none.
     */
    val metricsRecorder: MetricsRecorder? = null,
    /**
     * Make OpenTelemetry spans (`io.opentelemetry:opentelemetry-api` must be on the class path)
     * with the tracer "fencelock" of `GlobalOpenTelemetry`: `fencelock.acquire` (waiting
     * included), `fencelock.release`, `fencelock.extend`, each a child of the `Context` current
     * where it was called, and `fencelock.renew`, root spans linked to their acquire's; with the
     * attributes `fencelock.backend`, `fencelock.lock`, `fencelock.mode`, `fencelock.outcome`,
     * `fencelock.token`. Default off.
     */
    val tracing: Boolean = false,
) {
    init {
        pollInterval?.let { requireNotNegative(it, "pollInterval") }
        operationTimeout?.let { requireNotNegative(it, "operationTimeout") }
        if (metrics && metricsRecorder != null) {
            invalidArgument("metrics = true and a metricsRecorder: the measurements go to one of them, choose which")
        }
    }

    internal fun toNative() = NativeConnectOptions(pollInterval = pollInterval, operationTimeout = operationTimeout)

    class Builder internal constructor(private var options: ConnectOptions) {
        fun pollInterval(d: Duration?) = apply { options = options.copy(pollInterval = d) }
        fun operationTimeout(d: Duration?) = apply { options = options.copy(operationTimeout = d) }
        fun metrics(on: Boolean) = apply { options = options.copy(metrics = on) }
        fun metricsRecorder(recorder: MetricsRecorder?) = apply { options = options.copy(metricsRecorder = recorder) }
        fun tracing(on: Boolean) = apply { options = options.copy(tracing = on) }
        fun build(): ConnectOptions = options
    }

    companion object {
        @JvmField
        val DEFAULTS = ConnectOptions()

        @JvmStatic
        fun builder(): Builder = Builder(DEFAULTS)
    }
}

/**
 * Options of a [Fence] (`Fence.open`); `null` means the core's default. The same as the
 * [ConnectOptions] of a Locker without `metrics`: a fence takes no locks, so it records none.
 */
data class FenceOptions(
    /** Checked like a Locker's (1 ms to 60 s), though a fence never waits (default 50 ms). */
    val pollInterval: Duration? = null,
    /** How long one backend operation may take before it is UNAVAILABLE (default 10 s). */
    val operationTimeout: Duration? = null,
    /** Make a `fencelock.fence.write` span of each fenced write, as [ConnectOptions.tracing]. */
    val tracing: Boolean = false,
) {
    init {
        pollInterval?.let { requireNotNegative(it, "pollInterval") }
        operationTimeout?.let { requireNotNegative(it, "operationTimeout") }
    }

    internal fun toNative() = NativeConnectOptions(pollInterval = pollInterval, operationTimeout = operationTimeout)

    class Builder internal constructor(private var options: FenceOptions) {
        fun pollInterval(d: Duration?) = apply { options = options.copy(pollInterval = d) }
        fun operationTimeout(d: Duration?) = apply { options = options.copy(operationTimeout = d) }
        fun tracing(on: Boolean) = apply { options = options.copy(tracing = on) }
        fun build(): FenceOptions = options
    }

    companion object {
        @JvmField
        val DEFAULTS = FenceOptions()

        @JvmStatic
        fun builder(): Builder = Builder(DEFAULTS)
    }
}

private fun requireNotNegative(d: Duration, what: String) {
    if (d.isNegative) invalidArgument("$what must not be negative, got $d")
}

/** The longest wait a timeout stands for: about 73 years, far from any overflow of nanoTime. */
private val LONGEST_WAIT: Duration = Duration.ofNanos(Long.MAX_VALUE / 4)

/**
 * A timeout in nanoseconds, at most [LONGEST_WAIT] (Duration.toNanos throws past 292 years);
 * a negative one is refused as [what].
 */
internal fun timeoutNanos(timeout: Duration, what: String): Long {
    requireNotNegative(timeout, what)
    return timeout.coerceAtMost(LONGEST_WAIT).toNanos()
}
