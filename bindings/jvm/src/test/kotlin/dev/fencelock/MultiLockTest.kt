package dev.fencelock

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.time.Duration
import java.time.Instant
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference
import kotlin.concurrent.thread

/**
 * The multi-name lock (docs/design.md §1.9) on every backend: `lockMany` holds every name as one
 * [MultiLease] and one release frees them; all or nothing, and an interrupted or cancelled
 * `lockMany` keeps nothing; opposite orders do not deadlock; a part forced away makes the whole
 * lost; a part guards a [Fence] as a single lease does; and bad name lists are refused with
 * [LockInvalidArgumentException], re-entry counting per thread and per coroutine.
 */
class MultiLockTest {
    companion object {
        /** Every backend, Redis Cluster included: the parts are plain mutexes, which all offer. */
        @JvmStatic
        fun backends() = Backends.withMultiLocks()

        private val HELD = LockOptions(ttl = Duration.ofSeconds(10))

        /** A wait that lasts until the test's deadline. */
        private val LONG_WAIT: Duration = Duration.ofMillis(Backends.MARGIN_MS)

        /** [n] fresh names sharing one prefix, so their canonical order is their index order. */
        fun names(prefix: String, n: Int): List<String> {
            val base = Backends.uniqueName(prefix)
            return List(n) { "$base-$it" }
        }

        /** Waits until nobody holds any of [names], as [observer] sees them. */
        suspend fun allFree(observer: Locker, names: List<String>) {
            for (name in names) Backends.inspectUntil(observer, name, "$name free") { !it.held }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `lockMany holds every name, in the canonical order, and one release frees them all`(backend: String): Unit =
        runBlocking {
            Backends.connect(backend).use { locker ->
                Backends.connect(backend).use { other ->
                    val set = names("many", 3)
                    val multi = locker.lockMany(listOf(set[2], set[0], set[1]), HELD)
                    assertEquals(set, multi.names, "the canonical order, not the order given")
                    assertEquals(set, multi.tokens.keys.toList())
                    assertEquals(set, multi.parts.map { it.name })
                    assertTrue(multi.isHeld)
                    assertFalse(multi.isLost)
                    assertNull(multi.lostReason)
                    multi.ensureHeld()
                    for ((name, token) in multi.tokens) {
                        val part = multi.part(name) ?: fail("$name is a part")
                        assertEquals(token, part.token)
                        assertEquals(LockMode.EXCLUSIVE, part.mode)
                        val info = other.inspect(name)
                        assertTrue(info.held, "$name is held")
                        assertEquals(token, info.token, "$name's token is the part's")
                        assertNull(other.tryAcquire(name), "$name has a second holder")
                    }
                    assertNull(multi.part("not-a-part"))
                    // Deadlines only move forward (renewals): each is read before what it must not pass,
                    // give or take the wall clock read anew for each (a second of slack, on a busy machine).
                    val validUntil = multi.validUntil
                    assertTrue(validUntil > Instant.now(), "valid until $validUntil")
                    val earliest = multi.parts.minOf { it.validUntil }
                    assertTrue(validUntil <= earliest.plusSeconds(1), "$validUntil is the earliest part's, $earliest")
                    if (backend == "zookeeper") {
                        assertNull(multi.expiresAt, "ZooKeeper has no ttl")
                    } else {
                        val expiresAt = multi.expiresAt ?: fail("no expiry estimate")
                        assertTrue(validUntil <= expiresAt, "valid until $validUntil, expires $expiresAt")
                    }
                    multi.extend()
                    multi.extendBlocking(Duration.ofSeconds(8))
                    multi.release()
                    assertFalse(multi.isHeld)
                    assertFalse(multi.isLost, "released, not lost")
                    assertFalse(multi.waitLost(Duration.ZERO))
                    multi.close() // quiet: already released
                    for (name in set) {
                        val next = other.tryAcquire(name) ?: fail("$name is free after the release")
                        assertTrue(next.token > multi.tokens.getValue(name), "tokens strictly increase")
                        next.release()
                    }
                    thrownBy<LockNotHeldException>("a second release") { multi.releaseBlocking() }
                    thrownBy<LockNotHeldException>("ensureHeld after release") { multi.ensureHeld() }
                }
            }
        }

    @ParameterizedTest
    @MethodSource("backends")
    fun `all or nothing - a busy name times out naming it, an interrupted or cancelled lockMany keeps nothing`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { locker ->
            Backends.connect(backend).use { rival ->
                val set = names("all-or-nothing", 3)
                // The middle name is busy: the first is taken, then given back when the wait runs out.
                val busy = rival.acquire(set[1], HELD)
                val timedOut = thrownBy<LockTimeoutException>("a busy name") {
                    locker.lockManyBlocking(set, HELD.copy(wait = Duration.ofMillis(300)))
                }
                assertTrue(set[1] in timedOut.message!!, timedOut.message)
                for (name in listOf(set[0], set[2])) {
                    val free = rival.tryAcquire(name) ?: fail("$name was kept by a failed lockMany")
                    free.release()
                }

                // A thread interrupted while it waits for the busy name, holding the first.
                val outcome = AtomicReference<Throwable?>()
                val interruptFlag = AtomicReference<Boolean>()
                val waiter = thread {
                    try {
                        locker.lockManyBlocking(set)
                    } catch (e: Throwable) {
                        outcome.set(e)
                        interruptFlag.set(Thread.currentThread().isInterrupted)
                    }
                }
                Backends.inspectUntil(rival, set[0], "the waiter holding ${set[0]}") { it.held }
                waiter.interrupt()
                waiter.join(Backends.MARGIN_MS)
                assertTrue(outcome.get() is InterruptedException, "interrupt gave ${outcome.get()}")
                assertEquals(
                    false,
                    interruptFlag.get(),
                    "the interrupt flag is cleared, as InterruptedException's convention",
                )
                allFree(rival, listOf(set[0], set[2]))

                // A coroutine cancelled while it waits: the same.
                thrownBy<TimeoutCancellationException>("a cancelled lockMany") {
                    withTimeout(300) { locker.lockMany(set) }
                }
                allFree(rival, listOf(set[0], set[2]))

                // Once the busy name is free, a waiting lockMany gets all three.
                val waiting = locker.lockManyAsync(set, HELD.copy(wait = LONG_WAIT))
                Backends.inspectUntil(rival, set[0], "the future holding ${set[0]}") { it.held }
                busy.release()
                val multi = waiting.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                assertTrue(multi.isHeld)
                assertEquals(set, multi.names)
                assertTrue(multi.tokens.getValue(set[1]) > busy.token)
                multi.close()
                allFree(rival, set)
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `two callers taking the same names in opposite orders do not deadlock`(backend: String): Unit = runBlocking {
        Backends.connect(backend).use { a ->
            Backends.connect(backend).use { b ->
                val set = names("opposite", 2)
                val rounds = 5
                val options = HELD.copy(wait = LONG_WAIT)
                // One caller blocking on a thread, the other suspending: the forms share one path.
                val forward = async(Dispatchers.IO) {
                    repeat(rounds) { a.lockManyBlocking(set, options).releaseBlocking() }
                }
                val backward = async {
                    repeat(rounds) { b.lockMany(set.reversed(), options).release() }
                }
                withTimeout(6 * Backends.MARGIN_MS) {
                    forward.await()
                    backward.await()
                }
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a part forced away makes the whole lost - listener, awaitLost, ensureHeld, LOST on close`(
        backend: String,
    ): Unit = runBlocking {
        Backends.connect(backend).use { holder ->
            Backends.connect(backend).use { operator ->
                val set = names("lost-part", 3)
                // Renewed every second, so the forced release is noticed within about that.
                val multi = holder.lockMany(set, LockOptions(ttl = Backends.RENEWING_TTL))
                val heard = CompletableFuture<Pair<LossReason, String>>()
                multi.onLost { reason, message -> heard.complete(reason to message) }
                val future = multi.lostFuture()
                operator.forceRelease(set[1])
                val (reason, message) = heard.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                assertEquals(LossReason.TAKEN_OVER, reason)
                assertTrue(set[1] in message, "the message names the part: $message")
                assertEquals(LossReason.TAKEN_OVER, future.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS))
                assertEquals(LossReason.TAKEN_OVER, withTimeout(Backends.MARGIN_MS) { multi.awaitLost() })
                assertTrue(multi.waitLost(Duration.ZERO))
                assertTrue(multi.isLost)
                assertFalse(multi.isHeld)
                assertEquals(LossReason.TAKEN_OVER, multi.lostReason)
                assertTrue(multi.part(set[1])!!.isLost, "the forced part is the lost one")
                thrownBy<LockLostException>("ensureHeld") { multi.ensureHeld() }
                thrownBy<LockLostException>("extend") { multi.extend() }
                // Leaving its block after the loss is loud, and still frees the parts that were held.
                thrownBy<LockLostException>("close after the loss") { multi.close() }
                multi.close() // once released (if lost), quiet
                for (name in listOf(set[0], set[2])) {
                    val free = operator.tryAcquire(name) ?: fail("$name was still held after the release")
                    free.release()
                }
                // A listener added after the loss is told too.
                val late = CompletableFuture<LossReason>()
                multi.onLost { r, _ -> late.complete(r) }
                assertEquals(LossReason.TAKEN_OVER, late.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS))
            }
        }
    }

    @ParameterizedTest
    @MethodSource("backends")
    fun `a part guards a fence as a single lease of its name does`(backend: String) {
        Backends.connect(backend).use { locker ->
            Backends.connect(backend).use { other ->
                val set = names("fenced", 2)
                Fence.open(Backends.scratchSqliteUrl("fence"), set[0]).use { fence ->
                    val select = listOf(Statement.of("SELECT 1"))
                    val older: Long
                    locker.lockManyBlocking(set, HELD).use { multi ->
                        val part = multi.part(set[0]) ?: fail("${set[0]} is a part")
                        assertEquals(1, fence.fencedExecuteBlocking(part, select).size)
                        fence.checkBlocking(part)
                        assertEquals(part.token, fence.highestBlocking())
                        // The other part is another lock to this fence.
                        thrownBy<LockInvalidArgumentException>("another name's part") {
                            fence.fencedExecuteBlocking(multi.part(set[1])!!, select)
                        }
                        older = part.token
                    }
                    // The name's next holder, alone, is ordered after the part.
                    other.acquireBlocking(set[0], HELD).use { next ->
                        assertTrue(next.token > older)
                        fence.fencedExecuteBlocking(next, select)
                    }
                    thrownBy<StaleTokenException>("the part's older token") { fence.checkBlocking(older) }
                }
            }
        }
    }

    @Test
    fun `bad name lists are refused with INVALID_ARGUMENT in every form, before anything is taken`(): Unit =
        runBlocking {
            Backends.connect("sqlite").use { locker ->
                Backends.connect("sqlite").use { other ->
                    val set = names("refused", 2)

                    @Suppress("UNCHECKED_CAST")
                    fun unchecked(vararg given: Any?) = given.toList() as List<String>
                    val cases = mapOf(
                        "no names" to emptyList<String>(),
                        "a name twice" to listOf(set[0], set[1], set[0]),
                        "65 names" to List(65) { "${set[0]}-$it" },
                        "an empty name" to listOf(set[0], ""),
                        "a name with NUL" to listOf(set[0], "a\u0000b"),
                        "a name of 256 bytes" to listOf(set[0], "n".repeat(256)),
                        "a lone surrogate" to listOf(set[0], "a\uD800"),
                        "a number among the names" to unchecked(set[0], 42),
                        "a null among the names" to unchecked(set[0], null),
                    )
                    for ((what, given) in cases) {
                        val e = thrownBy<LockInvalidArgumentException>("$what, suspend") { locker.lockMany(given) }
                        assertEquals(ErrorCode.INVALID_ARGUMENT, e.code)
                        assertFalse(e.message.isNullOrBlank(), what)
                        thrownBy<LockInvalidArgumentException>("$what, blocking") { locker.lockManyBlocking(given) }
                        val failed = thrownBy<ExecutionException>("$what, future") {
                            locker.lockManyAsync(given).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                        }
                        assertTrue(failed.cause is LockInvalidArgumentException, "$what, future: ${failed.cause}")
                    }
                    val number = thrownBy<LockInvalidArgumentException>("a number") {
                        locker.lockManyBlocking(unchecked(set[0], 42))
                    }
                    assertTrue("java.lang.Integer" in number.message!!, number.message)
                    // 64 names are fine.
                    locker.lockMany(List(64) { "${set[0]}-$it" }).release()
                    thrownBy<LockInvalidArgumentException>("a bad ttl") {
                        locker.lockMany(set, LockOptions(ttl = Duration.ofMillis(10)))
                    }
                    locker.lockMany(set).use { multi ->
                        thrownBy<LockInvalidArgumentException>("a negative extend") {
                            multi.extend(Duration.ofSeconds(-1))
                        }
                    }
                    for (name in set) {
                        val free = other.tryAcquire(name) ?: fail("$name was taken by a refused lockMany")
                        free.release()
                    }
                }
            }
        }

    @Test
    fun `re-entry counts per thread for lockManyBlocking and per coroutine for lockMany`(): Unit = runBlocking {
        Backends.connect("sqlite").use { locker ->
            val set = names("reentry", 2)
            // Per thread: a name this thread holds is DEADLOCK, unless reentrant.
            withContext(Dispatchers.IO) {
                locker.acquireBlocking(set[0], HELD).use { own ->
                    thrownBy<LockDeadlockException>("a held name, blocking") { locker.lockManyBlocking(set, HELD) }
                    val nested = locker.lockManyBlocking(set, HELD.copy(reentrant = true))
                    assertEquals(own.token, nested.tokens[set[0]], "the nested part shares the held lease")
                    nested.releaseBlocking()
                    assertTrue(own.isHeld, "the outer acquisition still holds its name")
                    // A future is a scope of its own: it waits for the thread's lease instead.
                    val elsewhere = locker.lockManyAsync(set, HELD.copy(wait = Duration.ofMillis(200)))
                    val failed = thrownBy<ExecutionException>("a future") {
                        elsewhere.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)
                    }
                    assertTrue(failed.cause is LockTimeoutException, "a future: ${failed.cause}")
                }
            }
            // Per coroutine: the block of withLock is one scope.
            locker.withLock(set[1], HELD) { own ->
                thrownBy<LockDeadlockException>("a held name, suspend") { locker.lockMany(set, HELD) }
                val nested = locker.lockMany(set, HELD.copy(reentrant = true))
                assertEquals(own.token, nested.part(set[1])?.token)
                nested.release()
                assertTrue(own.isHeld)
            }
            // Everything was given back: another Locker takes both names at once.
            Backends.connect("sqlite").use { other ->
                other.lockMany(set, LockOptions(wait = Duration.ZERO)).release()
            }
        }
    }
}
