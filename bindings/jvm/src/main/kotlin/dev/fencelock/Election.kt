package dev.fencelock

import dev.fencelock.ffi.NativeLeader
import java.time.Duration
import java.util.concurrent.CompletableFuture

/**
 * Leadership of an election, won by [Locker.campaign] (or held for a block by
 * [Locker.withLeadership] and [Locker.runAsLeader]).
 *
 * It lasts while the election's [lease] is held: the lease renews itself, and leadership ends on
 * [resign], when the Locker closes, or the moment the lease is lost. Then [isLeader] turns false
 * and the lost listeners run: stop acting as leader.
 *
 * [term] is the lease's fencing token. Every new leader's term is larger, whoever wins and in
 * whatever language, so a [Fence] given [lease] (or the term) refuses a deposed leader's writes.
 * [close] resigns, so `try (Leadership l = locker.campaignBlocking("reports"))` leads for a block.
 */
class Leadership internal constructor(
    /** The election's lease, for fences: its token is the [term]. */
    val lease: Lease,
) : AutoCloseable {
    /** The election's name. */
    val name: String get() = lease.name

    /** This leader's term: larger than every earlier leader's of this election. */
    val term: Long get() = lease.token

    /** Still the leader: neither resigned nor lost. */
    val isLeader: Boolean get() = lease.isHeld

    /** Why leadership was lost, or null while it is not. */
    val lostReason: LossReason? get() = lease.lostReason

    /** Throws [LockLostException] (or [LockNotHeldException] after [resign]) unless still leading. */
    fun ensureLeader() = lease.ensureHeld()

    /** Calls [listener] once when leadership is lost, on a thread of fencelock's own. */
    fun onLost(listener: LostListener) = lease.onLost(listener)

    /** Suspends until leadership is lost and returns why. */
    @JvmSynthetic
    suspend fun awaitLost(): LossReason = lease.awaitLost()

    /** A future completed when leadership is lost (for Java). */
    fun lostFuture(): CompletableFuture<LossReason> = lease.lostFuture()

    /** Blocks until leadership is lost or [timeout] passes (forever when null); whether it is lost. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    fun waitLost(timeout: Duration? = null): Boolean = lease.waitLost(timeout)

    /**
     * Steps down, so another candidate can lead. Throws [LockNotHeldException] on a second
     * resign, [LockLostException] if leadership was lost first.
     */
    @JvmSynthetic
    suspend fun resign() = lease.release()

    /** [resign] for Java and other blocking code. */
    fun resignBlocking() = lease.releaseBlocking()

    /** [resign] as a `CompletableFuture` (of null); cancelling the future does not stop it. */
    fun resignAsync(): CompletableFuture<Void?> = lease.releaseAsync()

    /** Resigns unless already resigned; throws [LockLostException] if leadership was lost. */
    override fun close() = lease.close()

    override fun toString(): String = "Leadership(name=$name, term=$term, leader=$isLeader)"
}

/** Who leads an election now, as [Locker.leader] sees it without campaigning. */
data class Leader(
    /** The leader's term (its lease's fencing token). */
    val term: Long,
    /** The leader's description: host, pid, language, and the text it passed as `holder`. */
    val holder: LockInfo.Holder?,
) {
    internal constructor(leader: NativeLeader) : this(leader.term, leader.holder?.let(LockInfo::Holder))
}
